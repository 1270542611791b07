"""A long Fused Eager AdamW loop: no recompile after warm-up, flat memory.

Trains the quickstart MLP for many steps in Fused Eager with AdamW, a new
learning rate every step (Python scalars that sometimes repeat and sometimes
equal each other) and a loss read every 100 steps. Reports compiles and cache
misses after warm-up and the resident-memory slope (least squares over the
samples after warm-up (250 steps), in KiB per 1000 steps).
"""
import resource

import common  # noqa: F401  (before torch: disk cache off)
import torch
import torch.nn.functional as F

import torch_tpu

WARMUP = 250  # covers two host reads of the loss


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024


def slope(xs, ys):
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0


def main():
    p = common.parser(__doc__)
    p.add_argument("--steps", type=int, default=10_000)
    args = p.parse_args()
    steps = 300 if args.smoke else args.steps
    torch_tpu.set_eager_mode("DEFER_AND_FUSE")
    model = common.quickstart_mlp().to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    x, y = common.quickstart_data(n=256)
    x, y = x.to("tpu"), y.to("tpu")
    samples, misses_at_warmup, compiles_at_warmup = [], None, None
    start = common.now()
    for step in range(steps):
        # lr and weight decay change every step and are equal every 7th.
        lr = 1e-3 * (1 + (step % 13)) / 13
        for g in opt.param_groups:
            g["lr"] = lr
            g["weight_decay"] = lr if step % 7 == 0 else 1e-2
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 99:
            loss.item()
            if step >= WARMUP:
                samples.append((step, rss_kib()))
        if step == WARMUP - 1:
            torch.tpu.synchronize()
            misses_at_warmup = torch_tpu.cache_stats()["misses"]
            compiles_at_warmup = torch_tpu.metrics().get("compiles", 0)
    torch.tpu.synchronize()
    seconds = common.now() - start
    m = torch_tpu.metrics()
    result = {
        "smoke": args.smoke,
        "steps": steps,
        "steps_per_s": steps / seconds,
        "cache_misses_after_warmup": torch_tpu.cache_stats()["misses"] - misses_at_warmup,
        "compiles_after_warmup": m.get("compiles", 0) - compiles_at_warmup,
        "rss_kib_first": samples[0][1] if samples else None,
        "rss_kib_last": samples[-1][1] if samples else None,
        "rss_slope_kib_per_1000_steps": 1000 * slope(*zip(*samples)) if len(samples) > 1 else 0.0,
        "recompile_warnings": m.get("recompile_warnings", 0),
        "environment": common.environment(),
    }
    rows = [[k, f"{v:.3f}" if isinstance(v, float) else str(v)]
            for k, v in result.items() if k != "environment"]
    md = common.table(["measure", "value"], rows)
    common.write_results(args.out, "soak", result, md)


if __name__ == "__main__":
    main()
