"""First training step with a cold versus a warm on-disk compile cache.

    python benchmarks/cold_warm.py [--repeats 3] [--modes strict fused] [--smoke]
        [--warmup-steps 12]

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

Async rows: the same model's forward under torch.compile(backend="tpu") in
Strict Eager (backward compiled by AOTAutograd, AdamW eager), with
and without `options={"async_compile": True}`, and its whole step in Fused
Eager with and without `torch_tpu.set_async_compile(True)`, in alternating
fresh processes,
on a cold cache and on one a plain Strict run filled first (per-op programs
cached, as the issue's scenario has them; the whole-graph programs missing):
time to the first finished step, the longest single step of the first
--warmup-steps steps, the steps run eagerly while the graphs compiled, the
steady step, and a warm plain Strict step of the same process (the issue's
goal: with async, no warm-up step over 3x a warm Strict step).
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
# The async rows' child modes: without and with asynchronous compiles.
ASYNC_PAIRS = {"compiled": ("compiled", "compiled-async"), "fused": ("fused-sync", "fused-async")}
ASYNC_MODES = [m for pair in ASYNC_PAIRS.values() for m in pair]


def timed_steps(task, n, after=None):
    """Seconds of each of `n` steps, each ended by a synchronize."""
    times = []
    for _ in range(n):
        t0 = now()
        task.step()
        torch.tpu.synchronize()
        times.append(now() - t0)
        if after:
            after()
    return times


def child(kind, mode, small):
    """Runs in the subprocess: prints one JSON line with its timings."""
    device = common.set_mode(mode)
    start = now()
    task = Task(kind, device, small=small)
    torch.tpu.synchronize()
    setup = now() - start
    stats = []
    times = timed_steps(task, 2, after=lambda: stats.append(torch_tpu.cache_stats()))
    print(json.dumps({"first_step_s": times[0], "second_step_s": times[1], "setup_s": setup,
                      "first_step_cache": stats[0], "loss": task.loss.item()}))


def async_child(kind, mode, small, steps):
    """Runs in the subprocess (mode "compiled" or "compiled-async": the model
    under torch.compile in Strict Eager; "fused-sync" or "fused-async": the
    whole step in Fused Eager): prints one JSON line with each of the first
    `steps` step times."""
    fused = mode.startswith("fused")
    device = common.set_mode("fused" if fused else "strict")
    task = Task(kind, device, small=small)
    if fused:
        torch_tpu.set_async_compile(mode.endswith("async"))
    else:
        task.model = torch.compile(task.model, backend="tpu",
                                   options={"async_compile": mode == "compiled-async"})
    torch.tpu.synchronize()
    eager = []  # steps that ran eagerly while a program compiled
    times = timed_steps(task, steps, after=lambda: eager.append(
        torch_tpu.metrics().get("async_eager_recordings", 0)
        + torch_tpu.compiler.compile_metrics().get("async_eager_calls", 0)))
    eager_steps = sum(b > a for a, b in zip([0] + eager, eager))
    torch_tpu.set_async_compile(False)
    common.set_mode("strict")
    strict = timed_steps(Task(kind, device, small=small), 5)  # warm Strict steps, same process
    print(json.dumps({"step_s": times, "eager_steps": eager_steps,
                      "strict_step_s": median(strict[2:]), "loss": task.loss.item()}))


def measure_async(kind, repeats, small, steps, prewarm, pair="compiled"):
    runs = {mode: [] for mode in ASYNC_PAIRS[pair]}
    for _ in range(repeats):
        for mode in runs:  # alternating, each with a fresh cold cache
            with tempfile.TemporaryDirectory(prefix="torch_tpu_async_") as d:
                if prewarm:  # per-op programs on disk; the whole-graph ones still missing
                    spawn(kind, "strict", d, small)
                runs[mode].append(spawn(kind, mode, d, small, extra=["--warmup-steps", str(steps)]))
    row = {"model": kind, "mode": pair, "steps": steps, "prewarm": prewarm, "runs": runs}
    for mode, rs in runs.items():
        tag = "async" if mode.endswith("async") else "sync"
        row[f"{tag}_first_step_s"] = median(r["step_s"][0] for r in rs)
        row[f"{tag}_longest_step_s"] = median(max(r["step_s"]) for r in rs)
        row[f"{tag}_longest_later_step_s"] = median(max(r["step_s"][1:] or [0]) for r in rs)
        row[f"{tag}_steady_step_s"] = median(median(r["step_s"][-3:]) for r in rs)
        row[f"{tag}_eager_steps"] = median(r["eager_steps"] for r in rs)
        row[f"{tag}_strict_step_s"] = median(r["strict_step_s"] for r in rs)
    row["first_async_over_sync"] = ratio(row["async_first_step_s"], row["sync_first_step_s"])
    row["longest_async_over_sync"] = ratio(row["async_longest_step_s"], row["sync_longest_step_s"])
    row["longest_async_over_strict"] = ratio(row["async_longest_step_s"], row["async_strict_step_s"])
    return row


def spawn(kind, mode, cache_dir, small, extra=()):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache_dir, TORCH_TPU_DISK_CACHE="1")
    cmd = [common.python(), os.path.abspath(__file__), "--child", kind, "--mode", mode]
    if small:
        cmd.append("--smoke")
    cmd += list(extra)
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
    p.add_argument("--warmup-steps", type=int, default=12)
    args = p.parse_args()
    if args.child and args.mode in ASYNC_MODES:
        return async_child(args.child, args.mode, args.smoke, args.warmup_steps)
    if args.child:
        return child(args.child, args.mode, args.smoke)
    if args.smoke:
        args.repeats, args.models, args.modes, args.warmup_steps = 1, ["mlp"], ["strict"], 4

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
    async_rows = [measure_async(k, args.repeats, args.smoke, args.warmup_steps, prewarm, m)
                  for m in ASYNC_PAIRS for k in args.models
                  for prewarm in ((False,) if args.smoke else (False, True))]
    md += (f"\n\nFirst {args.warmup_steps} training steps without / with asynchronous compiles, "
           f"median of {args.repeats}: `compiled`, the forward under torch.compile in Strict "
           f"Eager (option async_compile; step 1 includes Dynamo's and AOTAutograd's tracing); "
           f"`fused`, the step in Fused Eager (torch_tpu.set_async_compile). Cache: cold (every "
           f"program compiles) or per-op (a plain Strict run filled the disk cache first: only "
           f"the whole-graph or whole-step programs are missing).\n\n")
    md += table(["model", "mode", "cache", "1st step s sync / async", "async/sync", "longest step s sync / async",
                 "async/sync", "longest of steps 2+ ms sync / async", "eager steps (async)", "steady ms sync / async",
                 "warm Strict ms", "longest async / warm Strict"],
                [[r["model"], r["mode"], "per-op" if r["prewarm"] else "cold",
                  f"{r['sync_first_step_s']:.3f} / {r['async_first_step_s']:.3f}",
                  f"{r['first_async_over_sync']:.2f}",
                  f"{r['sync_longest_step_s']:.3f} / {r['async_longest_step_s']:.3f}",
                  f"{r['longest_async_over_sync']:.2f}",
                  f"{r['sync_longest_later_step_s'] * 1e3:.1f} / "
                  f"{r['async_longest_later_step_s'] * 1e3:.1f}", r["async_eager_steps"],
                  f"{r['sync_steady_step_s'] * 1e3:.1f} / {r['async_steady_step_s'] * 1e3:.1f}",
                  f"{r['async_strict_step_s'] * 1e3:.1f}",
                  f"{r['longest_async_over_strict']:.1f}"] for r in async_rows])
    write_results(args.out, "cold_warm", {"repeats": args.repeats, "smoke": args.smoke,
                                          "rows": rows, "async_rows": async_rows}, md)


def argparse_hidden():
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
