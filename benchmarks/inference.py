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
- generate(): a tiny LlamaForCausalLM (transformers), greedy, 8 new tokens,
  with transformers' default cache and with `cache_implementation="static"`
  (on tpu transformers then compiles the decode step with backend "tpu"): the
  first call (compiles included), the second (tiered compilation's background
  upgrades may still run) and the median of later calls (after them), the programs
  the first call compiled and the decode graphs it captured; and the same over
  64 new tokens as warm tokens/s. Each (config, part) runs in its own process,
  so every first call starts with empty caches.

    python benchmarks/inference.py [--smoke] [--rounds N] [--configs a,b] [--parts a,b] [--out DIR]
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


def tiny_llama(device):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval().to(device)


def generate(name, size, cache, new_tokens, calls):
    """A first generate(), a second one (tiered compilation's background
    upgrades may still run), an untimed settling one and `calls` warm ones
    (after the upgrades): wall
    times, programs compiled (and transformers' compiled decode graphs
    captured) by the first call and by the later ones, the tokens."""
    import torch

    import common

    device = common.set_mode(name)
    model = tiny_llama(device)
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(2)).to(device)
    kwargs = dict(max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    if cache:
        kwargs["cache_implementation"] = cache
    tpu = device.type == "tpu"
    counts = (lambda: (__import__("torch_tpu").metrics().get("compiles", 0),
                       __import__("torch_tpu").compiler.compile_metrics().get("captures", 0))) \
        if tpu else (lambda: (0, 0))
    metrics = (lambda: dict(__import__("torch_tpu").metrics())) if tpu else (lambda: {})
    times, compiles, tokens, warm_before = [], [], None, {}
    # Calls 0 and 1 are the first and second; call 2 settles (a program's
    # second hit queues its tiered upgrade, so call 2 can still run quick
    # code); the warm calls start once every queued upgrade is done.
    for call in range(3 + calls):
        if call == 3 and tpu:
            __import__("torch_tpu")._C._drain_background_compiles()
        if call == 2 + calls:
            warm_before = metrics()  # the last warm call (the first pays upgraded code's first runs)
        before = counts()
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, **kwargs)
        tokens = out[0, -new_tokens:].cpu().tolist()
        times.append(time.perf_counter() - start)
        after = counts()
        compiles.append([a - b for a, b in zip(after, before)])
    # Where a warm token's time goes: the programs launched, the time in the
    # plugin's Execute calls, the wait for the token's host read (the
    # program's run), and the rest (Python, dispatch, recording).
    warm_after = metrics()
    per_token = {k: (warm_after.get(k, 0) - warm_before.get(k, 0)) / new_tokens
                 for k in ("executions", "execute_launch_s", "transfer_to_host_s", "ops_recorded")}
    breakdown = {"programs_per_token": per_token["executions"],
                 "ops_per_token": per_token["ops_recorded"],
                 "launch_us_per_token": per_token["execute_launch_s"] * 1e6,
                 "wait_us_per_token": per_token["transfer_to_host_s"] * 1e6,
                 "token_us": times[-1] / new_tokens * 1e6}
    return {**breakdown, "first_s": times[0], "second_s": times[1], "warm_s": common.median(times[3:]),
            "tokens_per_s": new_tokens / common.median(times[3:]),
            "first_compiles": compiles[0][0], "first_captures": compiles[0][1],
            "warm_compiles": sum(c[0] for c in compiles[1:]), "tokens": tokens}


PARTS = ["forward", "generate", "generate_static", "long", "long_static"]
CACHES = {"generate": None, "generate_static": "static", "long": None, "long_static": "static"}


def child(name, part, size):
    sys.path.insert(0, HERE)
    if part == "forward":
        result = forward_loop(name, size)
    elif part.startswith("generate"):
        result = generate(name, size, CACHES[part], size["new_tokens"], size["generate_calls"])
    else:
        # Three warm calls: the first pays each upgraded executable's first run
        # (XLA:CPU's dot kernels set up there, ~7 ms per decode program).
        result = generate(name, size, CACHES[part], size["long_tokens"], 3)
    result["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def runs_of(name, part):
    """generate() is eager code that compiles its own decode step (with a
    static cache): the compiled config is the forward loop's only."""
    return part == "forward" or name != "compiled"


def main():
    sys.path.insert(0, HERE)
    import common

    p = common.parser(__doc__)
    p.add_argument("--config", help=argparse_suppress())
    p.add_argument("--part", help=argparse_suppress())
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--parts", help="forward (GPT forward loop), generate / generate_static "
                   "(8 new tokens, default / static cache), long / long_static (tokens/s over "
                   "64); default: all (--smoke: one generate part per cache)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    size = dict(vocab=64, dim=32, heads=2, layers=1, seq=16, batch=2, steps=4, warmup=2,
                windows=1, new_tokens=4, generate_calls=1, long_tokens=6) if args.smoke else \
        dict(vocab=256, dim=128, heads=4, layers=2, seq=64, batch=8, steps=16, warmup=4,
             windows=3, new_tokens=8, generate_calls=3, long_tokens=64)
    if args.config:
        print(json.dumps(child(args.config, args.part, size)))
        return
    rounds = 1 if args.smoke else args.rounds
    names = args.configs.split(",")
    parts = (args.parts or ",".join(["forward", "generate", "long_static"] if args.smoke
                                    else PARTS)).split(",")
    runs = {part: {n: [] for n in names if runs_of(n, part)} for part in parts}
    for r in range(rounds):
        for part in parts:
            for name in runs[part]:
                cmd = [sys.executable, __file__, "--config", name, "--part", part] + \
                    (["--smoke"] if args.smoke else [])
                proc = subprocess.run(cmd, capture_output=True, text=True,
                                      env=dict(os.environ, TORCH_TPU_DISK_CACHE="0"))
                if proc.returncode != 0:
                    raise SystemExit(f"{name} {part} failed:\n{proc.stderr[-3000:]}")
                runs[part][name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
                print(f"round {r + 1} {part} {name}: {json.dumps(runs[part][name][-1])}",
                      flush=True)

    def per_round(part, name, base, get):
        rs = runs.get(part, {})
        if name not in rs or base not in rs:
            return float("nan")
        return common.median([common.ratio(get(a), get(b)) for a, b in zip(rs[name], rs[base])])

    def med(part, name, key):
        return common.median([r[key] for r in runs[part][name]])

    sections = []
    if "forward" in runs:
        rows = []
        for name, f in runs["forward"].items():
            rows.append([name, f"{med('forward', name, 'steps_per_s'):.1f}",
                         f"{per_round('forward', name, 'strict', lambda r: r['steps_per_s']):.2f}x",
                         f"{per_round('forward', name, 'cpu', lambda r: r['steps_per_s']):.2f}x",
                         f"{med('forward', name, 'flushes_per_step'):.2f}",
                         f"{sum(x['compiles_in_windows'] for x in f):.0f}",
                         f"{sum(x['size_cap_flushes'] for x in f):.0f}",
                         f"{med('forward', name, 'first_s'):.2f}",
                         f"{med('forward', name, 'max_rss_mb'):.0f}",
                         f"{per_round('forward', name, 'strict', lambda r: r['max_rss_mb']):.2f}x"])
        sections.append("## Small-GPT forward loop (distinct batch per step, argmax kept)\n\n" +
                        common.table(["config", "steps/s", "vs strict", "vs CPU eager",
                                      "flushes/step", "compiles (timed)", "size-cap flushes",
                                      "first call s", "peak RSS MB", "RSS vs strict"], rows))

    def same_tokens(part, name):
        if "cpu" not in runs[part]:
            return "?"
        cpu = runs[part]["cpu"][0]["tokens"]
        return "yes" if all(r["tokens"] == cpu for r in runs[part][name]) else "no"

    gen_rows, long_rows, split_rows = [], [], []
    for part in parts:
        if part == "forward":
            continue
        cache = CACHES[part] or "default"
        for name in runs[part]:
            counts = [f"{med(part, name, 'first_compiles'):.0f}",
                      f"{med(part, name, 'first_captures'):.0f}",
                      f"{med(part, name, 'warm_compiles'):.0f}"]
            if part.startswith("generate"):
                gen_rows.append([name, cache, f"{med(part, name, 'first_s'):.2f}",
                                 f"{med(part, name, 'second_s') * 1e3:.1f}",
                                 f"{med(part, name, 'warm_s') * 1e3:.1f}",
                                 f"{per_round(part, name, 'cpu', lambda r: 1 / r['warm_s']):.2f}x",
                                 *counts, same_tokens(part, name)])
            else:
                long_rows.append([name, cache, f"{med(part, name, 'first_s'):.2f}",
                                  f"{med(part, name, 'tokens_per_s'):.0f}",
                                  f"{per_round(part, name, 'cpu', lambda r: r['tokens_per_s']):.2f}x",
                                  *counts, same_tokens(part, name)])
                token, launch, wait = (med(part, name, k) for k in
                                       ("token_us", "launch_us_per_token", "wait_us_per_token"))
                split_rows.append([name, cache, f"{token:.0f}"] + ([""] * 5 if name == "cpu" else [
                    f"{med(part, name, 'programs_per_token'):.2f}",
                    f"{med(part, name, 'ops_per_token'):.0f}", f"{launch:.0f}", f"{wait:.0f}",
                    f"{token - launch - wait:.0f}"]))
    count_headers = ["compiles (first call)", "decode graphs captured", "compiles (warm calls)"]
    if gen_rows:
        sections.append(f"## Tiny Llama generate(), {size['new_tokens']} new tokens, greedy\n\n" +
                        common.table(["config", "cache", "first call s", "second call ms", "warm call ms",
                                      "warm vs CPU eager", *count_headers, "tokens = CPU"],
                                     gen_rows))
    if long_rows:
        sections.append(f"## Tiny Llama generate(), {size['long_tokens']} new tokens: "
                        "warm tokens/s\n\n" +
                        common.table(["config", "cache", "first call s", "warm tokens/s",
                                      "vs CPU eager", *count_headers, "tokens = CPU"], long_rows))
    if split_rows:
        sections.append("## Where a warm token's time goes (µs per token, the last warm "
                        "call)\n\nlaunch: in the plugin's Execute calls; wait: for the token's "
                        "host read (the program's run); rest: Python, dispatch and recording, "
                        "which CPU eager's whole token time compares with.\n\n" +
                        common.table(["config", "cache", "token µs", "programs/token",
                                      "ops recorded/token", "launch µs", "wait µs", "rest µs"],
                                     split_rows))
    common.write_results(args.out, "inference",
                         {"smoke": args.smoke, "size": size, "rounds": rounds, "runs": runs},
                         "\n\n".join(sections))


def argparse_suppress():
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
