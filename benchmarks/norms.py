"""RMSNorm written as models write it (`x.pow(2).mean(-1)`, Llama, Mistral,
vLLM's native forms) and LayerNorm, forward on a [512, 1024] f32 tensor:
time per call (result read back each call), tpu in Fused and Strict Eager
against PyTorch CPU eager, medians of --repeats runs of --n calls after a
warm-up. tpu / CPU is the time ratio (below 1: tpu faster). Writes
results/norms.json and results/norms.md.

    python benchmarks/norms.py [--n 200] [--repeats 7] [--smoke]
"""
import common  # noqa: F401  (first: sets the cache environment before torch)

import torch
import torch.nn.functional as F

from common import median, now, parser, ratio, set_mode, table, write_results

CASES = {
    "rms_norm (x.pow(2).mean)": lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
    "layer_norm": lambda x, w: F.layer_norm(x, w.shape, w),
}


def time_case(fn, mode, shape, n, repeats):
    device = set_mode(mode)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(device)
    w = torch.ones(shape[-1]).to(device)
    for _ in range(3):
        fn(x, w).sum().item()
    runs = []
    for _ in range(repeats):
        t = now()
        for _ in range(n):
            fn(x, w).sum().item()
        runs.append((now() - t) / n)
    return median(runs)


def main():
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    shape, n, repeats = ((8, 64), 5, 2) if args.smoke else ((512, 1024), args.n, args.repeats)
    rows, data = [], []
    for name, fn in CASES.items():
        us = {mode: time_case(fn, mode, shape, n, repeats) * 1e6 for mode in ("cpu", "fused", "strict")}
        data.append(dict(case=name, **{f"{m}_us": v for m, v in us.items()}))
        rows.append([name, f"{us['cpu']:.0f}", f"{us['fused']:.0f}", f"{us['strict']:.0f}",
                     f"{ratio(us['fused'], us['cpu']):.2f}", f"{ratio(us['strict'], us['cpu']):.2f}"])
    md = (f"## Norms, forward on {list(shape)} f32 (µs per call, result read back)\n\n"
          + table(["case", "CPU eager", "fused", "strict", "fused / CPU", "strict / CPU"], rows))
    write_results(args.out, "norms", dict(smoke=args.smoke, shape=list(shape), rows=data), md)


if __name__ == "__main__":
    main()
