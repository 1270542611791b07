"""AdamW step time, fused=True against foreach=True, in each eager mode.

The parameters of a small transformer-sized model (a list of matrices and
vectors, 2.6 M values in 26 tensors) get fresh gradients once; each timed
repeat runs `steps` optimizer steps and synchronizes. The two
implementations take turns repeat by repeat in each mode, so load changes
hit both; fused / foreach is the median of the per-turn ratios of
steps/s (above 1: fused is faster).
"""
import common  # noqa: F401  (before torch: disk cache off)
import torch

SHAPES = [(256, 256)] * 8 + [(256, 1024), (1024, 256)] * 4 + [(256,)] * 10


def params(device):
    g = torch.Generator().manual_seed(0)
    ps = [torch.randn(s, generator=g).to(device).requires_grad_() for s in SHAPES]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g).to(device) * 1e-2
    return ps


def steps_per_second(opt, device, steps):
    common.sync(device)
    start = common.now()
    for _ in range(steps):
        opt.step()
    common.sync(device)
    return steps / (common.now() - start)


def main():
    p = common.parser(__doc__)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--modes", nargs="+", default=["strict", "fused", "debug"],
                   choices=sorted(common.MODES))
    args = p.parse_args()
    repeats, steps = (2, 3) if args.smoke else (args.repeats, args.steps)
    rows = []
    for mode in args.modes:
        device = common.set_mode(mode)
        opts = {kind: torch.optim.AdamW(params(device), lr=1e-3, weight_decay=1e-2,
                                        **{kind: True})
                for kind in ("fused", "foreach")}
        for opt in opts.values():  # warm-up: state creation and compiles
            for _ in range(3):
                opt.step()
        rates = {kind: [] for kind in opts}
        for _ in range(repeats):
            for kind, opt in opts.items():
                rates[kind].append(steps_per_second(opt, device, steps))
        paired = [f / e for f, e in zip(rates["fused"], rates["foreach"])]
        rows.append({"mode": mode, "fused_steps_per_s": common.median(rates["fused"]),
                     "foreach_steps_per_s": common.median(rates["foreach"]),
                     "fused_over_foreach": common.median(paired), "per_turn": paired})
    common.set_mode("strict")
    md = common.table(
        ["mode", "fused steps/s", "foreach steps/s", "fused / foreach"],
        [[r["mode"], f"{r['fused_steps_per_s']:.1f}", f"{r['foreach_steps_per_s']:.1f}",
          f"**{r['fused_over_foreach']:.2f}x**"] for r in rows])
    md = (f"AdamW step over {len(SHAPES)} tensors ({sum(torch.Size(s).numel() for s in SHAPES):,} "
          f"values), {steps} steps per repeat, {repeats} repeats taking turns; ratio = median of "
          "per-turn ratios\n\n" + md)
    common.write_results(args.out, "optimizer_step",
                         {"smoke": args.smoke, "steps": steps, "repeats": repeats, "rows": rows}, md)


if __name__ == "__main__":
    main()
