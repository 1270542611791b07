"""Custom kernels against the same math lowered op by op, and kernel files.

    python benchmarks/kernels.py [--repeats 3] [--steps 10] [--smoke]

RMSNorm forward + backward on a [rows, features] f32 input, three ways: the
Pallas kernel of examples/pallas_rms_norm.py (interpret mode off-TPU) with
its jax.numpy backward, the same math as one jax.numpy kernel with jax.vjp
autograd (both through torch.tpu.pallas.jax_op), and PyTorch's ops lowered
one by one; each in Fused Eager and under torch.compile(backend="tpu"). The
sides take turns per repeat; ms per step are medians, kernel / op-by-op
ratios are medians of per-repeat ratios (< 1: the kernel is faster).

Top-2 forward + backward on [tokens, experts] f32 logits: the StableHLO
kernel of examples/stablehlo_topk.py (torch_tpu.library, no JAX) against
torch.topk lowered by tpu, the same way.

Kernel files: the time a new process without JAX spends loading the saved
Pallas kernel (`load_kernel`) and on its first call (the program compile),
next to this process's first call of the same jax_op (jax.export + compile).
Needs JAX (the pallas extra). Writes results/kernels.json and kernels.md.
"""
import common  # noqa: F401  (first: sets the cache environment before torch)

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import torch

import torch_tpu
from common import median, now, ratio, table, write_results


def load_example(name):
    """examples/<name>.py (pallas_rms_norm imports JAX, which the load child
    must not, so it is loaded here rather than imported at the top)."""
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(common.REPO, "examples", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Dynamo imports a traced function's module by name
    spec.loader.exec_module(module)
    return module


def child_load(path, rows, features):
    """In a process where `import jax` fails: load and first-call times."""
    sys.modules["jax"] = None
    t0 = now()
    op = torch.tpu.pallas.load_kernel(path)
    loaded = now() - t0
    x, w = torch.randn(rows, features, device="tpu"), torch.ones(features, device="tpu")
    t1 = now()
    op(x, w).cpu()
    print(json.dumps({"load_s": loaded, "first_call_s": now() - t1}))


def topk_sides(repeats, steps, smoke):
    """ms per top-2 forward + backward, kernel and torch.topk, per mode."""
    example = load_example("stablehlo_topk")
    tokens, experts = (32, 8) if smoke else (4096, 64)
    example.register(tokens, experts)
    logits = torch.randn(tokens, experts, device="tpu").requires_grad_()
    g = torch.randn(tokens, 2, device="tpu")

    def make(top, compiled):
        def step(x, g):
            x.grad = None
            values, _ = top(x)
            values.backward(g)
            return values.detach(), x.grad
        return torch.compile(step, backend="tpu") if compiled else step

    sides = {"stablehlo": example.top2, "ops": lambda x: torch.topk(x, 2, dim=-1)}
    times, steppers = {}, {}
    for _ in range(repeats):
        for mode in ("fused", "compiled"):
            with torch_tpu.eager_mode("DEFER_AND_FUSE" if mode == "fused" else "DEFER_NEVER"):
                for name, top in sides.items():
                    if (mode, name) not in steppers:
                        steppers[(mode, name)] = make(top, mode == "compiled")
                    times.setdefault((mode, name), []).append(
                        time_steps(steppers[(mode, name)], (logits, g), steps))
    rows, results = [], {}
    for mode in ("fused", "compiled"):
        per_repeat = [ratio(k, o) for k, o in zip(times[(mode, "stablehlo")], times[(mode, "ops")])]
        r = results[f"{mode}/topk"] = {"ms": median(times[(mode, "stablehlo")]),
                                       "ops_ms": median(times[(mode, "ops")]),
                                       "kernel_over_ops": median(per_repeat)}
        rows.append([mode, "stablehlo top-2", f"{r['ms']:.3f}", f"{r['ops_ms']:.3f}",
                     f"{r['kernel_over_ops']:.2f}"])
    return (tokens, experts), rows, results


def step_fn(norm, compiled):
    def step(x, w, g):
        x.grad = w.grad = None
        y = norm(x, w)
        y.backward(g)
        return y.detach(), x.grad, w.grad

    return torch.compile(step, backend="tpu") if compiled else step


def time_steps(step, args, steps):
    # Each step ends with a synchronize, as a loop that reads its loss: left
    # running, Fused Eager may join steps into one program and compute only
    # the last one's results (the others are dead by the flush).
    # The step's results are alive at the synchronize (what is dead by a
    # flush is never computed).
    for _ in range(3):  # warm-up: compiles
        out = step(*args)
        torch.tpu.synchronize()
    t0 = now()
    for _ in range(steps):
        out = step(*args)  # noqa: F841
        torch.tpu.synchronize()
    return (now() - t0) / steps * 1e3


def main():
    p = common.parser(__doc__)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--child-load", nargs=3, metavar=("PATH", "ROWS", "FEATURES"))
    args = p.parse_args()
    if args.child_load:
        path, rows, features = args.child_load
        return child_load(path, int(rows), int(features))
    rows, features = (16, 32) if args.smoke else (2048, 1024)
    import jax
    import jax.numpy as jnp

    example = load_example("pallas_rms_norm")

    def rms_norm_jnp(x: jax.Array, w: jax.Array) -> jax.Array:
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + example.EPS) * w
    repeats, steps = (1, 2) if args.smoke else (args.repeats, args.steps)

    t0 = now()
    pallas_op = example.register("bench_kernels")
    jnp_op = torch.tpu.pallas.jax_op("bench_kernels::rms_norm_jnp", rms_norm_jnp, vjp=True)
    x = torch.randn(rows, features, device="tpu").requires_grad_()
    w = torch.randn(features, device="tpu").requires_grad_()
    g = torch.randn(rows, features, device="tpu")
    pallas_op(x.detach(), w.detach()).cpu()
    export_first_call = now() - t0

    norms = {"pallas": pallas_op, "jnp": jnp_op, "ops": example.rms_norm_reference}
    times, steppers = {}, {}  # (mode, norm) -> [ms per repeat], its step function
    for _ in range(repeats):
        for mode in ("fused", "compiled"):
            with torch_tpu.eager_mode("DEFER_AND_FUSE" if mode == "fused" else "DEFER_NEVER"):
                for name, norm in norms.items():
                    key = (mode, name)
                    if key not in times:
                        times[key] = []
                        steppers[key] = step_fn(norm, mode == "compiled")
                    times[key].append(time_steps(steppers[key], (x, w, g), steps))

    rows_out, results = [], {}
    for mode in ("fused", "compiled"):
        for name in ("pallas", "jnp"):
            per_repeat = [ratio(k, o) for k, o in zip(times[(mode, name)], times[(mode, "ops")])]
            results[f"{mode}/{name}"] = {"ms": median(times[(mode, name)]),
                                         "ops_ms": median(times[(mode, "ops")]),
                                         "kernel_over_ops": median(per_repeat)}
            r = results[f"{mode}/{name}"]
            rows_out.append([mode, name, f"{r['ms']:.3f}", f"{r['ops_ms']:.3f}", f"{r['kernel_over_ops']:.2f}"])

    topk_shape, topk_rows, topk_results = topk_sides(repeats, steps, args.smoke)
    results.update(topk_results)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rms_norm.kernel")
        torch.tpu.pallas.save_kernel(pallas_op, path)
        size = os.path.getsize(path)
        loads = []
        for _ in range(max(1, repeats // 2)):
            done = subprocess.run([common.python(), os.path.abspath(__file__), "--child-load", path,
                                   str(rows), str(features)], capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise RuntimeError(done.stderr[-2000:])
            loads.append(json.loads(done.stdout.strip().splitlines()[-1]))
    load = {"load_ms": median([l["load_s"] for l in loads]) * 1e3,
            "first_call_ms": median([l["first_call_s"] for l in loads]) * 1e3,
            "file_bytes": size, "jax_export_and_first_call_ms": export_first_call * 1e3}

    markdown = (f"RMSNorm forward + backward, [{rows}, {features}] f32, {steps} steps x {repeats} repeats\n\n"
                + table(["mode", "kernel", "kernel ms/step", "op-by-op ms/step", "kernel / op-by-op"], rows_out)
                + f"\n\nTop-2 forward + backward, {topk_shape} f32 logits (StableHLO text kernel vs torch.topk)\n\n"
                + table(["mode", "kernel", "kernel ms/step", "op-by-op ms/step", "kernel / op-by-op"], topk_rows)
                + "\n\nKernel file (the Pallas RMSNorm, a process without JAX)\n\n"
                + table(["file bytes", "load_kernel ms", "first call ms (compile)",
                         "jax_op first call here ms (import, export, compile)"],
                        [[size, f"{load['load_ms']:.2f}", f"{load['first_call_ms']:.1f}",
                          f"{load['jax_export_and_first_call_ms']:.1f}"]]))
    write_results(args.out, "kernels", {"smoke": args.smoke, "shape": [rows, features], "steps": steps, "repeats": repeats,
                                        "results": results, "kernel_file": load}, markdown)

if __name__ == "__main__":
    main()
