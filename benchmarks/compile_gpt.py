"""torch.compile on a small GPT (benchmarks/common.py TinyTransformer): CPU eager, Inductor (CPU), tpu Strict Eager,
tpu Fused Eager and torch.compile(backend="tpu") with Strict Eager around its
graphs (tpu_compiled: each graph its own program) and with Fused Eager
(tpu_compiled_fused: the step's graphs and eager ops one program), side by
side in one run. `--large`: 4 layers, d_model 512, sequence 256, batch 8.

Each configuration runs in its own subprocess (clean caches, clean peak
memory). Reports steps/s (median over timed windows), the first call's time
(compilation included) and peak memory, with ratios to CPU eager.

    python benchmarks/compile_gpt.py            # full
    python benchmarks/compile_gpt.py --smoke    # tiny, for tests
    python benchmarks/compile_gpt.py --configs cpu_eager,tpu_compiled --out /tmp/x

A tpu configuration with the suffix "+f32dots" (tpu_compiled+f32dots) runs
with TORCH_TPU_BF16_DOTS=0: the split terms of its dots stay f32.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

CONFIGS = ["cpu_eager", "cpu_inductor", "tpu_strict", "tpu_fused", "tpu_compiled",
           "tpu_compiled_fused"]


def build(args):
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import TinyTransformer

    torch.manual_seed(0)
    return TinyTransformer(vocab=args.vocab, dim=args.dim, heads=args.heads,
                           layers=args.layers, seq=args.seq, sdpa=True)


def run_config(name, args):
    import torch
    import torch.nn.functional as F

    device = "cpu" if name.startswith("cpu") else "tpu"
    if device == "tpu":
        import torch_tpu

        fused = name in ("tpu_fused", "tpu_compiled_fused")
        torch_tpu.set_eager_mode("DEFER_AND_FUSE" if fused else "DEFER_NEVER")
    compiled = name.startswith("tpu_compiled")
    model = build(args).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=compiled)
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g).to(device)
    x, y = data[:, :-1], data[:, 1:]

    def train_step():
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    def infer():
        with torch.no_grad():
            return model(x)

    if name == "cpu_inductor":
        train_step, infer = torch.compile(train_step), torch.compile(infer)
    elif compiled:
        train_step = torch.compile(train_step, backend="tpu")
        infer = torch.compile(infer, backend="tpu")

    def sync(value):
        if device == "tpu":
            torch.tpu.synchronize()
        return value

    result = {}
    for label, fn in (("train", train_step), ("infer", infer)):
        start = time.perf_counter()
        sync(fn())
        first = time.perf_counter() - start
        for _ in range(args.warmup):
            sync(fn())
        windows = []
        for _ in range(args.windows):
            start = time.perf_counter()
            for _ in range(args.steps):
                out = fn()
            sync(out)
            windows.append(args.steps / (time.perf_counter() - start))
        result[label] = {"first_call_s": first, "steps_per_s": statistics.median(windows)}
    result["final_loss"] = float(train_step().cpu())
    if device == "tpu":
        result["peak_device_bytes"] = torch.tpu.max_memory_allocated()
    result["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--large", action="store_true",
                   help="4 layers, d_model 512, sequence 256, batch 8 (compute-bound)")
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help="comma-separated subset of " + ", ".join(CONFIGS))
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "compile_gpt"))
    args = p.parse_args()
    if args.smoke:
        size = dict(vocab=64, dim=32, layers=1, heads=2, seq=16, batch=2, warmup=1, windows=1, steps=2)
    elif args.large:
        size = dict(vocab=256, dim=512, layers=4, heads=8, seq=256, batch=8, warmup=1, windows=3,
                    steps=2)
    else:
        size = dict(vocab=256, dim=128, layers=2, heads=4, seq=64, batch=8, warmup=3, windows=5,
                    steps=5)
    for k, v in size.items():
        setattr(args, k, v)
    if args.config:
        print(json.dumps(run_config(args.config, args)))
        return
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0")
    results = {}
    for name in args.configs.split(","):
        base_name, _, variant = name.partition("+")
        cmd = [sys.executable, __file__, "--config", base_name] + (["--smoke"] if args.smoke else []) + \
            (["--large"] if args.large else [])
        run_env = dict(env, TORCH_TPU_BF16_DOTS="0") if variant == "f32dots" else env
        proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env)
        if proc.returncode != 0:
            results[name] = {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
        else:
            results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(name, json.dumps(results[name]), flush=True)
    base = results.get("cpu_eager", {})
    lines = ["| config | train steps/s | vs CPU eager | infer steps/s | vs CPU eager | "
             "first train call (s) | peak device MB | max RSS MB |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | error: {r['error'][:80]} | | | | | | |")
            continue
        tr, inf = r["train"]["steps_per_s"], r["infer"]["steps_per_s"]
        rt = tr / base["train"]["steps_per_s"] if "train" in base else float("nan")
        ri = inf / base["infer"]["steps_per_s"] if "infer" in base else float("nan")
        peak = r.get("peak_device_bytes")
        lines.append(f"| {name} | {tr:.1f} | {rt:.2f}x | {inf:.1f} | {ri:.2f}x | "
                     f"{r['train']['first_call_s']:.2f} | "
                     f"{'' if peak is None else f'{peak / 2**20:.1f}'} | {r['max_rss_mb']:.0f} |")
    table = "\n".join(lines)
    print(table)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    suffix = "_smoke" if args.smoke else "_large" if args.large else ""
    with open(args.out + suffix + ".json", "w") as f:
        json.dump({"size": size, "results": results, "load": open("/proc/loadavg").read().split()[:3]},
                  f, indent=1)
    with open(args.out + suffix + ".md", "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
