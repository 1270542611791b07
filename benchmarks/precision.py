"""Cost and error of each tpu matmul precision mode, side by side, one run.

    python benchmarks/precision.py [--n 1024] [--repeats 7]

For an n×n f32 matmul: the median wall time of each mode relative to DEFAULT
(after a warm-up run that compiles), and the max error against a float64 CPU
reference, relative to the f64 sum of |products|. Prints a markdown table and
writes benchmarks/results/precision.json.
"""
import argparse
import json
import os
import platform
import statistics
import time

import torch
import torch_tpu

MODES = ("default", "high", "highest", "float32")


def timed(fn, repeats):
    fn()  # compile and warm
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    g = torch.Generator().manual_seed(0)
    a = torch.randn(args.n, args.n, generator=g)
    b = torch.randn(args.n, args.n, generator=g)
    ref = a.double() @ b.double()
    scale = a.double().abs() @ b.double().abs()
    ta, tb = a.to("tpu"), b.to("tpu")

    rows = []
    for mode in MODES:
        with torch.tpu.precision(mode):
            seconds = timed(lambda: torch.mm(ta, tb).cpu(), args.repeats)
            y = torch.mm(ta, tb).cpu().double()
        rows.append({"mode": mode, "median_s": seconds,
                     "max_rel_error": ((y - ref).abs() / scale).max().item()})
    base = rows[0]["median_s"]
    for r in rows:
        r["cost_vs_default"] = r["median_s"] / base

    name, _, kind, _ = torch_tpu._C._platform()
    print(f"f32 mm {args.n}x{args.n}, median of {args.repeats}, {kind} ({name})\n")
    print("| mode | median ms | cost vs DEFAULT | max error vs f64 |")
    print("| --- | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['mode']} | {r['median_s'] * 1e3:.2f} | {r['cost_vs_default']:.2f}x "
              f"| {r['max_rel_error']:.2e} |")

    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "precision.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"benchmark": "precision", "n": args.n, "repeats": args.repeats,
                   "plugin": name, "device_kind": kind, "host": platform.node(),
                   "torch": torch.__version__, "rows": rows}, f, indent=2)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
