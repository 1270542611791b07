"""Inference out of the box: a small GPT's forward loop and a tiny Llama's
generate(), CPU eager against tpu Strict, Fused and compiled, side by side.

Each configuration runs in its own subprocess (its own caches and peak
resident memory); the configurations take turns for `--rounds` rounds and the
ratios are medians of the per-round ratios (the machine is shared and noisy).

- forward loop: the small GPT of common.py in eval() under no_grad, a distinct
  batch per step, the argmax of every step kept (consumed) until the window's
  synchronize. The warm-up ends with a different host read
  (`logits.float().abs().mean().cpu()`), the pattern that used to make Fused
  Eager record forwards up to its size cap. Reports steps/s, flushes and
  compiles per step in the timed windows, and the process's peak RSS.
- generate(): a tiny LlamaForCausalLM (transformers), greedy, 8 new tokens:
  the first call (compiles included) and the median of later calls.

    python benchmarks/inference.py [--smoke] [--rounds N] [--configs a,b] [--out DIR]
"""
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = ["cpu", "strict", "fused", "compiled"]


def flushes(metrics):
    return sum(v for k, v in metrics.items() if k.startswith("flush_"))


def forward_loop(name, size):
    import torch

    import common

    device = common.set_mode("strict" if name == "compiled" else name)
    torch.manual_seed(0)
    model = common.TinyTransformer(vocab=size["vocab"], dim=size["dim"], heads=size["heads"],
                                   layers=size["layers"], seq=size["seq"]).eval().to(device)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, size["vocab"], (size["batch"], size["seq"]), generator=g).to(device)
               for _ in range(size["steps"])]
    forward = model
    if name == "compiled":
        forward = torch.compile(model, backend="tpu", dynamic=False)
    tpu = device.type == "tpu"
    metrics = (lambda: __import__("torch_tpu").metrics()) if tpu else (lambda: {})
    with torch.no_grad():
        start = time.perf_counter()
        forward(batches[0]).float().abs().mean().cpu()  # the warm-up's own host read
        first = time.perf_counter() - start
        for b in batches[: size["warmup"]]:
            forward(b).argmax(-1)
        common.sync(device)
        windows, before = [], metrics()
        for _ in range(size["windows"]):
            start = time.perf_counter()
            kept = [forward(b).argmax(-1) for b in batches]
            common.sync(device)
            windows.append(len(batches) / (time.perf_counter() - start))
            del kept
        after = metrics()
    steps = size["windows"] * len(batches)
    return {"first_s": first, "steps_per_s": common.median(windows),
            "flushes_per_step": (flushes(after) - flushes(before)) / steps,
            "compiles_in_windows": after.get("compiles", 0) - before.get("compiles", 0),
            "size_cap_flushes": after.get("flush_size_cap", 0) - before.get("flush_size_cap", 0)}


def generate(name, size):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import common

    device = common.set_mode("strict" if name == "compiled" else name)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval().to(device)
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(2)).to(device)
    kwargs = dict(max_new_tokens=size["new_tokens"], do_sample=False, pad_token_id=0)
    times, tokens = [], None
    for _ in range(1 + size["generate_calls"]):
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, **kwargs)
        tokens = out[0, -size["new_tokens"]:].cpu().tolist()
        times.append(time.perf_counter() - start)
    return {"first_s": times[0], "warm_s": common.median(times[1:]), "tokens": tokens}


def child(name, size):
    sys.path.insert(0, HERE)
    result = {"forward": forward_loop(name, size)}
    if name != "compiled":  # generate() is eager code; compiled mode is the forward loop's
        result["generate"] = generate(name, size)
    result["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def main():
    sys.path.insert(0, HERE)
    import common

    p = common.parser(__doc__)
    p.add_argument("--config", help=argparse_suppress())
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    size = dict(vocab=64, dim=32, heads=2, layers=1, seq=16, batch=2, steps=4, warmup=2,
                windows=1, new_tokens=4, generate_calls=1) if args.smoke else \
        dict(vocab=256, dim=128, heads=4, layers=2, seq=64, batch=8, steps=16, warmup=4,
             windows=3, new_tokens=8, generate_calls=3)
    if args.config:
        print(json.dumps(child(args.config, size)))
        return
    rounds = 1 if args.smoke else args.rounds
    names = args.configs.split(",")
    runs = {n: [] for n in names}
    for r in range(rounds):
        for name in names:
            cmd = [sys.executable, __file__, "--config", name] + (["--smoke"] if args.smoke else [])
            proc = subprocess.run(cmd, capture_output=True, text=True,
                                  env=dict(os.environ, TORCH_TPU_DISK_CACHE="0"))
            if proc.returncode != 0:
                raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
            runs[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} {name}: {json.dumps(runs[name][-1])}", flush=True)

    def per_round(name, base, get):
        if name not in runs or base not in runs:
            return float("nan")
        return common.median([common.ratio(get(a), get(b)) for a, b in zip(runs[name], runs[base])])

    fwd = lambda r: r["forward"]["steps_per_s"]  # noqa: E731
    rows = []
    for name in names:
        rs = runs[name]
        f = [r["forward"] for r in rs]
        rows.append([name, f"{common.median([x['steps_per_s'] for x in f]):.1f}",
                     f"{per_round(name, 'strict', fwd):.2f}x", f"{per_round(name, 'cpu', fwd):.2f}x",
                     f"{common.median([x['flushes_per_step'] for x in f]):.2f}",
                     f"{sum(x['compiles_in_windows'] for x in f):.0f}",
                     f"{sum(x['size_cap_flushes'] for x in f):.0f}",
                     f"{common.median([x['first_s'] for x in f]):.2f}",
                     f"{common.median([r['max_rss_mb'] for r in rs]):.0f}",
                     f"{per_round(name, 'strict', lambda r: r['max_rss_mb']):.2f}x"])
    gen_rows = []
    for name in names:
        gs = [r["generate"] for r in runs[name] if "generate" in r]
        if not gs:
            continue
        gen_rows.append([name, f"{common.median([g['first_s'] for g in gs]):.2f}",
                         f"{common.median([g['warm_s'] for g in gs]) * 1e3:.1f}",
                         f"{per_round(name, 'cpu', lambda r: 1 / r['generate']['warm_s']):.2f}x",
                         "yes" if all(g["tokens"] == runs["cpu"][0]["generate"]["tokens"] for g in gs)
                         else "no" if "cpu" in runs else "?"])
    markdown = ("## Small-GPT forward loop (distinct batch per step, argmax kept)\n\n" + common.table(
        ["config", "steps/s", "vs strict", "vs CPU eager", "flushes/step", "compiles (timed)",
         "size-cap flushes", "first call s", "peak RSS MB", "RSS vs strict"], rows) +
        "\n\n## Tiny Llama generate(), 8 new tokens, greedy\n\n" + common.table(
        ["config", "first call s", "warm call ms", "warm vs CPU eager", "tokens = CPU"], gen_rows))
    common.write_results(args.out, "inference",
                         {"smoke": args.smoke, "size": size, "rounds": rounds, "runs": runs},
                         markdown)


def argparse_suppress():
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
