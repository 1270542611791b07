"""vLLM serving on tpu (torch_tpu/vllm) against transformers' generate() on CPU.

A small random Llama-style model (4 layers, hidden 256, written to disk with
torch_tpu.vllm.tiny_model) answers 16 concurrent requests of 16..96 prompt
tokens, 32 greedy output tokens each:

- tpu-strict / tpu-fused: vLLM's engine (LLMEngine: its scheduler, sampler,
  paged KV cache; in-process, prefix caching off so that every wave does the
  same work) on the tpu platform in Strict and Fused Eager. All 16 requests
  are added at once and the engine is stepped until they finish: output
  tokens/s over the wave, the mean time to each request's first token, and
  the programs compiled (first wave: from cold; later waves: steady state).
  vLLM sets torch's f32 matmul precision to "highest", which on tpu is the
  6-pass bf16 split (TPU numerics, torch_tpu/precision.py); tpu-fused-f32
  runs the plugin's own f32 matmuls instead (torch.tpu.set_precision("float32")).
- cpu-transformers: vLLM's own CPU path needs its CPU kernels, which the
  PyPI wheel (a CUDA build) lacks, so the CPU baseline is transformers'
  batched greedy generate() of the same 16 prompts (left-padded, default
  cache) with all host threads; time to first token is a one-token call.

Every configuration runs in its own process; the first wave is reported
apart from the median of the warm waves. Tokens are checked equal across
configurations (float32, vLLM's default "highest" f32 matmul precision).

    python benchmarks/vllm_serve.py [--smoke] [--waves N] [--configs a,b] [--out DIR]
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

CONFIGS = ("cpu-transformers", "tpu-strict", "tpu-fused", "tpu-strict-f32", "tpu-fused-f32")
FULL = dict(requests=16, prompt=(16, 96), output=32,
            model=dict(layers=4, hidden=256, heads=4, kv_heads=2, intermediate=688, vocab=2048))
SMOKE = dict(requests=3, prompt=(4, 12), output=4,
             model=dict(layers=1, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=256))


def prompts(size):
    import random

    rng = random.Random(0)
    lo, hi = size["prompt"]
    vocab = size["model"]["vocab"]
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(lo, hi))]
            for _ in range(size["requests"])]


def run_cpu(model_dir, size, waves):
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count())
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ps = prompts(size)
    width = max(map(len, ps))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in ps])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ps])

    def generate(n):
        with torch.no_grad():
            return model.generate(ids, attention_mask=mask, max_new_tokens=n, do_sample=False,
                                  eos_token_id=None, pad_token_id=0)

    out = []
    for _ in range(waves):
        t0 = time.perf_counter()
        generate(1)
        ttft = time.perf_counter() - t0
        t0 = time.perf_counter()
        tokens = generate(size["output"])
        elapsed = time.perf_counter() - t0
        out.append(dict(tokens_per_s=len(ps) * size["output"] / elapsed, ttft_s=ttft,
                        compiles=0, tokens=tokens[:, width:].tolist()))
    return out


def run_tpu(model_dir, size, waves, mode):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine runs in this thread
    if mode.startswith("fused"):  # the platform's default; Strict is asked for by name
        os.environ.pop("TORCH_TPU_DEFER_AND_FUSE", None)
    else:
        os.environ["TORCH_TPU_DEFER_AND_FUSE"] = "0"
    import torch
    import torch_tpu
    from vllm import LLM, SamplingParams

    if mode.endswith("f32"):
        torch.tpu.set_precision("float32")

    ps = prompts(size)
    llm = LLM(model=model_dir, dtype="float32", max_model_len=256, max_num_seqs=16,
              max_num_batched_tokens=512, kv_cache_memory_bytes=64 << 20,
              enable_prefix_caching=False, seed=0)
    params = SamplingParams(max_tokens=size["output"], temperature=0, ignore_eos=True)
    engine = llm.llm_engine

    def compiles():
        return int(torch_tpu.metrics().get("compiles", 0))

    out = []
    for wave in range(waves):
        before = compiles()
        t0 = time.perf_counter()
        for i, p in enumerate(ps):
            engine.add_request(f"w{wave}r{i}", {"prompt_token_ids": p}, params)
        first, done = {}, {}
        while engine.has_unfinished_requests():
            outputs = engine.step()
            t = time.perf_counter() - t0
            for o in outputs:
                if o.outputs and o.outputs[0].token_ids and o.request_id not in first:
                    first[o.request_id] = t
                if o.finished:
                    done[o.request_id] = list(o.outputs[0].token_ids)
        elapsed = time.perf_counter() - t0
        tokens = [done[f"w{wave}r{i}"] for i in range(len(ps))]
        out.append(dict(tokens_per_s=sum(map(len, tokens)) / elapsed,
                        ttft_s=sum(first.values()) / len(first), compiles=compiles() - before,
                        tokens=tokens))
    return out


def child(config, model_dir, smoke, waves):
    size = SMOKE if smoke else FULL
    if config == "cpu-transformers":
        return run_cpu(model_dir, size, waves)
    return run_tpu(model_dir, size, waves, config.split("-", 1)[1])


def main():
    import common

    p = common.parser(__doc__)
    p.add_argument("--waves", type=int, default=4, help="waves of requests per configuration")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--child", nargs=2, metavar=("CONFIG", "MODEL_DIR"), help=argparse_hidden())
    args = p.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child[0], args.child[1], args.smoke, args.waves)))
        return

    from torch_tpu.vllm.tiny_model import write_tiny_llama

    size = SMOKE if args.smoke else FULL
    waves = 2 if args.smoke else args.waves
    configs = [c for c in args.configs.split(",") if c]
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        raise SystemExit(f"unknown configs {bad}; choose from {list(CONFIGS)}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_tiny_llama(os.path.join(tmp, "model"), max_positions=512,
                                     **size["model"])
        for config in configs:
            cmd = [sys.executable, __file__, "--child", config, model_dir, "--waves", str(waves)]
            cmd += ["--smoke"] if args.smoke else []
            env = dict(os.environ)
            env.pop("TORCH_TPU_DEFER_AND_FUSE", None)
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
            line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode or not line:
                raise SystemExit(f"{config} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
            results[config] = json.loads(line[-1][len("RESULT "):])

    reference = next(iter(results.values()))[0]["tokens"]
    base = results.get("cpu-transformers")
    base_rate = common.median([w["tokens_per_s"] for w in base[1:]]) if base else None
    rows, data = [], {}
    for config, run in results.items():
        warm = run[1:]
        rate = common.median([w["tokens_per_s"] for w in warm])
        ttft = common.median([w["ttft_s"] for w in warm])
        same = all(w["tokens"] == reference for w in run)
        data[config] = dict(first_wave=dict((k, v) for k, v in run[0].items() if k != "tokens"),
                            warm_tokens_per_s=rate, warm_ttft_s=ttft,
                            warm_compiles=[w["compiles"] for w in warm], tokens_equal=same)
        rows.append([config, f"{run[0]['tokens_per_s']:.0f}", f"{rate:.0f}",
                     f"{common.ratio(rate, base_rate):.2f}x" if base_rate else "-",
                     f"{run[0]['ttft_s'] * 1e3:.0f}", f"{ttft * 1e3:.1f}",
                     run[0]["compiles"], "/".join(str(w["compiles"]) for w in warm),
                     "yes" if same else "NO"])
    md = (f"## vLLM serving: {size['requests']} concurrent requests, {size['prompt'][0]}.."
          f"{size['prompt'][1]} prompt tokens, {size['output']} output tokens (greedy)\n\n"
          + common.table(["config", "first wave tok/s", "warm tok/s", "warm vs CPU",
                          "first wave TTFT ms", "warm TTFT ms", "compiles (first wave)",
                          "compiles (warm waves)", "tokens = first config"], rows))
    common.write_results(args.out, "vllm_serve", dict(smoke=args.smoke, size=size, configs=data),
                         md)


def argparse_hidden():
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
