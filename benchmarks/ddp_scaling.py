"""DDP scaling of the small GPT's training step: 1, 2 and 4 processes,
tpu_dist on tpu against Gloo on CPU.

    python benchmarks/ddp_scaling.py [--steps 20] [--worlds 1,2,4] [--mode strict] [--smoke]

For each world size N, N ranks (subprocesses of this script) join one group
made with `backend="cpu:gloo,tpu:tpu_dist"` and wrap the benchmarks' small
GPT (TinyTransformer, 2 layers, dim 64, sequence 32, batch 8 per rank) in
DistributedDataParallel twice: on CPU (Gloo all-reduces) and on tpu
(tpu_dist, host-staged; --mode strict or fused). Each side runs 3 warm-up
steps, then --steps timed steps (forward, cross-entropy, backward with the
gradient all-reduce, AdamW step), ending with a host read of the loss. Reported per
world size: steps/s per process (rank 0's wall time) and in total (x N, as
each rank trains its own batch), scaling against 1 process, and the ratio
tpu / CPU. This machine's processes share its cores, so total throughput
cannot scale past the cores; the ratios and the per-process cost of the
collectives are the point. Writes results/ddp_scaling.json and .md.
"""
import common  # noqa: F401  (first: sets the cache environment before torch)

import argparse
import datetime
import json
import os
import subprocess
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F

from common import MODES, TinyTransformer, now, ratio, table, write_results


def child(rank, world, init_file, steps, mode, small):
    dist.init_process_group("cpu:gloo,tpu:tpu_dist", init_method=f"file://{init_file}",
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=600))
    seq, dim = (8, 32) if small else (32, 64)
    out = {}
    for side, device in (("cpu", "cpu"), ("tpu", "tpu")):
        if device == "tpu":
            common.torch_tpu.set_eager_mode(MODES[mode])
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(
            TinyTransformer(vocab=256, dim=dim, layers=2, seq=seq).to(device))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(rank)
        tokens = torch.randint(0, 256, (8, seq + 1), generator=g).to(device)
        x, y = tokens[:, :-1], tokens[:, 1:]

        def step():
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        for _ in range(3):
            step().item()
        dist.barrier()
        t0 = now()
        for _ in range(steps):
            loss = step()
        loss.item()
        out[side] = steps / (now() - t0)
    if rank == 0:
        print(json.dumps(out))
    dist.destroy_process_group()


def run_world(world, steps, mode, small):
    with tempfile.TemporaryDirectory(prefix="torch_tpu_ddp_scaling_") as d:
        cmd = [common.python(), os.path.abspath(__file__), "--init-file", os.path.join(d, "init"),
               "--steps", str(steps), "--mode", mode, "--world", str(world)]
        if small:
            cmd.append("--smoke")
        procs = [subprocess.Popen(cmd + ["--rank", str(r)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in range(world)]
        outs = [proc.communicate(timeout=1800) for proc in procs]
    for r, (proc, (out, err)) in enumerate(zip(procs, outs)):
        if proc.returncode != 0:
            raise RuntimeError(f"world {world} rank {r} failed:\n{err[-3000:]}")
    return json.loads(outs[0][0].strip().splitlines()[-1])


def main():
    p = common.parser(__doc__)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--worlds", default="1,2,4")
    p.add_argument("--mode", default="strict", choices=["strict", "fused"])
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, help=argparse.SUPPRESS)
    p.add_argument("--init-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank is not None:
        return child(args.rank, args.world, args.init_file, args.steps, args.mode, args.smoke)
    worlds = [int(w) for w in args.worlds.split(",")]
    if args.smoke:
        args.steps, worlds = 2, [1, 2]
    rows = []
    for world in worlds:
        r = run_world(world, args.steps, args.mode, args.smoke)
        rows.append({"world": world, "cpu_steps_per_s": r["cpu"], "tpu_steps_per_s": r["tpu"],
                     "cpu_total": r["cpu"] * world, "tpu_total": r["tpu"] * world})
    base = rows[0]
    for r in rows:
        r["cpu_scaling"] = ratio(r["cpu_total"], base["cpu_total"])
        r["tpu_scaling"] = ratio(r["tpu_total"], base["tpu_total"])
        r["tpu_over_cpu"] = ratio(r["tpu_steps_per_s"], r["cpu_steps_per_s"])
    md = (f"DDP scaling, small GPT train step ({args.mode} on tpu), {args.steps} steps, "
          "processes on one machine\n\n")
    md += table(["processes", "CPU+gloo steps/s per process", "tpu+tpu_dist steps/s per process",
                 "CPU total", "tpu total", "CPU scaling", "tpu scaling", "tpu / CPU"],
                [[r["world"], f"{r['cpu_steps_per_s']:.2f}", f"{r['tpu_steps_per_s']:.2f}",
                  f"{r['cpu_total']:.2f}", f"{r['tpu_total']:.2f}", f"{r['cpu_scaling']:.2f}",
                  f"{r['tpu_scaling']:.2f}", f"{r['tpu_over_cpu']:.2f}"] for r in rows])
    write_results(args.out, "ddp_scaling", {"smoke": args.smoke, "steps": args.steps,
                                            "mode": args.mode, "rows": rows}, md)


if __name__ == "__main__":
    main()
