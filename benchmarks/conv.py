"""Convolutions on tpu against PyTorch CPU eager, forward and backward.

    python benchmarks/conv.py [--repeats 7] [--smoke] [--cases a,b]

Each case is one nn.Conv*/ConvTranspose* layer on one input: depthwise,
grouped and dense 2-D, 1-D and 3-D, strided, dilated and transposed. For each,
"forward" times the layer's output and "backward" the forward plus the
gradients of input and weight (a fixed output gradient). tpu runs in Strict
Eager (each op its own program, as a user's eager code runs); every time is
the median of --repeats runs after a warm-up run (which compiles), the tpu
ones ending in torch.tpu.synchronize(). tpu / CPU is the time ratio (below 1:
tpu faster). Writes results/conv.json and results/conv.md.
"""
import common  # noqa: F401  (first: sets the cache environment before torch)

import torch
import torch.nn as nn

from common import median, now, parser, ratio, set_mode, sync, table, write_results

# name: (layer, input shape); sizes of a small vision model's stages.
CASES = {
    "depthwise2d_7x7": (lambda: nn.Conv2d(16, 16, 7, padding=3, groups=16), (2, 16, 56, 56)),
    "dense2d_7x7": (lambda: nn.Conv2d(16, 16, 7, padding=3), (2, 16, 56, 56)),
    "depthwise2d_3x3_s2": (lambda: nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32),
                           (2, 32, 56, 56)),
    "grouped2d_g4": (lambda: nn.Conv2d(64, 64, 3, padding=1, groups=4), (2, 64, 28, 28)),
    "dense2d_3x3": (lambda: nn.Conv2d(64, 64, 3, padding=1), (2, 64, 28, 28)),
    "dilated2d_3x3_d2": (lambda: nn.Conv2d(32, 32, 3, padding=2, dilation=2), (2, 32, 28, 28)),
    "strided2d_3x3_s2": (lambda: nn.Conv2d(32, 64, 3, stride=2, padding=1), (2, 32, 56, 56)),
    "depthwise1d_k7": (lambda: nn.Conv1d(64, 64, 7, padding=3, groups=64), (4, 64, 256)),
    "dense1d_k3": (lambda: nn.Conv1d(64, 64, 3, padding=1), (4, 64, 256)),
    "depthwise3d_3": (lambda: nn.Conv3d(16, 16, 3, padding=1, groups=16), (2, 16, 16, 16, 16)),
    "dense3d_3": (lambda: nn.Conv3d(16, 16, 3, padding=1), (2, 16, 16, 16, 16)),
    "transposed2d_s2": (lambda: nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1),
                        (2, 32, 28, 28)),
    "transposed2d_depthwise_s2": (lambda: nn.ConvTranspose2d(16, 16, 4, stride=2, padding=1,
                                                             groups=16), (2, 16, 28, 28)),
}
SMOKE_CASES = {"depthwise2d_3x3": (lambda: nn.Conv2d(4, 4, 3, padding=1, groups=4), (1, 4, 8, 8))}


def timed(fn, device, repeats):
    fn()  # warm-up (compiles on tpu)
    sync(device)
    times = []
    for _ in range(repeats):
        start = now()
        fn()
        sync(device)
        times.append(now() - start)
    return median(times)


def measure(make, shape, device, repeats):
    torch.manual_seed(0)
    layer = make().to(device)
    x = torch.randn(shape).to(device).requires_grad_()
    with torch.no_grad():
        gy = torch.randn_like(layer(x))

    def forward():
        with torch.no_grad():
            layer(x)

    def backward():
        x.grad = None
        layer.weight.grad = None
        layer(x).backward(gy)

    return timed(forward, device, repeats), timed(backward, device, repeats)


def main():
    p = parser(__doc__)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--cases", default="", help="comma-separated subset of the cases")
    args = p.parse_args()
    cases = SMOKE_CASES if args.smoke else CASES
    if args.cases:
        cases = {k: v for k, v in CASES.items() if k in args.cases.split(",")}
    repeats = 2 if args.smoke else args.repeats
    rows, out = [], []
    for name, (make, shape) in cases.items():
        cpu_f, cpu_b = measure(make, shape, set_mode("cpu"), repeats)
        tpu_f, tpu_b = measure(make, shape, set_mode("strict"), repeats)
        out.append({"case": name, "input": list(shape), "cpu_forward_ms": cpu_f * 1e3,
                    "tpu_forward_ms": tpu_f * 1e3, "forward_ratio": ratio(tpu_f, cpu_f),
                    "cpu_backward_ms": cpu_b * 1e3, "tpu_backward_ms": tpu_b * 1e3,
                    "backward_ratio": ratio(tpu_b, cpu_b)})
        r = out[-1]
        rows.append([name, "x".join(map(str, shape)), f"{r['cpu_forward_ms']:.3f}",
                     f"{r['tpu_forward_ms']:.3f}", f"{r['forward_ratio']:.2f}",
                     f"{r['cpu_backward_ms']:.3f}", f"{r['tpu_backward_ms']:.3f}",
                     f"{r['backward_ratio']:.2f}"])
        print(rows[-1], flush=True)
    md = ("Convolutions, tpu (Strict Eager, default precision) against CPU eager; "
          "medians in ms, ratio = tpu / CPU (below 1: tpu faster)\n\n"
          + table(["case", "input", "CPU fwd", "tpu fwd", "fwd ratio", "CPU fwd+bwd",
                   "tpu fwd+bwd", "bwd ratio"], rows))
    write_results(args.out, "conv", {"smoke": args.smoke, "repeats": repeats, "rows": out}, md)


if __name__ == "__main__":
    main()
