"""vLLM on tpu, run in a process of its own (vLLM sets process-wide state):

    python vllm_cases.py MODEL_DIR OUT_JSON [--only-batch | --unsupported]

Writes a JSON object whose entries test_vllm.py checks against CPU:
  reference        greedy tokens of transformers' generate() on CPU, float32
  batch            LLM.generate over all prompts at once (greedy)
  continuous       requests added while others decode (LLMEngine.step)
  quantized        the error of an fp8-quantized engine (not served on tpu yet)
  kv_too_small     the error of an engine whose KV cache holds no request
  too_long         the error a prompt longer than max_model_len raises
  after_error      a generate() after that error
  attention        max |paged attention - dense SDPA| on random data
  attention_window the same with a sliding window of 7 keys
  attention_soft_cap the same with scores soft-capped at 2
  compiles         programs compiled during the run, and in its last phase
  mode             the eager mode the platform's worker chose (Fused Eager)
  strict           LLM.generate again after switching to Strict Eager
"""
import json
import sys

import numpy as np
import torch

MAX_TOKENS = 12
PROMPTS = [  # token ids of different lengths (3 .. 33)
    [5, 9, 33],
    [100, 4, 250, 17, 8, 8, 61],
    [3 + (7 * i) % 250 for i in range(12)],
    [3 + (11 * i) % 250 for i in range(20)],
    [3 + (13 * i + 5) % 250 for i in range(33)],
]


def reference(model_dir):
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    out = []
    for p in PROMPTS:
        ids = model.generate(torch.tensor([p]), max_new_tokens=MAX_TOKENS, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
        out.append(ids[0, len(p):].tolist())
    return out


def attention_error(window=None, soft_cap=None):
    """The paged attention against dense causal SDPA on CPU: 3 requests with
    contexts of 5, 21 and 40 tokens, of which the last 5, 1 and 3 are new,
    their blocks scattered through the cache; `window`: a sliding window;
    `soft_cap`: scores soft-capped (cap * tanh(score / cap))."""
    from torch_tpu.vllm.attention import TpuAttentionImpl, build_metadata

    g = torch.Generator().manual_seed(0)
    h, hkv, d, bs, blocks = 4, 2, 16, 8, 32
    seq_lens, query_lens = np.array([5, 21, 40]), np.array([5, 1, 3])
    perm = torch.randperm(blocks - 1, generator=g) + 1  # block 0 is vLLM's null block
    table = torch.zeros(3, 8, dtype=torch.int32)
    k_all = [torch.randn(n, hkv, d, generator=g) for n in seq_lens]
    v_all = [torch.randn(n, hkv, d, generator=g) for n in seq_lens]
    q_all = [torch.randn(n, h, d, generator=g) for n in query_lens]
    cache = torch.zeros(blocks, bs, hkv, 2 * d)
    used = 0
    for r, n in enumerate(seq_lens):
        need = -(-n // bs)
        table[r, :need] = perm[used:used + need]
        used += need
        for p in range(n - query_lens[r]):  # the context written by earlier steps
            cache[table[r, p // bs], p % bs] = torch.cat([k_all[r][p], v_all[r][p]], -1)
    starts = np.concatenate([[0], np.cumsum(query_lens)])
    meta = build_metadata(starts, seq_lens, table, bs, max_tokens=64, device="tpu")
    n_pad = meta.slot_mapping.shape[0]
    q = torch.zeros(n_pad, h, d)
    k = torch.zeros(n_pad, hkv, d)
    v = torch.zeros(n_pad, hkv, d)
    q[:starts[-1]] = torch.cat(q_all)
    k[:starts[-1]] = torch.cat([k_all[r][-n:] for r, n in enumerate(query_lens)])
    v[:starts[-1]] = torch.cat([v_all[r][-n:] for r, n in enumerate(query_lens)])
    impl = TpuAttentionImpl(h, d, d ** -0.5, hkv, None, window, "auto", logits_soft_cap=soft_cap)
    out = torch.zeros(n_pad, h * d).to("tpu")
    kv = cache.to("tpu")
    impl.forward(None, q.to("tpu"), k.to("tpu"), v.to("tpu"), kv, meta, out)
    out = out.cpu()

    worst = 0.0
    for r, n in enumerate(query_lens):
        kk = k_all[r].repeat_interleave(h // hkv, 1).transpose(0, 1)  # [h, ctx, d]
        vv = v_all[r].repeat_interleave(h // hkv, 1).transpose(0, 1)
        qq = q_all[r].transpose(0, 1)  # [h, n, d]
        pos = torch.arange(seq_lens[r] - n, seq_lens[r])
        key = torch.arange(seq_lens[r])[None, :]
        mask = key <= pos[:, None]
        if window is not None:
            mask &= key > pos[:, None] - window
        scores = qq @ kk.transpose(-1, -2) * d ** -0.5
        if soft_cap is not None:
            scores = soft_cap * torch.tanh(scores / soft_cap)
        ref = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ vv
        ref = ref.transpose(0, 1).reshape(n, h * d)
        worst = max(worst, (out[starts[r]:starts[r + 1]] - ref).abs().max().item())
    # The new keys and values are in their slots.
    cache_after = kv.cpu()
    r, p = 1, seq_lens[1] - 1
    written = cache_after[table[r, p // bs], p % bs]
    worst_cache = (written - torch.cat([k_all[r][p], v_all[r][p]], -1)).abs().max().item()
    return worst, worst_cache


def compiles():
    import torch_tpu

    return int(torch_tpu.metrics().get("compiles", 0))


def unsupported(model_dir, out_path):
    """The error of an engine for a model whose attention the platform does
    not serve (ALiBi)."""
    from vllm import LLM

    try:
        LLM(model=model_dir, dtype="float32", max_model_len=128, kv_cache_memory_bytes=8 << 20)
        result = None
    except Exception as e:  # noqa: BLE001  (the test checks the type and text)
        result = [type(e).__name__, str(e)]
    with open(out_path, "w") as f:
        json.dump({"unsupported": result}, f)


def main(model_dir, out_path, only_batch=False):
    import torch_tpu
    from vllm import LLM, SamplingParams

    result = {"reference": reference(model_dir)}
    torch.set_float32_matmul_precision("highest")  # f32 dots, as the CPU reference
    result["attention"] = attention_error()
    result["attention_window"] = attention_error(window=7)
    result["attention_soft_cap"] = attention_error(soft_cap=2.0)

    if not only_batch:
        try:  # a quantization the platform does not serve
            LLM(model=model_dir, dtype="float32", quantization="fp8", max_model_len=128)
            result["quantized"] = None
        except Exception as e:  # noqa: BLE001  (the test checks the type and text)
            result["quantized"] = [isinstance(e, ValueError), str(e)]
        try:  # a KV cache too small for one request
            LLM(model=model_dir, dtype="float32", max_model_len=128,
                kv_cache_memory_bytes=4096, seed=0)
            result["kv_too_small"] = None
        except Exception as e:  # noqa: BLE001  (the test checks the type and text)
            result["kv_too_small"] = [type(e).__name__, str(e)]

    llm = LLM(model=model_dir, dtype="float32", max_model_len=128, max_num_seqs=8,
              max_num_batched_tokens=128, kv_cache_memory_bytes=8 << 20, seed=0)
    greedy = SamplingParams(max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True)
    prompts = [{"prompt_token_ids": p} for p in PROMPTS]
    result["batch"] = [o.outputs[0].token_ids for o in llm.generate(prompts, greedy)]
    if only_batch:
        with open(out_path, "w") as f:
            json.dump(result, f)
        return

    # Continuous batching: two requests start, three join while they decode.
    engine = llm.llm_engine
    done = {}

    def step():
        for o in engine.step():
            if o.finished:
                done[o.request_id] = list(o.outputs[0].token_ids)

    for i in (0, 3):
        engine.add_request(f"c{i}", prompts[i], greedy)
    for _ in range(3):
        step()
    for i in (1, 2, 4):
        engine.add_request(f"c{i}", prompts[i], greedy)
    while engine.has_unfinished_requests():
        step()
    result["continuous"] = [done[f"c{i}"] for i in range(len(PROMPTS))]

    try:
        llm.generate([{"prompt_token_ids": list(range(3, 203))}], greedy)
        result["too_long"] = None
    except Exception as e:  # noqa: BLE001  (the test checks the type and text)
        result["too_long"] = [type(e).__name__, str(e)]
    before = compiles()
    result["after_error"] = [o.outputs[0].token_ids for o in llm.generate(prompts, greedy)]
    result["compiles"] = {"total": compiles(), "last_phase": compiles() - before}
    result["mode"] = torch_tpu.get_eager_mode().name
    torch_tpu.set_eager_mode("DEFER_NEVER")  # the same engine in Strict Eager
    result["strict"] = [o.outputs[0].token_ids for o in llm.generate(prompts, greedy)]
    from vllm.platforms import current_platform

    result["platform"] = type(current_platform).__name__
    with open(out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    if "--unsupported" in sys.argv[3:]:
        unsupported(sys.argv[1], sys.argv[2])
    else:
        main(sys.argv[1], sys.argv[2], only_batch="--only-batch" in sys.argv[3:])
