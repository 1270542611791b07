"""What the device-side index checks cost: steps/s with checks on and off.

Two workloads, each in Strict and Fused Eager: the small transformer's
training step (embedding lookups and cross-entropy targets are checked) and
a gather-heavy step (an embedding-bag style lookup of many ids into a large
table, summed, with backward and SGD). Checks on and off take turns repeat by
repeat; on / off is the median of the per-turn ratios (1.0 = free).
"""
import common  # noqa: F401  (before torch: disk cache off)
import torch
import torch.nn.functional as F

import torch_tpu


class GatherTask:
    """Many embedding lookups per step: 4096 ids into a 20000 x 64 table."""

    def __init__(self, device, small=False):
        torch.manual_seed(0)
        rows = 2000 if small else 20000
        self.table = torch.nn.Parameter(torch.randn(rows, 64, device=device) * 0.01)
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, rows, (64, 64), generator=g).to(device)
        self.w = torch.randn(64, device=device)
        self.opt = torch.optim.SGD([self.table], lr=0.1)

    def step(self):
        bag = F.embedding(self.ids, self.table).sum(1)  # [64, 64]
        loss = (bag @ self.w).square().mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()


def measure(make, mode, checks, steps):
    torch_tpu.set_index_checks(checks)
    common.set_mode(mode)
    task = make()
    for _ in range(3):  # warm-up: compiles
        task.step()
    torch.tpu.synchronize()
    start = common.now()
    for _ in range(steps):
        task.step()
    torch.tpu.synchronize()
    return steps / (common.now() - start)


def main():
    args = common.parser(__doc__).parse_args()
    steps, repeats = (5, 1) if args.smoke else (40, 5)
    workloads = {
        "transformer": lambda: common.Task("transformer", "tpu", small=args.smoke),
        "gather": lambda: GatherTask("tpu", small=args.smoke),
    }
    rows, results = [], {}
    for name, make in workloads.items():
        for mode_name in ("strict", "fused"):
            mode = mode_name
            on, off, ratios = [], [], []
            for _ in range(repeats):
                a = measure(make, mode, True, steps)
                b = measure(make, mode, False, steps)
                on.append(a)
                off.append(b)
                ratios.append(a / b)
            key = f"{name}/{mode_name}"
            results[key] = {"on_steps_per_s": on, "off_steps_per_s": off,
                            "on_over_off": common.median(ratios)}
            rows.append([key, f"{common.median(on):.1f}", f"{common.median(off):.1f}",
                         f"{common.median(ratios):.3f}"])
    torch_tpu.set_index_checks(True)
    md = common.table(["workload/mode", "checks on (steps/s)", "checks off (steps/s)",
                       "on / off (median of turns)"], rows)
    common.write_results(args.out, "index_checks",
                         {"smoke": args.smoke, "steps": steps, "repeats": repeats,
                          "rows": results}, md)


if __name__ == "__main__":
    main()
