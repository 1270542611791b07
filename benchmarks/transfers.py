"""Batched host<->device copies against a loop of .to() / .cpu(), each mode.

For N tensors of one size, a timed turn copies them all host-to-device
(`torch.tpu.batch_to_device(xs)` against `[x.to("tpu") for x in xs]`,
synchronized) and device-to-host (`torch.tpu.batch_to_host(ys)` against
`[y.cpu() for y in ys]`; the sources are computed by one op each, pending
in Fused Eager, so the host read also runs their program). Batched and loop
take turns repeat by repeat; each ratio is the median of the per-turn ratios
loop time / batched time (above 1: batched is faster), for wall time and
for this process's CPU time (its own and the plugin's threads: steadier
than wall time on a busy shared machine).
"""
import time

import common  # noqa: F401  (before torch: disk cache off)
import torch

# (tensors per batch, elements per tensor)
CASES = [(64, 256), (64, 64 * 1024), (16, 1024 * 1024)]
SMOKE_CASES = [(8, 256), (4, 16 * 1024)]


def seconds(fn):
    """(wall, process CPU) seconds of fn, synchronized."""
    torch.tpu.synchronize()
    start, cpu = common.now(), time.process_time()
    fn()
    torch.tpu.synchronize()
    return common.now() - start, time.process_time() - cpu


def h2d_loop(xs):
    return [x.to("tpu") for x in xs]


def d2h_loop(ys):
    return [(y + 1).cpu() for y in ys]


def d2h_batched(ys):
    return torch.tpu.batch_to_host([y + 1 for y in ys])


def main():
    p = common.parser(__doc__)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--modes", nargs="+", default=["strict", "fused", "debug"],
                   choices=sorted(set(common.MODES)))
    args = p.parse_args()
    repeats = 2 if args.smoke else args.repeats
    cases = SMOKE_CASES if args.smoke else CASES
    rows = []
    for mode in args.modes:
        common.set_mode(mode)
        for n, numel in cases:
            g = torch.Generator().manual_seed(0)
            xs = [torch.randn(numel, generator=g) for _ in range(n)]
            ys = torch.tpu.batch_to_device(xs)
            for _ in range(2):  # warm-up: the d2h sources' programs compile
                d2h_loop(ys), d2h_batched(ys), h2d_loop(xs), torch.tpu.batch_to_device(xs)
            t = {k: [] for k in ("h2d_loop", "h2d_batched", "d2h_loop", "d2h_batched")}
            for _ in range(repeats):
                t["h2d_loop"].append(seconds(lambda: h2d_loop(xs)))
                t["h2d_batched"].append(seconds(lambda: torch.tpu.batch_to_device(xs)))
                t["d2h_loop"].append(seconds(lambda: d2h_loop(ys)))
                t["d2h_batched"].append(seconds(lambda: d2h_batched(ys)))
            mb = n * numel * 4 / 2**20
            row = {"mode": mode, "tensors": n, "elements": numel, "mib": mb}
            for kind in ("h2d", "d2h"):
                loop, batched = t[f"{kind}_loop"], t[f"{kind}_batched"]
                row[f"{kind}_loop_ms"] = 1e3 * common.median([w for w, _ in loop])
                row[f"{kind}_batched_ms"] = 1e3 * common.median([w for w, _ in batched])
                row[f"{kind}_speedup"] = common.median(
                    [common.ratio(a[0], b[0]) for a, b in zip(loop, batched)])
                row[f"{kind}_cpu_speedup"] = common.median(
                    [common.ratio(a[1], b[1]) for a, b in zip(loop, batched)])
            rows.append(row)
    common.set_mode("strict")
    md = common.table(
        ["mode", "tensors x elements", "MiB", "h2d loop ms", "h2d batched ms", "h2d loop / batched",
         "h2d (CPU time)", "d2h loop ms", "d2h batched ms", "d2h loop / batched", "d2h (CPU time)"],
        [[r["mode"], f"{r['tensors']} x {r['elements']:,}", f"{r['mib']:.1f}",
          f"{r['h2d_loop_ms']:.2f}", f"{r['h2d_batched_ms']:.2f}", f"**{r['h2d_speedup']:.2f}x**",
          f"{r['h2d_cpu_speedup']:.2f}x", f"{r['d2h_loop_ms']:.2f}", f"{r['d2h_batched_ms']:.2f}",
          f"**{r['d2h_speedup']:.2f}x**", f"{r['d2h_cpu_speedup']:.2f}x"]
         for r in rows])
    md = (f"Host<->device copies of N float32 tensors: torch.tpu.batch_to_device / batch_to_host "
          f"against a loop of .to('tpu') / .cpu() (d2h sources: one op each, y + 1), {repeats} "
          "repeats taking turns; ratio = median of per-turn ratios (wall time; CPU time: this "
          "process's, plugin threads included)\n\n" + md)
    common.write_results(args.out, "transfers",
                         {"smoke": args.smoke, "repeats": repeats, "rows": rows}, md)


if __name__ == "__main__":
    main()
