"""Training-step throughput and peak memory: Strict Eager, Fused Eager, CPU.

    python benchmarks/training.py [--steps 20] [--repeats 3] [--warmup 3]
                                  [--hit-steps 100] [--smoke]

Models: the quickstart MLP (batch 128) and a small transformer (embedding, two
pre-LN blocks with causal scaled_dot_product_attention and a GELU MLP, final
LayerNorm, cross-entropy, AdamW). A step is forward, loss, zero_grad,
backward, optimizer.step(), with no host read; steps/s is the median over
--repeats runs of --steps steps (each ending in a synchronize), after --warmup
steps that are not timed. Peak memory: torch.tpu.max_memory_allocated() over
steps after warm-up; on CPU, the peak of live tensor storage over one step.
Then, in Fused Eager, a --hit-steps loop records the compile-cache hit rate
per step (hits / (hits + misses)) and torch_tpu.metrics_report().
Writes results/training.json and results/training.md.
"""
import common  # noqa: F401  (first: sets the cache environment before torch)

import torch
import torch_tpu

from common import Task, median, now, ratio, set_mode, table, write_results

MODELS = ("mlp", "transformer")
MODE_ORDER = ("strict", "fused", "cpu")


def steps_per_second(task, device, steps):
    start = now()
    for _ in range(steps):
        task.step()
    common.sync(device)
    return steps / (now() - start)


def measure(kind, mode, args):
    device = set_mode(mode)
    task = Task(kind, device, small=args.smoke)
    for _ in range(args.warmup):
        task.step()
    common.sync(device)
    rates = [steps_per_second(task, device, args.steps) for _ in range(args.repeats)]
    if mode == "cpu":
        peak = common.cpu_peak_bytes(task)
    else:
        peak = common.tpu_peak_bytes(task, 2)
    loss = task.loss.item()
    torch_tpu.set_eager_mode("DEFER_NEVER")
    return {"model": kind, "mode": mode, "steps_per_s": median(rates),
            "all_steps_per_s": rates, "peak_bytes": peak, "final_loss": loss}


def cache_hit_loop(kind, args):
    """Fused Eager from an empty in-memory cache and fresh metrics: per-step
    cache hits and misses (cache_stats deltas) over args.hit_steps steps."""
    device = set_mode("fused")
    task = Task(kind, device, small=args.smoke)
    torch.tpu.synchronize()
    torch_tpu.clear_cache(disk=False)
    torch_tpu.reset_metrics()
    per_step = []
    for _ in range(args.hit_steps):
        before = torch_tpu.cache_stats()
        task.step()
        torch.tpu.synchronize()
        after = torch_tpu.cache_stats()
        per_step.append({k: after[k] - before[k] for k in ("hits", "misses", "disk_hits")})
    report = torch_tpu.metrics_report()
    torch_tpu.set_eager_mode("DEFER_NEVER")
    after_warm = per_step[args.warmup:]
    hits = sum(s["hits"] for s in after_warm)
    misses = sum(s["misses"] + s["disk_hits"] for s in after_warm)
    last_miss = max((i + 1 for i, s in enumerate(per_step) if s["misses"]), default=0)
    return {"model": kind, "steps": args.hit_steps, "warmup": args.warmup,
            "hits_after_warmup": hits, "misses_after_warmup": misses,
            "hit_rate_after_warmup": ratio(hits, hits + misses),
            "last_step_with_a_miss": last_miss, "per_step": per_step,
            "metrics": torch_tpu.metrics(), "metrics_report": report}


def markdown(rows, hits, args):
    by = {(r["model"], r["mode"]): r for r in rows}
    out = [f"Training step, median of {args.repeats} x {args.steps} steps after "
           f"{args.warmup} warm-up steps\n"]
    body = []
    for kind in MODELS:
        if (kind, "cpu") not in by:
            continue
        cpu, strict, fused = by[kind, "cpu"], by[kind, "strict"], by[kind, "fused"]
        for mode in MODE_ORDER:
            r = by[kind, mode]
            body.append([kind, mode, f"{r['steps_per_s']:.1f}",
                         f"{ratio(r['steps_per_s'], cpu['steps_per_s']):.2f}x",
                         f"{r['peak_bytes'] / 2**20:.2f}", f"{r['final_loss']:.4f}"])
        body.append([kind, "**fused / strict**",
                     f"{ratio(fused['steps_per_s'], strict['steps_per_s']):.2f}x", "", "", ""])
    out.append(table(["model", "mode", "steps/s", "vs CPU", "peak MiB", "loss"], body))
    out.append(f"\nFused Eager compile-cache hit rate, {args.hit_steps}-step loop "
               f"(after {args.warmup} warm-up steps)\n")
    out.append(table(["model", "hits", "misses", "hit rate", "last step with a miss"],
                     [[h["model"], h["hits_after_warmup"], h["misses_after_warmup"],
                       f"{h['hit_rate_after_warmup']:.3f}", h["last_step_with_a_miss"]]
                      for h in hits]))
    return "\n".join(out)


def main():
    p = common.parser(__doc__)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--hit-steps", type=int, default=100)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    args = p.parse_args()
    if args.smoke:
        args.steps, args.repeats, args.warmup, args.hit_steps = 1, 1, 1, 2
        args.models = ["mlp"]

    rows = [measure(kind, mode, args) for kind in args.models for mode in MODE_ORDER]
    hits = [cache_hit_loop(kind, args) for kind in args.models]
    attention = ("F.scaled_dot_product_attention" if common.sdpa_works() else
                 "explicit softmax (F.scaled_dot_product_attention fails on tpu)")
    md = markdown(rows, hits, args) + f"\n\nTransformer attention: {attention}.\n"
    write_results(args.out, "training",
                  {"steps": args.steps, "repeats": args.repeats, "warmup": args.warmup,
                   "smoke": args.smoke, "transformer_attention": attention, "rows": rows,
                   "cache_hit_loops": hits}, md)


if __name__ == "__main__":
    main()
