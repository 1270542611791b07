"""torch.tpu.optimizers.SingleTraceTrainer steps/s: the step-graph default
against the traced path through the torch.compile graph runner, and CPU eager.

    python benchmarks/single_trace_trainer.py [--steps 50] [--repeats 5] [--warmup 3]
                                              [--models mlp transformer] [--smoke]

Models and batches are training.py's (the quickstart MLP, batch 128; the
small transformer). A step is `train_step(x, y)`: forward, cross-entropy,
gradients, the functional AdamW update, on a fixed batch already on the
device. Sides: "captured" (the default: one captured step graph, replayed),
"traced" (make_fx graph through `compile_fn=graph_runner_compile`, the
previous default), "cpu" (the same model with torch.optim.AdamW, eager). All
tpu sides in Strict Eager. Steps/s is the median over --repeats runs of
--steps steps (each ending in a synchronize), the sides taking turns;
captured / traced and captured / cpu are medians of the per-turn ratios.
Writes results/single_trace_trainer.json and .md.
"""
import common  # noqa: F401  (first: sets the cache environment before torch)

import torch
import torch.nn.functional as F
import torch_tpu
from torch_tpu.single_trace_trainer import graph_runner_compile

from common import Task, median, now, table, write_results

MODELS = ("mlp", "transformer")
SIDES = ("captured", "traced", "cpu")


def _cross_entropy(model, args, kwargs):
    x, y = args
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


class TrainerTask:
    """A Task's model and batch trained by a SingleTraceTrainer."""

    def __init__(self, kind, small, compile_fn):
        task = Task(kind, torch.device("tpu"), small=small)
        self.x, self.y = task.x, task.y
        opt = torch.tpu.optimizers.AdamW(lr=1e-3, weight_decay=1e-2, use_bfloat16_moments=False)
        trainer = torch.tpu.optimizers.SingleTraceTrainer(task.model, opt,
                                                          compute_loss_fn=_cross_entropy)
        self._step = trainer.make_compiled_train_step((self.x, self.y), compile_fn=compile_fn)
        self.loss = None

    def step(self):
        self.loss = self._step((self.x, self.y))


def make(kind, side, small):
    if side == "cpu":
        common.set_mode("cpu")
        return Task(kind, torch.device("cpu"), small=small)
    common.set_mode("strict")
    return TrainerTask(kind, small, None if side == "captured" else graph_runner_compile)


def run(task, side, steps):
    device = "cpu" if side == "cpu" else "tpu"
    common.set_mode("cpu" if side == "cpu" else "strict")
    start = now()
    for _ in range(steps):
        task.step()
    common.sync(device)
    return steps / (now() - start)


def measure(kind, args):
    tasks = {side: make(kind, side, args.smoke) for side in SIDES}
    for side in SIDES:
        run(tasks[side], side, args.warmup)
    rates = {side: [] for side in SIDES}
    for _ in range(args.repeats):
        for side in SIDES:
            rates[side].append(run(tasks[side], side, args.steps))
    rows = [{"model": kind, "side": side, "steps_per_s": median(rates[side]),
             "all_steps_per_s": rates[side], "final_loss": tasks[side].loss.item()}
            for side in SIDES]
    for other in ("traced", "cpu"):
        paired = [c / o for c, o in zip(rates["captured"], rates[other])]
        rows.append({"model": kind, "side": f"captured / {other}",
                     "ratio_median": median(paired), "ratios": paired})
    common.set_mode("strict")
    return rows


def main():
    p = common.parser(__doc__)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    args = p.parse_args()
    if args.smoke:
        args.steps, args.repeats, args.warmup, args.models = 1, 1, 1, ["mlp"]
    rows = [row for kind in args.models for row in measure(kind, args)]
    body = []
    for r in rows:
        if "steps_per_s" in r:
            body.append([r["model"], r["side"], f"{r['steps_per_s']:.1f}", f"{r['final_loss']:.4f}"])
        else:
            body.append([r["model"], f"**{r['side']}**", f"{r['ratio_median']:.2f}x", ""])
    md = (f"SingleTraceTrainer step, median of {args.repeats} x {args.steps} steps after "
          f"{args.warmup} warm-up steps, the sides taking turns (Strict Eager on tpu)\n\n"
          + table(["model", "side", "steps/s", "loss"], body))
    write_results(args.out, "single_trace_trainer",
                  {"steps": args.steps, "repeats": args.repeats, "warmup": args.warmup,
                   "smoke": args.smoke, "rows": rows}, md)


if __name__ == "__main__":
    main()
