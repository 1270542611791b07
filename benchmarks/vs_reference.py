"""Our torch_tpu against the reference design's package (`torch-tpu` 0.2.0
from PyPI), side by side on the same XLA:CPU plugin, in Strict and Fused Eager.

    benchmarks/reference_env.sh          # once: the reference's own venv, .venv-ref
    python benchmarks/vs_reference.py [--smoke] [--rounds N] [--configs a,b] [--out DIR]

The reference has the same import name (`torch_tpu`), so it runs from its own
venv (.venv-ref in the repository root, or $TORCH_TPU_REF_VENV); without it
this script says so and exits 0. Its child is started with TPU_LIBRARY_PATH
set to the plugin ours loads (torch_tpu._plugin.plugin_path()), with
TPU_SKIP_MDS_QUERY=1, and calls torch_tpu._loader._init_device("tpu").

Configurations: ours-strict, ref-strict, ours-fused, ref-fused (the eager
modes DEFER_NEVER and DEFER_AND_FUSE of both packages). The reference's
torch.compile does not run on XLA:CPU, so there are no compiled rows. Each
configuration runs in its own subprocess; the configurations take turns for
`--rounds` rounds (the order reversed every other round) and every ratio is the
median of the per-round ratios, with their range.

Workloads (a steady child per configuration and round):
- tiny ops on 128 f32 values: a chain of N `y + x`, `y * 0.5` (a Python
  scalar) or `tanh(y)`, then torch.accelerator.synchronize(); µs per op,
  median of repeats after a warm-up chain.
- training steps/s: the quickstart MLP (batch 128) and the small GPT of
  common.py (2 pre-LN blocks, dim 64, seq 32, batch 8), forward, cross-entropy, zero_grad, backward, AdamW step, no host read;
  median over windows after warm-up steps. The GPT's attention is the
  explicit softmax of common.py on both sides: the reference lowers
  F.scaled_dot_product_attention to a TPU kernel (a tpu_custom_call) that
  XLA:CPU cannot compile (`--attention sdpa` shows it).
- inference forwards/s: the same GPT in eval() under no_grad, a distinct
  batch per step, each argmax kept until the window's synchronize.
- programs launched per step in the timed windows: ours
  torch_tpu.metrics()["executions"], the reference's compile-cache requests
  (_device_ops_backend._get_cache_requests(): one per launched program).
and a cold child per model, configuration and round: a new process whose
on-disk compile caches are fresh and empty (ours: TORCH_TPU_CACHE_DIR with
TORCH_TPU_DISK_CACHE=1; the reference: TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT,
and a tier-2 cache of its own, TORCH_TPU_TIER2_COMPILATION_CACHE: its default
one lives in /dev/shm and survives processes, so without it every cold child
after the first found its programs compiled), timing model build and move to
tpu plus its first training step (torch._dynamo imported before, see
cold_child; the reference starts its runtime in _init_device, before that;
ours at the first transfer, inside it), and the whole process (imports
included), and counting the first step's compiles.

Ratios: "ours / ref" > 1 means ours is better: rates are ours/ref, times and
launch counts ref/ours. Writes results/vs_reference.json and .md.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CONFIGS = ["ours-strict", "ref-strict", "ours-fused", "ref-fused"]
MODELS = ("mlp", "gpt")
MARK = "VS_REFERENCE_RESULT "
ENV_VENV = "TORCH_TPU_REF_VENV"
REF_TIER2_ROOT = "/dev/shm/torch_tpu_cache"  # the reference's second compile-cache tier
OPS = {
    "add": lambda y, x: y + x,
    "mul_scalar": lambda y, x: y * 0.5,
    "tanh": lambda y, x: y.tanh(),
}
SIZES = {
    "full": dict(ops_n=500, ops_repeats=5, ops=list(OPS), mlp_batch=128, gpt=dict(
        vocab=256, dim=64, heads=4, layers=2, seq=32), gpt_batch=8, warmup=4, steps=25,
        windows=3, infer_batches=16),
    "smoke": dict(ops_n=20, ops_repeats=1, ops=["add"], mlp_batch=32, gpt=dict(
        vocab=64, dim=32, heads=2, layers=1, seq=8), gpt_batch=2, warmup=2, steps=2,
        windows=1, infer_batches=2),
}


def reference_python():
    venv = os.environ.get(ENV_VENV) or os.path.join(REPO, ".venv-ref")
    path = os.path.join(venv, "bin", "python")
    return path if os.path.exists(path) else None


# --- the child: runs with either package ---------------------------------

class Side:
    """What differs between the two packages: mode switch, counters."""

    def __init__(self, side):
        self.side = side
        sys.path.insert(0, HERE)
        import common  # noqa: F401  (first: cache environment, 1 CPU thread)
        import torch
        import torch_tpu
        self.torch = torch
        self.package = os.path.dirname(torch_tpu.__file__)
        if side == "ref":
            warnings.filterwarnings("ignore")  # its "experimental API" warnings
            torch_tpu._loader._init_device("tpu")
            from torch_tpu._internal.device import _device_ops_backend as backend
            self.backend = backend
            import importlib.metadata
            self.version = importlib.metadata.version("torch-tpu")
        else:
            self.torch_tpu = torch_tpu
            self.version = "this checkout"

    def set_mode(self, mode):
        name = {"strict": "DEFER_NEVER", "fused": "DEFER_AND_FUSE"}[mode]
        if self.side == "ref":
            self.torch.tpu.eager_mode = getattr(self.torch.tpu.EagerMode, name)
        else:
            self.torch_tpu.set_eager_mode(name)

    def sync(self):
        self.torch.accelerator.synchronize()

    def launches(self):
        if self.side == "ref":
            return self.backend._get_cache_requests()
        return self.torch_tpu.metrics().get("executions", 0)

    def compiles(self):
        if self.side == "ref":
            return self.backend._get_cache_misses()
        return self.torch_tpu.metrics().get("compiles", 0)


class Train:
    """A model of common.py, AdamW, a fixed batch; step() has no host read."""

    def __init__(self, kind, size, device, sdpa):
        import torch
        import torch.nn.functional as F

        import common
        self.F = F
        torch.manual_seed(0)
        if kind == "mlp":
            self.model = common.quickstart_mlp()
            x, y = common.quickstart_data(n=size["mlp_batch"])
        else:
            g = size["gpt"]
            self.model = common.TinyTransformer(**g, sdpa=sdpa)
            tokens = torch.randint(0, g["vocab"], (size["gpt_batch"], g["seq"] + 1),
                                   generator=torch.Generator().manual_seed(0))
            x, y = tokens[:, :-1], tokens[:, 1:]
        self.model.to(device)
        self.x, self.y = x.to(device), y.to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=1e-2)
        self.loss = None

    def step(self):
        logits = self.model(self.x)
        loss = self.F.cross_entropy(logits.reshape(-1, logits.shape[-1]), self.y.reshape(-1))
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.loss = loss


def guarded(fn):
    """A workload's result, or its error (one failing workload does not hide
    the others' numbers)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001  (reported in the table)
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}


def tiny_ops(side, size):
    torch = side.torch
    x = torch.rand(128).to("tpu")
    out = {}
    for name in size["ops"]:
        op, n = OPS[name], size["ops_n"]

        def chain():
            start = time.perf_counter()
            y = x
            for _ in range(n):
                y = op(y, x)
            side.sync()
            return (time.perf_counter() - start) / n * 1e6

        chain()  # compiles
        before, compiles = side.launches(), side.compiles()
        times = sorted(chain() for _ in range(size["ops_repeats"]))
        launches = (side.launches() - before) / (size["ops_repeats"] * n)
        out[name] = {"us_per_op": times[len(times) // 2], "launches_per_op": launches,
                     "compiles_in_repeats": side.compiles() - compiles}
    return out


def windows(side, size, body, count):
    """Runs body() `count` times per window; returns (per-second rates of the
    windows, launches per call over the windows)."""
    rates, before = [], side.launches()
    for _ in range(size["windows"]):
        start = time.perf_counter()
        body()
        side.sync()
        rates.append(count / (time.perf_counter() - start))
    launches = (side.launches() - before) / (count * size["windows"])
    return sorted(rates)[len(rates) // 2], launches


def train(side, kind, size):
    task = Train(kind, size, "tpu", size["sdpa"])
    for _ in range(size["warmup"]):
        task.step()
    side.sync()
    compiles = side.compiles()

    def body():
        for _ in range(size["steps"]):
            task.step()

    rate, launches = windows(side, size, body, size["steps"])
    return {"steps_per_s": rate, "launches_per_step": launches,
            "compiles_in_windows": side.compiles() - compiles, "loss": task.loss.item()}


def infer(side, size):
    torch = side.torch
    import common
    g = size["gpt"]
    torch.manual_seed(0)
    model = common.TinyTransformer(**g, sdpa=size["sdpa"]).eval().to("tpu")
    gen = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, g["vocab"], (size["gpt_batch"], g["seq"]), generator=gen).to("tpu")
               for _ in range(size["infer_batches"])]
    with torch.no_grad():
        for _ in range(2):
            for b in batches[: size["warmup"]]:
                model(b).argmax(-1)
            side.sync()
        compiles = side.compiles()

        def body():
            kept = [model(b).argmax(-1) for b in batches]
            side.sync()
            del kept

        rate, launches = windows(side, size, body, len(batches))
    return {"forwards_per_s": rate, "launches_per_forward": launches,
            "compiles_in_windows": side.compiles() - compiles}


def steady_child(side_name, mode, size):
    side = Side(side_name)
    side.set_mode(mode)
    result = {"package": side.package, "version": side.version}
    result["ops"] = guarded(lambda: tiny_ops(side, size))
    result["mlp_train"] = guarded(lambda: train(side, "mlp", size))
    result["gpt_train"] = guarded(lambda: train(side, "gpt", size))
    result["gpt_infer"] = guarded(lambda: infer(side, size))
    return result


def cold_child(side_name, mode, kind, size):
    side = Side(side_name)
    side.set_mode(mode)
    # PyTorch imports torch._dynamo the first time a function it wraps with
    # _disable_dynamo runs (torch.optim.Optimizer.__init__ is one): about
    # 0.5 s on this machine, paid by CPU eager as well. The reference imports
    # it with its package, ours when the optimizer is built: imported here,
    # before the timed window, on both sides (the whole-process time keeps it).
    import torch._dynamo  # noqa: F401
    start = time.perf_counter()
    task = Train(kind, size, "tpu", size["sdpa"])
    side.sync()
    setup = time.perf_counter() - start
    compiles = side.compiles()
    times = []
    for _ in range(2):
        start = time.perf_counter()
        task.step()
        side.sync()
        times.append(time.perf_counter() - start)
        if len(times) == 1:
            first_compiles = side.compiles() - compiles
    return {"package": side.package, "setup_s": setup, "first_step_s": times[0],
            "second_step_s": times[1], "first_step_compiles": first_compiles,
            "loss": task.loss.item()}


# --- the parent: takes turns, compares ------------------------------------

def spawn(config, args, cold_model=None):
    side, mode = config.split("-")
    cmd = [reference_python() if side == "ref" else sys.executable, os.path.abspath(__file__),
           "--child", config] + (["--cold", cold_model] if cold_model else []) + \
        (["--smoke"] if args.smoke else []) + ["--attention", args.attention]
    env = dict(os.environ)
    if side == "ref":
        import torch_tpu._plugin
        env.pop("PYTHONPATH", None)  # never our torch_tpu in the reference's process
        env.update(TPU_LIBRARY_PATH=torch_tpu._plugin.plugin_path(), TPU_SKIP_MDS_QUERY="1")
    else:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="vs_reference_cache_") as cache:
        # The reference keeps a machine-wide second tier in
        # /dev/shm/torch_tpu_cache/<name> (name "default") that outlives its
        # processes: a cold child gets a tier of its own, removed after it.
        tier2 = os.path.basename(cache)
        if cold_model:
            env.update(TORCH_TPU_DISK_CACHE="1", TORCH_TPU_CACHE_DIR=cache,
                       TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT=cache,
                       TORCH_TPU_TIER2_COMPILATION_CACHE=tier2)
        else:
            env.update(TORCH_TPU_DISK_CACHE="0")
            env.pop("TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT", None)
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        finally:
            shutil.rmtree(os.path.join(REF_TIER2_ROOT, tier2), ignore_errors=True)
        wall = time.perf_counter() - start
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{config} {cold_model or 'steady'} failed (exit {proc.returncode}):\n"
                         f"{proc.stderr[-3000:]}")
    result = json.loads(lines[-1][len(MARK):])
    result["process_s"] = wall
    expected = os.path.dirname(os.path.dirname(reference_python())) if side == "ref" else REPO
    if not os.path.realpath(result["package"]).startswith(os.path.realpath(expected)):
        raise SystemExit(f"{config} imported torch_tpu from {result['package']}, not {expected}")
    return result


# Each row: label, where it is in a run, and whether bigger is better.
def row_specs(size):
    specs = [(f"tiny op `{name}` (µs/op)", ("ops", name, "us_per_op"), False) for name in size["ops"]]
    specs += [("MLP train (steps/s)", ("mlp_train", "steps_per_s"), True),
              ("GPT train (steps/s)", ("gpt_train", "steps_per_s"), True),
              ("GPT inference forward (forwards/s)", ("gpt_infer", "forwards_per_s"), True),
              ("MLP cold: model to tpu + first step (s)", ("cold_mlp", "to_first_step_s"), False),
              ("GPT cold: model to tpu + first step (s)", ("cold_gpt", "to_first_step_s"), False),
              ("MLP cold: whole process, 2 steps (s)", ("cold_mlp", "process_s"), False),
              ("GPT cold: whole process, 2 steps (s)", ("cold_gpt", "process_s"), False),
              ("MLP train programs launched / step", ("mlp_train", "launches_per_step"), False),
              ("GPT train programs launched / step", ("gpt_train", "launches_per_step"), False),
              ("GPT inference programs launched / forward", ("gpt_infer", "launches_per_forward"),
               False),
              ("MLP cold first step compiles", ("cold_mlp", "first_step_compiles"), False),
              ("GPT cold first step compiles", ("cold_gpt", "first_step_compiles"), False)]
    return specs


def lookup(run, path):
    if path[-1] == "to_first_step_s":  # the time a user waits, lazy setup or not
        setup, first = lookup(run, path[:-1] + ("setup_s",)), lookup(run, path[:-1] + ("first_step_s",))
        return None if setup is None or first is None else setup + first
    value = run
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def median(values):
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def fmt(v):
    if v is None:
        return "failed"
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}" if abs(v) >= 0.1 else f"{v:.3f}"


def compare(runs, size, modes):
    rows, table_rows = [], []
    for label, path, bigger in row_specs(size):
        for mode in modes:
            ours, ref = runs.get(f"ours-{mode}", []), runs.get(f"ref-{mode}", [])
            if not any(path[0] in r for r in ours + ref):
                continue  # not measured in this run (--no-cold, --smoke)
            a = [lookup(r, path) for r in ours]
            b = [lookup(r, path) for r in ref]
            per_round = [(x / y if bigger else y / x) if x and y else None
                         for x, y in zip(a, b)]
            good = [v for v in per_round if v is not None]
            row = {"workload": label, "mode": mode, "ours": median([v for v in a if v is not None]),
                   "ref": median([v for v in b if v is not None]), "per_round": per_round,
                   "ratio_median": median(good), "bigger_is_better": bigger}
            rows.append(row)
            spread = f"{min(good):.2f}-{max(good):.2f}" if good else ""
            table_rows.append([label, mode, fmt(row["ours"]), fmt(row["ref"]),
                               f"{row['ratio_median']:.2f}x" if good else "n/a", spread])
    return rows, table_rows


def fmt_count(runs, path):
    total = 0
    for r in runs:
        value = lookup(r, path)
        if isinstance(value, dict) and "error" not in value and path == ("ops",):
            value = sum(v.get("compiles_in_repeats", 0) for v in value.values())
        if not isinstance(value, (int, float)):
            return "failed"
        total += value
    return f"{total:.0f}"


def errors(runs):
    out = []
    for config, rs in runs.items():
        for i, r in enumerate(rs):
            for key, value in r.items():
                if isinstance(value, dict) and "error" in value:
                    out.append(f"- {config}, round {i + 1}, {key}: {value['error']}")
    return sorted(set(out))


def main():
    sys.path.insert(0, HERE)
    import argparse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny, fast run (used by the tests)")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--no-cold", action="store_true", help="skip the cold first-step children")
    p.add_argument("--attention", choices=["explicit", "sdpa"], default="explicit",
                   help="the GPT's attention: explicit softmax (default; the reference's "
                   "F.scaled_dot_product_attention needs a TPU kernel) or sdpa")
    p.add_argument("--report", metavar="JSON",
                   help="only write the tables again from an earlier run's vs_reference.json")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--cold", choices=MODELS, help=argparse.SUPPRESS)
    args = p.parse_args()
    size = dict(SIZES["smoke" if args.smoke else "full"], sdpa=args.attention == "sdpa")
    if args.child:
        side, mode = args.child.split("-")
        result = cold_child(side, mode, args.cold, size) if args.cold else \
            steady_child(side, mode, size)
        print(MARK + json.dumps(result), flush=True)
        return
    if args.report:
        with open(args.report) as f:
            saved = json.load(f)
        report(args.out, saved["smoke"], saved["size"], saved["rounds"], saved["runs"],
               saved.get("load_during_run", []))
        return
    if reference_python() is None:
        print("reference not installed; run benchmarks/reference_env.sh")
        return

    rounds = 1 if args.smoke else args.rounds
    names = args.configs.split(",")
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown configs {unknown}; choose from {CONFIGS}")
    cold_models = () if args.no_cold else (("mlp",) if args.smoke else MODELS)
    runs, loads = {n: [] for n in names}, []
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            result = spawn(name, args)
            for kind in cold_models:
                result[f"cold_{kind}"] = spawn(name, args, kind)
            runs[name].append(result)
            print(f"round {r + 1} {name}: {json.dumps(result)}", flush=True)
            loads.append(os.getloadavg()[0])
    report(args.out, args.smoke, size, rounds, runs, loads)


def report(out, smoke, size, rounds, runs, loads):
    """Writes the tables (and the JSON) of a finished run."""
    import common
    names = list(runs)

    modes = [m for m in ("strict", "fused") if f"ours-{m}" in names or f"ref-{m}" in names]
    rows, table_rows = compare(runs, size, modes)
    ref_version = next((rs[0]["version"] for n, rs in runs.items() if n.startswith("ref") and rs),
                       None)
    markdown = (
        f"## torch_tpu against the reference (torch-tpu {ref_version}) on the same plugin\n\n"
        f"{rounds} rounds, the configurations taking turns; each ratio is the median of the "
        "per-round ratios (range after it). Ratio > 1: ours is better (rates ours/ref; times "
        "and counts ref/ours).\n\n" + common.table(
            ["workload", "mode", "ours", "reference", "ours vs ref", "per-round range"], table_rows))
    markdown += ("\n\nCompiles inside the timed repeats and windows (after warm-up), summed "
                 "over rounds:\n\n" + common.table(
                     ["config", "tiny ops", "MLP train", "GPT train", "GPT inference"],
                     [[n] + [fmt_count(rs, path) for path in (
                         ("ops",), ("mlp_train", "compiles_in_windows"),
                         ("gpt_train", "compiles_in_windows"),
                         ("gpt_infer", "compiles_in_windows"))] for n, rs in runs.items()]))
    markdown += (f"\n\nSizes: tiny-op chains of {size['ops_n']} ops on 128 f32, median of "
                 f"{size['ops_repeats']}; training and inference {size['windows']} windows of "
                 f"{size['steps']} steps / {size['infer_batches']} forwards after "
                 f"{size['warmup']} warm-up steps; GPT {size['gpt']}, batch {size['gpt_batch']}, "
                 f"attention {'sdpa' if size['sdpa'] else 'explicit'}; MLP batch "
                 f"{size['mlp_batch']}." + (" Load average (1 min) after each configuration: "
                                           + " ".join(f"{v:.1f}" for v in loads) + "."
                                           if loads else ""))
    failures = errors(runs)
    if failures:
        markdown += "\n\nFailed workloads:\n\n" + "\n".join(failures)
    losses = {n: lookup(rs[0], ("gpt_train", "loss")) for n, rs in runs.items() if rs}
    markdown += ("\n\nGPT training loss after the run (same data and initial weights): " +
                 ", ".join(f"{n} {v:.4f}" if v is not None else f"{n} failed"
                           for n, v in losses.items()) + "\n")
    common.write_results(out, "vs_reference",
                         {"smoke": smoke, "size": size, "rounds": rounds,
                          "reference_version": ref_version, "load_during_run": loads,
                          "rows": rows, "runs": runs}, markdown)


if __name__ == "__main__":
    main()
