"""Training-step throughput and peak memory: Strict Eager, Fused Eager, captured replay, CPU.

    python benchmarks/training.py [--steps 50] [--repeats 5] [--warmup 3]
                                  [--hit-steps 100] [--models ...] [--smoke]

Models: the quickstart MLP (batch 128) and a small transformer (embedding, two
pre-LN blocks with causal scaled_dot_product_attention and a GELU MLP, final
LayerNorm, cross-entropy, AdamW); on request (--models lstm) a one-layer
LSTM language model (embedding 32, hidden 64, 16 tokens, batch 8), written to
results/training_lstm.*. A step is forward, loss, zero_grad,
backward, optimizer.step(), with no host read; steps/s is the median over
--repeats runs of --steps steps (each ending in a synchronize), after --warmup
steps that are not timed; the modes take turns run by run. Modes: Strict,
Fused, Fused with deferred lowering off ("fused-lowering"), the whole step
through torch.compile(backend="tpu") with Strict Eager around its graphs
("compiled": each graph its own program) and with Fused Eager
("compiled-fused": the graphs and the eager ops between them recorded as one
program per step), captured replay
(the step captured once with torch.tpu.graph after one eager step, then
`replay()`: one program per step, no dispatch; AdamW with capturable=True
in both),
CPU eager. Peak memory: torch.tpu.max_memory_allocated() over
steps after warm-up; on CPU, the peak of live tensor storage over one step.
Host cost per step: process CPU time and wall time per step of each mode on
a trivial model (Linear(4, 4), batch 2), whose device work is next to
nothing, over --host-steps steps.
Then, in Fused Eager, a --hit-steps loop records the compile-cache hit rate
per step (hits / (hits + misses)) and torch_tpu.metrics_report().
Writes results/training.json and results/training.md.
"""
import common  # noqa: F401  (first: sets the cache environment before torch)

import gc
import time

import torch
import torch_tpu

from common import Task, median, now, ratio, set_mode, table, write_results

MODELS = ("mlp", "transformer")
EXTRA_MODELS = ("lstm",)  # on request; their results go to training_<models>.json
# "fused-lowering": Fused Eager lowering every op as it is recorded (deferred
# lowering off), to show what deferral buys.
MODE_ORDER = ("strict", "fused", "fused-lowering", "compiled", "compiled-fused", "captured",
              "cpu")
HOST_COST_MODES = ("strict", "fused", "compiled", "compiled-fused", "captured", "cpu")


def steps_per_second(task, device, steps):
    start = now()
    for _ in range(steps):
        task.step()
    common.sync(device)
    return steps / (now() - start)


def enter(mode):
    """Sets the eager mode (and deferral) for `mode`; returns the device. A
    replay runs the same in any eager mode: "captured" leaves Strict set."""
    if mode == "cpu":
        return common.set_mode("cpu")
    torch_tpu._C._set_defer_lowering(mode != "fused-lowering")
    return common.set_mode("fused" if mode.startswith("fused") or mode == "compiled-fused" else
                           "strict" if mode in ("captured", "compiled") else mode)


def make_task(kind, mode, device, small):
    if mode == "captured":
        return common.CapturedTask(kind, small=small)
    if mode.startswith("compiled"):
        return common.CompiledTask(kind, small=small)
    return Task(kind, device, small=small)


def peak_bytes(kind, mode, args):
    """Peak memory of a step with no other task alive on the device: on tpu
    torch.tpu.max_memory_allocated() over steps after warm-up; on CPU, the
    peak of live tensor storage over one step."""
    # Earlier tasks go first: a compiled one stays referenced by Dynamo's
    # cache (its guards hold the task) until that is reset.
    torch._dynamo.reset()
    gc.collect()
    device = enter(mode)
    task = make_task(kind, mode, device, args.smoke)
    for _ in range(args.warmup):
        task.step()
    common.sync(device)
    return common.cpu_peak_bytes(task) if mode == "cpu" else common.tpu_peak_bytes(task, 2)


def measure(kind, args):
    """Every mode's task is built and warmed up first; then the repeats run
    the modes in turn, so a slower or faster stretch of a shared machine
    falls on all of them alike."""
    tasks, devices = {}, {}
    for mode in MODE_ORDER:
        devices[mode] = enter(mode)
        tasks[mode] = make_task(kind, mode, devices[mode], args.smoke)
    # Two warm-up rounds, taking turns as the timed runs do: a Fused step
    # right after another mode's flush ends its first program elsewhere (the
    # loop detection starts over), and that program compiles once too.
    for _ in range(2):
        for mode in MODE_ORDER:
            enter(mode)
            for _ in range(args.warmup):
                tasks[mode].step()
            common.sync(devices[mode])
    rates = {mode: [] for mode in MODE_ORDER}
    for _ in range(args.repeats):
        for mode in MODE_ORDER:
            enter(mode)
            rates[mode].append(steps_per_second(tasks[mode], devices[mode], args.steps))
    losses = {}
    for mode in MODE_ORDER:
        enter(mode)
        losses[mode] = tasks[mode].loss.item()
    del tasks
    rows = []
    for mode in MODE_ORDER:
        rows.append({"model": kind, "mode": mode, "steps_per_s": median(rates[mode]),
                     "all_steps_per_s": rates[mode], "peak_bytes": peak_bytes(kind, mode, args),
                     "final_loss": losses[mode]})
    enter("strict")
    torch_tpu.set_eager_mode("DEFER_NEVER")
    # Fused / Strict per repeat (neighbours in time), then the median.
    paired = [f / s for f, s in zip(rates["fused"], rates["strict"])]
    rows.append({"model": kind, "mode": "fused / strict", "ratio_median": median(paired),
                 "ratios": paired})
    paired = [c / p for c, p in zip(rates["captured"], rates["cpu"])]
    rows.append({"model": kind, "mode": "captured / cpu", "ratio_median": median(paired),
                 "ratios": paired})
    paired = [c / f for c, f in zip(rates["compiled-fused"], rates["fused"])]
    rows.append({"model": kind, "mode": "compiled-fused / fused", "ratio_median": median(paired),
                 "ratios": paired})
    return rows


def host_cost(args):
    """Per mode, process CPU time and wall time per step of the trivial
    model (its device work is next to nothing), the modes taking turns."""
    tasks = {}
    for mode in HOST_COST_MODES:
        device = enter(mode)
        tasks[mode] = make_task("trivial", mode, device, small=True)
        for _ in range(args.warmup + 2):
            tasks[mode].step()
        common.sync(device)
    cpu_us = {mode: [] for mode in HOST_COST_MODES}
    wall_us = {mode: [] for mode in HOST_COST_MODES}
    for _ in range(args.repeats):
        for mode in HOST_COST_MODES:
            device = enter(mode)
            start_cpu, start = time.process_time(), now()
            for _ in range(args.host_steps):
                tasks[mode].step()
            common.sync(device)
            cpu_us[mode].append((time.process_time() - start_cpu) / args.host_steps * 1e6)
            wall_us[mode].append((now() - start) / args.host_steps * 1e6)
    enter("strict")
    return [{"mode": mode, "cpu_us_per_step": median(cpu_us[mode]),
             "wall_us_per_step": median(wall_us[mode]), "all_cpu_us": cpu_us[mode]}
            for mode in HOST_COST_MODES]


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


def markdown(rows, hits, host, args):
    by = {(r["model"], r["mode"]): r for r in rows}
    out = [f"Training step, median of {args.repeats} x {args.steps} steps after "
           f"{args.warmup} warm-up steps, the modes taking turns; fused / strict is the "
           f"median of the per-turn ratios\n"]
    body = []
    for kind in args.models:
        if (kind, "cpu") not in by:
            continue
        cpu = by[kind, "cpu"]
        for mode in MODE_ORDER:
            r = by[kind, mode]
            body.append([kind, mode, f"{r['steps_per_s']:.1f}",
                         f"{ratio(r['steps_per_s'], cpu['steps_per_s']):.2f}x",
                         f"{r['peak_bytes'] / 2**20:.2f}", f"{r['final_loss']:.4f}"])
        for pair in ("fused / strict", "captured / cpu", "compiled-fused / fused"):
            paired = by[kind, pair]
            body.append([kind, f"**{pair}**", f"{paired['ratio_median']:.2f}x", "", "", ""])
    out.append(table(["model", "mode", "steps/s", "vs CPU", "peak MiB", "loss"], body))
    out.append(f"\nFused Eager compile-cache hit rate, {args.hit_steps}-step loop "
               f"(after {args.warmup} warm-up steps)\n")
    out.append(table(["model", "hits", "misses", "hit rate", "last step with a miss"],
                     [[h["model"], h["hits_after_warmup"], h["misses_after_warmup"],
                       f"{h['hit_rate_after_warmup']:.3f}", h["last_step_with_a_miss"]]
                      for h in hits]))
    out.append(f"\nHost cost per step: trivial model (Linear(4, 4), batch 2), median of "
               f"{args.repeats} x {args.host_steps} steps; process CPU time includes the "
               f"XLA:CPU device work, which is next to nothing here\n")
    out.append(table(["mode", "CPU us/step", "wall us/step"],
                     [[h["mode"], f"{h['cpu_us_per_step']:.1f}", f"{h['wall_us_per_step']:.1f}"]
                      for h in host]))
    return "\n".join(out)


def main():
    p = common.parser(__doc__)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--hit-steps", type=int, default=100)
    p.add_argument("--host-steps", type=int, default=200)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS + EXTRA_MODELS)
    args = p.parse_args()
    if args.smoke:
        args.steps, args.repeats, args.warmup, args.hit_steps, args.host_steps = 1, 1, 1, 2, 2
        args.models = ["mlp"]

    rows = [row for kind in args.models for row in measure(kind, args)]
    hits = [cache_hit_loop(kind, args) for kind in args.models]
    host = host_cost(args)
    attention = ("F.scaled_dot_product_attention" if common.sdpa_works() else
                 "explicit softmax (F.scaled_dot_product_attention fails on tpu)")
    md = markdown(rows, hits, host, args) + f"\n\nTransformer attention: {attention}.\n"
    name = "training" if set(args.models) <= set(MODELS) else "training_" + "_".join(args.models)
    write_results(args.out, name,
                  {"steps": args.steps, "repeats": args.repeats, "warmup": args.warmup,
                   "smoke": args.smoke, "transformer_attention": attention, "rows": rows,
                   "cache_hit_loops": hits, "host_cost": host}, md)


if __name__ == "__main__":
    main()
