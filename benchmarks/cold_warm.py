"""First training step with a cold versus a warm on-disk compile cache.

    python benchmarks/cold_warm.py [--repeats 3] [--modes strict fused] [--smoke]

For each model (quickstart MLP, small transformer) and eager mode, a new
subprocess runs the first training steps with TORCH_TPU_CACHE_DIR set to a
fresh empty temporary folder (cold: every program compiles), then a second
subprocess runs the same on that folder (warm: programs load from disk). Each
child reports its first-step time (step 1 then synchronize), its second-step
time (in-memory cache) and its cache statistics. Median over --repeats fresh
folders; ratio warm/cold. Writes results/cold_warm.json and cold_warm.md.

With the CPU plugin, the client starts a background warm-up of the runtime's
matmul kernels (oneDNN's once-per-process JIT, ~40 ms) when the model moves
to tpu, in the untimed setup; before, the first step paid it. Run with
TORCH_TPU_WARMUP=0 to see the step without it (benchmarks/README.md).
"""
import common  # noqa: F401  (first: sets the cache environment before torch)

import json
import os
import subprocess
import tempfile

import torch
import torch_tpu

from common import Task, median, now, ratio, table, write_results

MODELS = ("mlp", "transformer")


def child(kind, mode, small):
    """Runs in the subprocess: prints one JSON line with its timings."""
    device = common.set_mode(mode)
    start = now()
    task = Task(kind, device, small=small)
    torch.tpu.synchronize()
    setup = now() - start
    times = []
    stats = []
    for _ in range(2):
        t0 = now()
        task.step()
        torch.tpu.synchronize()
        times.append(now() - t0)
        stats.append(torch_tpu.cache_stats())
    print(json.dumps({"first_step_s": times[0], "second_step_s": times[1], "setup_s": setup,
                      "first_step_cache": stats[0], "loss": task.loss.item()}))


def spawn(kind, mode, cache_dir, small):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache_dir, TORCH_TPU_DISK_CACHE="1")
    cmd = [common.python(), os.path.abspath(__file__), "--child", kind, "--mode", mode]
    if small:
        cmd.append("--smoke")
    start = now()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    wall = now() - start
    if done.returncode != 0:
        raise RuntimeError(f"child {kind}/{mode} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = wall
    return result


def measure(kind, mode, repeats, small):
    runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="torch_tpu_cold_") as d:
            runs.append((spawn(kind, mode, d, small), spawn(kind, mode, d, small)))
    row = {"model": kind, "mode": mode, "runs": [{"cold": c, "warm": w} for c, w in runs]}
    for phase, i in (("cold", 0), ("warm", 1)):
        for key in ("first_step_s", "second_step_s", "process_s"):
            row[f"{phase}_{key}"] = median(r[i][key] for r in runs)
        row[f"{phase}_compiles"] = runs[0][i]["first_step_cache"]["misses"]
        row[f"{phase}_disk_hits"] = runs[0][i]["first_step_cache"]["disk_hits"]
    row["warm_over_cold"] = ratio(row["warm_first_step_s"], row["cold_first_step_s"])
    return row


def main():
    p = common.parser(__doc__)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--modes", nargs="+", default=["strict", "fused"], choices=["strict", "fused"])
    p.add_argument("--child", choices=MODELS, help=argparse_hidden())
    p.add_argument("--mode", default="strict", help=argparse_hidden())
    args = p.parse_args()
    if args.child:
        return child(args.child, args.mode, args.smoke)
    if args.smoke:
        args.repeats, args.models, args.modes = 1, ["mlp"], ["strict"]

    rows = [measure(k, m, args.repeats, args.smoke) for k in args.models for m in args.modes]
    md = (f"First training step, cold vs warm disk cache (new process each), "
          f"median of {args.repeats}\n\n")
    md += table(["model", "mode", "cold 1st step s", "warm 1st step s", "warm/cold",
                 "compiles cold", "disk hits warm", "2nd step ms", "process s cold/warm"],
                [[r["model"], r["mode"], f"{r['cold_first_step_s']:.3f}",
                  f"{r['warm_first_step_s']:.3f}", f"{r['warm_over_cold']:.3f}",
                  r["cold_compiles"], r["warm_disk_hits"],
                  f"{r['warm_second_step_s'] * 1e3:.1f}",
                  f"{r['cold_process_s']:.1f} / {r['warm_process_s']:.1f}"] for r in rows])
    write_results(args.out, "cold_warm", {"repeats": args.repeats, "smoke": args.smoke,
                                          "rows": rows}, md)


def argparse_hidden():
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
