"""Varying sequence lengths: a small GPT over a fixed random list of lengths
in 1..512, forward (no_grad, loss) and training step (forward, cross-entropy,
backward, SGD), side by side in one run.

For each configuration: programs compiled and total wall time over the whole
list, compiles included (the first step is not excluded: that is the point).
Each configuration runs in its own subprocess (clean caches); one that runs
past --budget-s stops and reports how many steps it finished.

    python benchmarks/dynamic.py                  # 200 steps
    python benchmarks/dynamic.py --steps 40       # quick
    python benchmarks/dynamic.py --smoke          # tiny, for tests
    python benchmarks/dynamic.py --batch 4        # batch > 1: results/dynamic_batch4.*
    python benchmarks/dynamic.py --model llama --batch 2   # results/dynamic_llama.*

`--model llama`: a tiny transformers LlamaForCausalLM (random weights) in
place of the GPT, its loss from `labels` (transformers' shifted causal LM
loss), the same lengths.

Configurations: CPU eager; Inductor with dynamic=True (CPU); tpu Strict
Eager; tpu Fused Eager; torch.compile(backend="tpu") with dynamic=False
(static: one program per length, until Dynamo's recompile limit sends the
rest to eager); torch.compile(backend="tpu") with the length marked
(torch.tpu.mark_dynamic: one program per bucket).
"""
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CONFIGS = ["cpu_eager", "cpu_inductor_dynamic", "tpu_strict", "tpu_fused", "tpu_compiled_static",
           "tpu_compiled_buckets"]
MAX_LEN = 512


def lengths(steps, seed=0, upper=MAX_LEN):
    rng = random.Random(seed)
    return [rng.randint(1, upper) for _ in range(steps)]


def run_config(name, kind, args):
    import torch
    import torch.nn.functional as F

    from common import TinyTransformer

    torch.set_num_threads(int(os.environ.get("TORCH_TPU_BENCH_THREADS", "1")))
    device = "cpu" if name.startswith("cpu") else "tpu"
    torch_tpu = None
    if device == "tpu":
        import torch_tpu

        torch_tpu.set_eager_mode("DEFER_AND_FUSE" if name == "tpu_fused" else "DEFER_NEVER")
    torch.manual_seed(0)
    if args.model == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        model = LlamaForCausalLM(LlamaConfig(
            vocab_size=args.vocab, hidden_size=args.dim, intermediate_size=2 * args.dim,
            num_hidden_layers=args.layers, num_attention_heads=args.heads,
            num_key_value_heads=max(1, args.heads // 2), max_position_embeddings=args.max_len + 1,
            attn_implementation="sdpa")).to(device)

        def loss_of(x, y):
            return model(x, labels=x).loss  # transformers shifts the labels itself
    else:
        model = TinyTransformer(vocab=args.vocab, dim=args.dim, heads=args.heads,
                                layers=args.layers, seq=args.max_len, sdpa=True).to(device)

        def loss_of(x, y):
            return F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)

    def train(x, y):
        loss = loss_of(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    def forward(x, y):
        with torch.no_grad():
            return loss_of(x, y)

    step = train if kind == "train" else forward
    if name == "cpu_inductor_dynamic":
        loss_of = torch.compile(loss_of, dynamic=True)
    elif name == "tpu_compiled_static":
        loss_of = torch.compile(loss_of, backend="tpu", dynamic=False)
    elif name == "tpu_compiled_buckets":
        loss_of = torch.compile(loss_of, backend="tpu")
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, args.vocab, (args.batch, n + 1), generator=g)
            for n in lengths(args.steps, upper=args.max_len)]

    def compiles():
        if torch_tpu is None:
            return torch._dynamo.utils.counters["stats"]["unique_graphs"]
        return int(torch_tpu.metrics().get("compiles", 0))

    start = time.perf_counter()
    done = 0
    loss = None
    for tokens in data:
        x, y = tokens[:, :-1].to(device), tokens[:, 1:].to(device)
        if name == "tpu_compiled_buckets":
            x = torch.tpu.mark_dynamic(x, 1, 1, args.max_len)
            y = torch.tpu.mark_dynamic(y, 1, 1, args.max_len)
        loss = step(x, y)
        done += 1
        if time.perf_counter() - start > args.budget_s:
            break
    final = float(loss.cpu())
    total = time.perf_counter() - start
    out = {"steps": done, "of": len(data), "total_s": total, "compiles": compiles(),
           "final_loss": final}
    if torch_tpu is not None:
        buckets = torch_tpu.compiler.compile_metrics().get("bucket_compiles")
        if buckets:
            out["bucket_compiles"] = buckets
    return out


def main():
    import common

    p = common.parser(__doc__)
    p.add_argument("--steps", type=int, default=200, help="sequence lengths in the list")
    p.add_argument("--budget-s", type=float, default=120.0,
                   help="per configuration and kind; a slower one stops there")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--kinds", default="forward,train")
    p.add_argument("--batch", type=int, default=1,
                   help="sequences per step (above 1, every linear layer merges the varying "
                        "length with the batch)")
    p.add_argument("--model", choices=["gpt", "llama"], default="gpt")
    p.add_argument("--config", help=argparse_suppress())
    p.add_argument("--kind", help=argparse_suppress())
    args = p.parse_args()
    size = dict(vocab=64, dim=32, layers=1, heads=2, max_len=32) if args.smoke else \
        dict(vocab=256, dim=64, layers=2, heads=4, max_len=MAX_LEN)
    if args.smoke:  # the bucketed side against CPU; the others take minutes to compile
        args.steps = min(args.steps, 4)
        if args.configs == ",".join(CONFIGS):
            args.configs = "cpu_eager,tpu_compiled_buckets"
    for k, v in size.items():
        setattr(args, k, v)
    if args.config:
        print(json.dumps(run_config(args.config, args.kind, args)))
        return
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0")
    results = {}
    for kind in args.kinds.split(","):
        for name in args.configs.split(","):
            cmd = [sys.executable, __file__, "--config", name, "--kind", kind,
                   "--steps", str(args.steps), "--budget-s", str(args.budget_s),
                   "--batch", str(args.batch), "--model", args.model]
            cmd += ["--smoke"] if args.smoke else []
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                tail = proc.stderr.strip().splitlines()
                r = {"error": tail[-1] if tail else "failed"}
            else:
                r = json.loads(proc.stdout.strip().splitlines()[-1])
            results[f"{kind}/{name}"] = r
            print(kind, name, json.dumps(r), flush=True)
    rows = []
    for kind in args.kinds.split(","):
        base = results.get(f"{kind}/cpu_eager", {})
        for name in args.configs.split(","):
            r = results[f"{kind}/{name}"]
            if "error" in r:
                rows.append([kind, name, "error: " + r["error"][:60], "", "", ""])
                continue
            full = r["steps"] == r["of"]
            vs = common.ratio(base.get("total_s", 0), r["total_s"]) if full and "total_s" in base \
                else float("nan")
            rows.append([kind, name, f"{r['steps']}/{r['of']}", f"{r['total_s']:.1f}",
                         r["compiles"], f"{vs:.2f}"])
    md = common.table(["kind", "config", "steps done", "total s (compiles included)",
                       "compiles", "CPU eager time / this"], rows)
    settings = {k: getattr(args, k) for k in ("steps", "budget_s", "vocab", "dim", "layers",
                                              "heads", "batch", "max_len", "model")}
    name = "dynamic" if args.batch == 1 else f"dynamic_batch{args.batch}"
    if args.model != "gpt":
        name = f"dynamic_{args.model}"
    common.write_results(args.out, name, {"smoke": args.smoke, "settings": settings,
                                               "rows": rows, "results": results,
                                               "lengths": lengths(args.steps, upper=args.max_len)},
                         md)


def argparse_suppress():
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
