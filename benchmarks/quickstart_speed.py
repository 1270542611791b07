"""The foundation numbers: small-add latency and the quickstart MLP's steps/s.

    python benchmarks/quickstart_speed.py [--n 2000] [--steps 100] [--repeats 5] [--smoke]

1. Per-op latency of a small `add` (y = y + x on an f32 16x16 tensor, a chain
   of --n, then synchronize, divided by --n): Strict Eager versus CPU eager.
2. The quickstart training loop (examples/quickstart.py: its MLP, data, AdamW
   and batch of 128 sampled with randint each step, no host read per step):
   steps/s in Strict Eager, Fused Eager and CPU eager, after warm-up.
Medians of --repeats runs. Writes results/quickstart_speed.json and .md.
"""
import common  # noqa: F401  (first: sets the cache environment before torch)

import torch
import torch.nn.functional as F
import torch_tpu

from common import median, now, quickstart_data, quickstart_mlp, ratio, set_mode, table
from common import write_results


def add_latency(mode, n, repeats):
    device = set_mode(mode)
    x = torch.rand(16, 16).to(device)

    def run():
        start = now()
        y = x
        for _ in range(n):
            y = y + x
        common.sync(device)
        return now() - start

    run()
    return median(run() for _ in range(repeats)) / n


class Quickstart:
    """examples/quickstart.py's training loop body."""

    def __init__(self, device, batch):
        torch.manual_seed(0)
        x, y = quickstart_data(4096, seed=0)
        self.x, self.y, self.batch, self.device = x.to(device), y.to(device), batch, device
        self.model = quickstart_mlp().to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-3, weight_decay=1e-2)

    def step(self):
        idx = torch.randint(0, self.x.shape[0], (self.batch,), device=self.device)
        loss = F.cross_entropy(self.model(self.x[idx]), self.y[idx])
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss


def quickstart_rate(mode, steps, warmup, repeats):
    device = set_mode(mode)
    q = Quickstart(device, 128)
    for _ in range(warmup):
        q.step()
    common.sync(device)

    def run():
        start = now()
        for _ in range(steps):
            loss = q.step()
        common.sync(device)
        return steps / (now() - start), loss

    rates = [run() for _ in range(repeats)]
    return median(r[0] for r in rates), rates[-1][1].item()


def main():
    p = common.parser(__doc__)
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    if args.smoke:
        args.n, args.steps, args.warmup, args.repeats = 20, 1, 0, 1

    add = {m: add_latency(m, args.n, args.repeats) for m in ("strict", "cpu")}
    train = {m: quickstart_rate(m, args.steps, args.warmup, args.repeats)
             for m in ("strict", "fused", "cpu")}
    torch_tpu.set_eager_mode("DEFER_NEVER")

    md = f"Small add latency (f32 16x16, chain of {args.n}, median of {args.repeats})\n\n"
    md += table(["mode", "µs/op", "vs CPU eager"],
                [[m, f"{s * 1e6:.2f}", f"{ratio(s, add['cpu']):.1f}x"] for m, s in add.items()])
    md += (f"\n\nQuickstart MLP training (batch 128, {args.steps} steps after {args.warmup} "
           f"warm-up, median of {args.repeats})\n\n")
    md += table(["mode", "steps/s", "vs CPU eager", "vs strict", "loss"],
                [[m, f"{r:.1f}", f"{ratio(r, train['cpu'][0]):.2f}x",
                  f"{ratio(r, train['strict'][0]):.2f}x", f"{loss:.4f}"]
                 for m, (r, loss) in train.items()])
    write_results(args.out, "quickstart_speed", {
        "n": args.n, "steps": args.steps, "warmup": args.warmup, "repeats": args.repeats,
        "smoke": args.smoke,
        "add_latency_us": {m: s * 1e6 for m, s in add.items()},
        "add_strict_vs_cpu": ratio(add["strict"], add["cpu"]),
        "quickstart_steps_per_s": {m: r for m, (r, _) in train.items()},
        "quickstart_final_loss": {m: loss for m, (_, loss) in train.items()},
        "fused_vs_strict": ratio(train["fused"][0], train["strict"][0]),
        "strict_vs_cpu": ratio(train["strict"][0], train["cpu"][0])}, md)


if __name__ == "__main__":
    main()
