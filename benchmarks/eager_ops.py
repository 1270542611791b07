"""Host cost per tiny op in each eager mode, against PyTorch CPU eager.

    python benchmarks/eager_ops.py [--n 2000] [--repeats 5] [--smoke]

For each op (a chain of N tiny ops on a small f32 tensor, y = op(y)):
  fused  : Fused Eager, time to RECORD the N ops (before the flush) / N;
           the flush (compile or cache hit, then execute) is reported apart
  strict : Strict Eager, N ops then torch.tpu.synchronize(), / N
  debug  : Debug Eager (launch blocking), N ops then synchronize, / N
  cpu    : PyTorch CPU eager, N ops, / N
Medians of --repeats runs after one warm-up run (which compiles). For the
tpu modes, a second set of runs with torch_tpu.time_kernels() on also gives
the host time spent inside torch_tpu's kernel per op ("in-kernel µs"): the
recording (Fused) or launch (Strict) itself, without the Python call, argument
parsing, dispatcher and autograd layers that CPU eager pays as well. Writes
results/eager_ops.json and results/eager_ops.md.
"""
import common  # noqa: F401  (first: sets the cache environment before torch)

import torch
import torch_tpu

from common import median, now, ratio, set_mode, table, write_results

OPS = {
    "add": lambda y, x: y + x,          # tensor-tensor
    "mul_scalar": lambda y, x: y * 0.5,  # scalar operand (a program input)
    "tanh": lambda y, x: torch.tanh(y),  # unary
}


def chain(op, x, n):
    y = x
    for _ in range(n):
        y = op(y, x)
    return y


def break_loop_match(x):
    """Flushes a program unlike the timed chain, so Fused Eager's repeated-
    sequence heuristic cannot cut the timed recording at a 'loop boundary'."""
    (x - 1).sum()
    torch.tpu.synchronize()


def fused_once(op, x, n):
    """(record seconds, flush seconds, flushes during recording)."""
    break_loop_match(x)
    before = torch_tpu.metrics()
    start = now()
    y = chain(op, x, n)
    recorded = now()
    after = torch_tpu.metrics()
    torch.tpu.synchronize()
    done = now()
    del y
    flushes = sum(after.get(k, 0) - before.get(k, 0) for k in after if k.startswith("flush_"))
    return recorded - start, done - recorded, flushes


def eager_once(op, x, n, device):
    start = now()
    y = chain(op, x, n)
    if device.type == "tpu":
        torch.tpu.synchronize()
    del y
    return now() - start


def kernel_us(op, x, n):
    """Host µs per op inside torch_tpu's kernel over one chain (timing on)."""
    break_loop_match(x)
    before = torch_tpu.metrics()
    y = chain(op, x, n)
    after = torch_tpu.metrics()
    torch.tpu.synchronize()
    del y
    calls = after.get("kernel_calls", 0) - before.get("kernel_calls", 0)
    return (after.get("kernel_s", 0) - before.get("kernel_s", 0)) / max(calls, 1) * 1e6


def measure(name, mode, n, repeats, shape):
    op = OPS[name]
    device = set_mode(mode)
    x = torch.rand(shape).to(device)
    if mode == "fused":
        fused_once(op, x, n)  # compiles the N-op program
        runs = [fused_once(op, x, n) for _ in range(repeats)]
        row = {"per_op_us": median(r[0] for r in runs) / n * 1e6,
               "flush_ms": median(r[1] for r in runs) * 1e3,
               "flushes_while_recording": max(r[2] for r in runs)}
    else:
        eager_once(op, x, n, device)
        row = {"per_op_us": median(eager_once(op, x, n, device) for _ in range(repeats)) / n * 1e6}
    if mode in ("fused", "strict"):
        torch_tpu.time_kernels(True)
        row["kernel_us"] = median(kernel_us(op, x, n) for _ in range(repeats))
        torch_tpu.time_kernels(False)
    row.update(op=name, mode=mode)
    return row


def main():
    p = common.parser(__doc__)
    p.add_argument("--n", type=int, default=2000, help="ops per chain")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--shape", type=int, nargs="+", default=[16, 16])
    args = p.parse_args()
    if args.smoke:
        args.n, args.repeats, names = 50, 2, ["add"]
    else:
        names = list(OPS)

    rows = [measure(name, mode, args.n, args.repeats, tuple(args.shape))
            for name in names for mode in ("fused", "strict", "debug", "cpu")]
    torch_tpu.set_eager_mode("DEFER_NEVER")
    cpu = {r["op"]: r["per_op_us"] for r in rows if r["mode"] == "cpu"}
    for r in rows:
        r["vs_cpu"] = ratio(r["per_op_us"], cpu[r["op"]])

    md = (f"Host cost per tiny op, f32 {tuple(args.shape)}, chain of {args.n}, "
          f"median of {args.repeats}\n\n")
    md += table(["op", "mode", "µs/op", "vs CPU eager", "in-kernel µs/op", "fused flush ms"],
                [[r["op"], r["mode"], f"{r['per_op_us']:.2f}", f"{r['vs_cpu']:.1f}x",
                  f"{r['kernel_us']:.2f}" if "kernel_us" in r else "",
                  f"{r['flush_ms']:.1f}" if "flush_ms" in r else ""] for r in rows])
    md += ("\nµs/op: the whole Python call, as a user sees it. In-kernel: the part "
           "spent in torch_tpu's C++ kernel (checks + recording or launch); the rest "
           "is Python, argument parsing, the dispatcher and autograd, which CPU eager "
           "pays too.\n")
    write_results(args.out, "eager_ops", {"n": args.n, "repeats": args.repeats,
                                          "shape": args.shape, "smoke": args.smoke,
                                          "rows": rows}, md)


if __name__ == "__main__":
    main()
