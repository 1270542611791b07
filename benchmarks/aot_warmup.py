"""Ahead-of-time warm-up of several shapes: one compile after another, against
`torch_tpu._internal.compile.async_compile` (each shape traced while the
previous ones compile in the background).

    python benchmarks/aot_warmup.py [--repeats 2] [--lengths 8,16,32,64] [--smoke]

The model is the small GPT of common.py (inference, no_grad), compiled with
`torch.compile(backend="tpu", fullgraph=True, dynamic=False)`; one input per
sequence length. Each configuration runs in a fresh process with no disk
cache (every program compiles), the two taking turns:
  sequential    : the compiled model called once per length (each call waits
                  for its graph's compile), then the warm calls
  async_compile : async_compile(model, inputs), then the warm calls
Reported: the warm-up's wall time (tracing and compiling every length), the
slowest first call on a warmed length afterwards (a replay: no compile; after
async_compile it is each executable's first run, which XLA:CPU makes slower
than later ones, while the sequential warm-up ran each once already), and the
graphs compiled. Writes results/aot_warmup.json and aot_warmup.md.
"""
import common  # noqa: F401  (first: sets the cache environment before torch)

import argparse
import json
import os
import subprocess
import sys

import torch

from common import TinyTransformer, median, now, ratio, table, write_results

CONFIGS = ["sequential", "async_compile"]


def child(config, lengths, small):
    import torch_tpu
    from torch_tpu._internal.compile import async_compile

    torch.manual_seed(0)
    model = TinyTransformer(vocab=256, dim=32 if small else 64, layers=1 if small else 2,
                            seq=max(lengths)).eval().to("tpu")
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randint(0, 256, (2, n), generator=g).to("tpu") for n in lengths]
    torch.tpu.synchronize()
    start = now()
    if config == "async_compile":
        compiled = async_compile(model, [(x,) for x in inputs])
    else:
        compiled = torch.no_grad()(torch.compile(model, backend="tpu", fullgraph=True,
                                                 dynamic=False))
        for x in inputs:
            compiled(x).cpu()
    warm_up_s = now() - start
    firsts = []
    for x in inputs:
        t = now()
        compiled(x).cpu()
        firsts.append(now() - t)
    c = torch_tpu.compiler.compile_metrics()
    print(json.dumps({"warm_up_s": warm_up_s, "slowest_warm_call_s": max(firsts),
                      "captures": c.get("captures", 0),
                      "eager_calls": c.get("eager_calls", 0) + c.get("async_eager_calls", 0)}))


def spawn(config, lengths, small):
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", config,
           "--lengths", ",".join(map(str, lengths))] + (["--smoke"] if small else [])
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"child {config} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    p = common.parser(__doc__)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--lengths", default="8,16,32,64")
    p.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    args = p.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    if args.smoke:
        lengths, args.repeats = [4, 8], 1
    if args.child:
        return child(args.child, lengths, args.smoke)
    runs = {c: [] for c in CONFIGS}
    for _ in range(args.repeats):
        for config in CONFIGS:
            runs[config].append(spawn(config, lengths, args.smoke))
    rows = []
    for config in CONFIGS:
        rs = runs[config]
        rows.append({"config": config, "warm_up_s": median(r["warm_up_s"] for r in rs),
                     "all_warm_up_s": [r["warm_up_s"] for r in rs],
                     "slowest_warm_call_s": median(r["slowest_warm_call_s"] for r in rs),
                     "captures": rs[0]["captures"], "eager_calls": rs[0]["eager_calls"]})
    speedup = ratio(rows[0]["warm_up_s"], rows[1]["warm_up_s"])
    md = (f"Small GPT inference, lengths {lengths}, no disk cache, "
          f"medians of {args.repeats} fresh processes per configuration\n\n" +
          table(["config", "warm-up s", "slowest warm call ms", "graphs compiled",
                 "eager calls"],
                [[r["config"], f"{r['warm_up_s']:.2f}", f"{r['slowest_warm_call_s'] * 1e3:.1f}",
                  r["captures"], r["eager_calls"]] for r in rows]) +
          f"\n\nsequential / async_compile warm-up time: {speedup:.2f}x\n")
    print(md)
    write_results(args.out, "aot_warmup", {"smoke": args.smoke, "lengths": lengths, "rows": rows,
                                           "sequential_over_async": speedup}, md)


if __name__ == "__main__":
    main()
