"""Collective bus bandwidth on 2 ranks: tpu_dist's two transports against
gloo on CPU tensors.

    python benchmarks/collectives.py [--repeats 10] [--max-mib 64] [--smoke]
                                     [--collectives all_reduce,send_recv,...]

Two ranks (subprocesses of this script) join one process group made with
`backend="cpu:gloo,tpu:tpu_dist"`, so the same `dist.all_reduce` call takes
tpu_dist for a tpu tensor and Gloo for a CPU tensor. For each message size
(1 KiB to --max-mib MiB, powers of 4) and each side, each collective
(all_reduce SUM, all_gather_into_tensor, reduce SUM to rank 0, gather to
rank 0, scatter from rank 0, and a send from rank 0 received by rank 1;
--collectives picks some) runs --repeats times after one warm-up; a rep ends
with `torch.tpu.synchronize()` on the tpu side (the results are back in
device memory). Reported: the median time per call over the reps (rank 0),
and the bus bandwidth as nccl-tests defines it — all_reduce: bytes / time
x 2(n-1)/n; all_gather, gather, scatter: the n ranks' bytes / time x
(n-1)/n; reduce, send_recv: bytes / time — with the ratio
tpu_dist / gloo. tpu_dist's extra cost is the device<->host copies and the
small signature exchange before each collective (TORCH_TPU_DIST_CHECKS=0
skips it; `--no-checks`).

The device-native column runs the same loop with the 2 ranks as threads of
one process, rank r on tpu:r of one client with 2 devices
(TORCH_TPU_NUM_DEVICES=2): tpu_dist then runs each collective as one
StableHLO collective in a PJRT program across both devices (no host copies,
no Gloo); ranks meet at a thread barrier instead of dist.barrier. Reported
with the ratios native / gloo and native / host-staged. Writes
results/collectives.json and .md.
"""
import common  # noqa: F401  (first: sets the cache environment before torch)

import argparse
import datetime
import json
import os
import subprocess
import tempfile
import threading

import torch
import torch.distributed as dist

from common import median, now, ratio, table, write_results

WORLD = 2
COLLECTIVES = ("all_reduce", "all_gather", "reduce", "gather", "scatter", "send_recv")


def sizes(max_mib, smoke):
    if smoke:
        return [1024, 64 * 1024]
    out, n = [], 1024
    while n <= max_mib * 1024 * 1024:
        out.append(n)
        n *= 4
    if out[-1] != max_mib * 1024 * 1024:
        out.append(max_mib * 1024 * 1024)
    return out


def run_once(name, x, out):
    rank = dist.get_rank()
    if name == "all_reduce":
        dist.all_reduce(x)
    elif name == "all_gather":
        dist.all_gather_into_tensor(out, x)
    elif name == "reduce":
        dist.reduce(x, dst=0)
    elif name == "gather":
        dist.gather(x, list(out.chunk(WORLD)) if rank == 0 else None, dst=0)
    elif name == "scatter":
        dist.scatter(x, list(out.chunk(WORLD)) if rank == 0 else None, src=0)
    elif rank == 0:  # send_recv
        dist.send(x, dst=1)
    elif rank == 1:
        dist.recv(x, src=0)
    if x.device.type == "tpu":
        torch.tpu.synchronize()


def timed(name, nbytes, device, repeats, meet):
    """Median seconds of one collective of `nbytes` per rank on `device`,
    after a warm-up (connections, programs); `meet` lines the ranks up."""
    x = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    out = torch.empty(WORLD * x.numel(), dtype=x.dtype, device=device)
    run_once(name, x, out)
    times = []
    for _ in range(repeats):
        meet()
        t0 = now()
        run_once(name, x, out)
        times.append(now() - t0)
    return median(times)


def busbw(name, nbytes, seconds):
    """nccl-tests' bus bandwidth in GB/s."""
    if name in ("reduce", "send_recv"):
        return nbytes / seconds / 1e9
    factor = 2 * (WORLD - 1) / WORLD if name == "all_reduce" else (WORLD - 1) / WORLD
    moved = nbytes if name == "all_reduce" else nbytes * WORLD
    return moved / seconds * factor / 1e9


def child(rank, init_file, byte_sizes, repeats, collectives):
    """One rank: times every (collective, size, side); rank 0 prints JSON."""
    dist.init_process_group("cpu:gloo,tpu:tpu_dist", init_method=f"file://{init_file}",
                            rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=300))
    rows = []
    for name in collectives:
        for nbytes in byte_sizes:
            row = {"collective": name, "bytes": nbytes}
            for side, device in (("gloo", "cpu"), ("tpu_dist", "tpu")):
                t = timed(name, nbytes, device, repeats, dist.barrier)
                row[f"{side}_us"] = t * 1e6
                row[f"{side}_busbw_gbs"] = busbw(name, nbytes, t)
            row["tpu_dist_over_gloo_busbw"] = ratio(row["tpu_dist_busbw_gbs"],
                                                    row["gloo_busbw_gbs"])
            rows.append(row)
    if rank == 0:
        print(json.dumps(rows))
    dist.destroy_process_group()


def native_child(byte_sizes, repeats, collectives):
    """Both ranks as threads of this process on tpu:0 and tpu:1 (native
    transport); prints rank 0's JSON rows."""
    from torch.testing._internal.distributed import multi_threaded_pg

    import torch_tpu

    multi_threaded_pg._install_threaded_pg()  # torch.distributed's state per thread
    torch._C._distributed_c10d._set_thread_isolation_mode(True)  # group names too
    store = dist.HashStore()
    barrier = threading.Barrier(WORLD)
    rows, errors = [], []

    def rank_main(rank):
        try:
            dist.init_process_group("tpu_dist", store=store, rank=rank, world_size=WORLD,
                                    timeout=datetime.timedelta(seconds=300))
            device = torch.device("tpu", rank)
            for name in collectives:
                for nbytes in byte_sizes:
                    t = timed(name, nbytes, device, repeats, barrier.wait)
                    if rank == 0:
                        rows.append({"collective": name, "bytes": nbytes, "native_us": t * 1e6})
            counts = torch_tpu.metrics()
            assert counts.get("collectives_native", 0) > 0, counts  # the transport ran
            assert counts.get("collectives_host_staged", 0) == 0, counts  # and only it
            dist.destroy_process_group()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
            barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(WORLD)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(errors)
    print(json.dumps(rows))


def main():
    p = common.parser(__doc__)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--max-mib", type=int, default=64)
    p.add_argument("--no-checks", action="store_true",
                   help="TORCH_TPU_DIST_CHECKS=0: no signature exchange before collectives")
    p.add_argument("--collectives", default=",".join(COLLECTIVES),
                   help=f"comma-separated, of {', '.join(COLLECTIVES)}")
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--init-file", help=argparse.SUPPRESS)
    p.add_argument("--sizes", help=argparse.SUPPRESS)
    p.add_argument("--native", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    collectives = args.collectives.split(",")
    unknown = sorted(set(collectives) - set(COLLECTIVES))
    if unknown:
        p.error(f"unknown collectives {unknown}; choose from {', '.join(COLLECTIVES)}")
    if args.native:
        return native_child(json.loads(args.sizes), args.repeats, collectives)
    if args.rank is not None:
        return child(args.rank, args.init_file, json.loads(args.sizes), args.repeats, collectives)
    if args.smoke:
        args.repeats = 2
    byte_sizes = sizes(args.max_mib, args.smoke)
    env = dict(os.environ)
    if args.no_checks:
        env["TORCH_TPU_DIST_CHECKS"] = "0"
    with tempfile.TemporaryDirectory(prefix="torch_tpu_collectives_") as d:
        cmd = [common.python(), os.path.abspath(__file__), "--init-file",
               os.path.join(d, "init"), "--sizes", json.dumps(byte_sizes),
               "--repeats", str(args.repeats), "--collectives", args.collectives]
        procs = [subprocess.Popen(cmd + ["--rank", str(r)], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in range(WORLD)]
        outs = [proc.communicate(timeout=1800) for proc in procs]
        native = subprocess.run(cmd + ["--native"], env=dict(env, TORCH_TPU_NUM_DEVICES=str(WORLD)),
                                capture_output=True, text=True, timeout=1800)
    for r, (proc, (out, err)) in enumerate(zip(procs, outs)):
        if proc.returncode != 0:
            raise RuntimeError(f"rank {r} failed:\n{err[-3000:]}")
    if native.returncode != 0:
        raise RuntimeError(f"native ranks failed:\n{native.stderr[-3000:]}")
    rows = json.loads(outs[0][0].strip().splitlines()[-1])
    native_rows = json.loads(native.stdout.strip().splitlines()[-1])
    for row, nat in zip(rows, native_rows):
        assert (row["collective"], row["bytes"]) == (nat["collective"], nat["bytes"])
        row["native_us"] = nat["native_us"]
        row["native_busbw_gbs"] = busbw(row["collective"], row["bytes"], nat["native_us"] / 1e6)
        row["native_over_gloo_busbw"] = ratio(row["native_busbw_gbs"], row["gloo_busbw_gbs"])
        row["native_over_host_staged_busbw"] = ratio(row["native_busbw_gbs"],
                                                     row["tpu_dist_busbw_gbs"])

    def size(n):
        return f"{n // (1024 * 1024)} MiB" if n >= 1024 * 1024 else f"{n // 1024} KiB"

    md = (f"Collective bus bandwidth, {WORLD} processes on one machine, float32, median of "
          f"{args.repeats} (signature checks {'off' if args.no_checks else 'on'})\n\n")
    md += ("tpu_dist host-staged: 2 processes; tpu_dist native: 2 ranks as threads of one "
           "process on tpu:0 and tpu:1 (one XLA:CPU client).\n\n")
    md += table(["collective", "size per rank", "gloo (CPU) µs", "host-staged µs", "native µs",
                 "gloo busbw GB/s", "host-staged busbw GB/s", "native busbw GB/s",
                 "host-staged / gloo", "native / gloo", "native / host-staged"],
                [[r["collective"], size(r["bytes"]), f"{r['gloo_us']:.0f}",
                  f"{r['tpu_dist_us']:.0f}", f"{r['native_us']:.0f}",
                  f"{r['gloo_busbw_gbs']:.3f}", f"{r['tpu_dist_busbw_gbs']:.3f}",
                  f"{r['native_busbw_gbs']:.3f}", f"{r['tpu_dist_over_gloo_busbw']:.2f}",
                  f"{r['native_over_gloo_busbw']:.2f}",
                  f"{r['native_over_host_staged_busbw']:.2f}"]
                 for r in rows])
    write_results(args.out, "collectives", {"smoke": args.smoke, "world": WORLD,
                                            "repeats": args.repeats,
                                            "checks": not args.no_checks, "rows": rows}, md)


if __name__ == "__main__":
    main()
