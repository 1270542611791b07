"""What the tpu's profiler hooks cost per op: profiling off (the engine's
trace hooks each cost one relaxed atomic load), profiling on, and, with
--baseline DIR, a checkout without the hooks.

    python benchmarks/profiler_overhead.py [--n 1000] [--repeats 5] [--rounds 5]
                                           [--baseline /path/to/other/checkout] [--smoke]

Each side runs in its own process (so each imports its own torch_tpu) and
the sides take turns round by round; a row's ratio is the median of the
per-round ratios. Per side and mode (a chain of N `y = y + x` on a 16x16 f32
tensor):
  strict : Strict Eager, N ops then synchronize, / N (each op launches)
  fused  : Fused Eager, time to record the N ops, / N
each as wall time and as the calling thread's CPU time (time.thread_time:
what the op path costs, much less sensitive to other processes on a shared
machine), and for Strict the host time inside torch_tpu's kernel per op
(timing on: the launch, where the hook is). `on` profiles with activities CPU and
PrivateUse1, so it includes torch's own per-op CPU events. Recording in
Fused Eager passes no hook (they sit at launches, copies, compiles and
synchronizes), so the Fused rows' off / baseline ratio is the run's noise
floor for the Strict rows'. Writes results/profiler_overhead.json and .md.
"""
import common  # noqa: F401  (first: sets the cache environment before torch)

import argparse
import json
import os
import subprocess
import sys
import time

from common import REPO, median, now, ratio, table, write_results

MARK = "PROFILER_OVERHEAD "


def child(side, n, repeats):
    import contextlib

    import torch
    import torch_tpu
    from torch.profiler import ProfilerActivity, profile

    x = torch.rand(16, 16).to("tpu")

    def chain():
        y = x
        for _ in range(n):
            y = y + x
        return y

    def strict_once():
        """(wall seconds of the chain and its synchronize, this thread's CPU
        seconds in the chain: less sensitive to other processes' load)."""
        start, cpu = now(), time.thread_time()
        y = chain()
        cpu = time.thread_time() - cpu
        torch.tpu.synchronize()
        del y
        return now() - start, cpu

    def kernel_once():
        before = torch_tpu.metrics()
        y = chain()
        after = torch_tpu.metrics()
        torch.tpu.synchronize()
        del y
        calls = after.get("kernel_calls", 0) - before.get("kernel_calls", 0)
        return (after.get("kernel_s", 0) - before.get("kernel_s", 0)) / max(calls, 1)

    def fused_once():
        (x - 1).sum().item()  # a program unlike the chain: no loop boundary inside it
        start, cpu = now(), time.thread_time()
        y = chain()
        recorded, cpu = now(), time.thread_time() - cpu
        torch.tpu.synchronize()
        del y
        return recorded - start, cpu

    profiling = (profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1])
                 if side == "on" else contextlib.nullcontext())
    out = {"package": os.path.dirname(torch_tpu.__file__)}
    with profiling:
        with torch_tpu.eager_mode("DEFER_NEVER"):
            strict_once()
            runs = [strict_once() for _ in range(repeats)]
            out["strict_us"] = median(r[0] for r in runs) / n * 1e6
            out["strict_cpu_us"] = median(r[1] for r in runs) / n * 1e6
            torch_tpu.time_kernels(True)
            out["strict_kernel_us"] = median(kernel_once() for _ in range(repeats)) * 1e6
            torch_tpu.time_kernels(False)
        with torch_tpu.eager_mode("DEFER_AND_FUSE"):
            fused_once()
            runs = [fused_once() for _ in range(repeats)]
            out["fused_us"] = median(r[0] for r in runs) / n * 1e6
            out["fused_cpu_us"] = median(r[1] for r in runs) / n * 1e6
    print(MARK + json.dumps(out), flush=True)


def spawn(side, root, args):
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0", PYTHONPATH=root)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", side, "--n", str(args.n),
           "--repeats", str(args.repeats)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"side {side} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(lines[-1][len(MARK):])
    if not os.path.realpath(result["package"]).startswith(os.path.realpath(root)):
        raise SystemExit(f"side {side} imported torch_tpu from {result['package']}, not {root}")
    return result


METRICS = [("strict", "strict_us", "Strict wall µs/op (N ops + sync)"),
           ("strict", "strict_cpu_us", "Strict thread-CPU µs/op"),
           ("strict", "strict_kernel_us", "Strict in-kernel µs/op (launch)"),
           ("fused", "fused_us", "Fused record wall µs/op"),
           ("fused", "fused_cpu_us", "Fused record thread-CPU µs/op")]


def main():
    p = common.parser(__doc__)
    p.add_argument("--n", type=int, default=1000, help="ops per chain")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--baseline", help="a checkout (with its _C built) without the hooks")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args.child, args.n, args.repeats)
    if args.smoke:
        args.n, args.repeats, args.rounds = 50, 2, 1
    sides = {"off": REPO, "on": REPO}
    if args.baseline:
        sides = {"baseline": os.path.abspath(args.baseline), **sides}
    rounds = [{side: spawn(side, root, args) for side, root in sides.items()}
              for _ in range(args.rounds)]
    rows = []
    for _, key, label in METRICS:
        row = {"metric": key, "label": label}
        for side in sides:
            row[side] = median(r[side][key] for r in rounds)
        row["on_vs_off"] = median(ratio(r["on"][key], r["off"][key]) for r in rounds)
        if "baseline" in sides:
            row["off_vs_baseline"] = median(ratio(r["off"][key], r["baseline"][key])
                                            for r in rounds)
        rows.append(row)
    headers = ["metric"] + list(sides) + (["off / baseline"] if "baseline" in sides else []) + \
        ["on / off"]
    md = (f"Per-op host cost with the tpu profiler hooks, chain of {args.n} `y + x` (16x16 f32), "
          f"median of {args.repeats} per process, {args.rounds} rounds taking turns\n\n")
    md += table(headers, [[r["label"]] + [f"{r[s]:.2f}" for s in sides] +
                          ([f"{r['off_vs_baseline']:.3f}"] if "baseline" in sides else []) +
                          [f"{r['on_vs_off']:.2f}"] for r in rows])
    if args.baseline:
        md += (f"\nbaseline: {os.path.abspath(args.baseline)}. Fused recording passes no "
               "hook: its off / baseline ratio is this run's noise floor.\n")
    write_results(args.out, "profiler_overhead",
                  {"n": args.n, "repeats": args.repeats, "rounds": args.rounds,
                   "smoke": args.smoke, "baseline": args.baseline, "rows": rows,
                   "per_round": rounds}, md)


if __name__ == "__main__":
    main()
