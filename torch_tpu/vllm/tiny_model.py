"""A small random Llama-style checkpoint on disk, with a tokenizer, for tests
and benchmarks of the vLLM platform that must not download anything.

    write_tiny_llama("/tmp/tiny")        # config.json, model.safetensors, tokenizer
    LLM(model="/tmp/tiny", dtype="float32")

The tokenizer is a word-level one over the words "w0" .. "w{n}" plus <unk>,
<s> and </s>: a prompt such as "w5 w17 w3" is three tokens.
"""
import os

SPECIALS = ("<unk>", "<s>", "</s>")


def write_tiny_llama(path: str, *, layers: int = 2, hidden: int = 64, heads: int = 4,
                     kv_heads: int = 2, intermediate: int = 128, vocab: int = 256,
                     max_positions: int = 512, arch: str = "llama", seed: int = 0) -> str:
    """Writes the checkpoint into `path` (created) and returns it. `arch`:
    "llama"; "mistral" (attention sees 8 keys back: a sliding window); or
    "gemma2" (soft-capped attention and logits, every other layer windowed);
    "bloom" (ALiBi attention, which the tpu platform does not serve yet)."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    os.makedirs(path, exist_ok=True)
    kinds = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                  dict(tie_word_embeddings=False)),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM,
                    dict(sliding_window=8, tie_word_embeddings=False)),
        "gemma2": (transformers.Gemma2Config, transformers.Gemma2ForCausalLM,
                   dict(sliding_window=8, attn_logit_softcapping=5.0, final_logit_softcapping=3.0,
                        head_dim=hidden // heads, tie_word_embeddings=True)),
    }
    if arch == "bloom":  # BLOOM names its sizes differently
        kinds["bloom"] = (transformers.BloomConfig, transformers.BloomForCausalLM,
                          dict(n_layer=layers, n_head=heads))
    if arch not in kinds:
        raise ValueError(f"arch must be one of {sorted(kinds)}, got {arch!r}")
    config_cls, model_cls, extra = kinds[arch]
    config = config_cls(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        **extra)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = model_cls(config)
    model.save_pretrained(path, safe_serialization=True)

    words = list(SPECIALS) + [f"w{i}" for i in range(vocab - len(SPECIALS))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
        pad_token="<unk>", model_max_length=max_positions)
    fast.save_pretrained(path)
    return path


def words(token_ids) -> str:
    """The prompt text whose tokens are `token_ids` (ids >= 3)."""
    return " ".join(f"w{i - len(SPECIALS)}" for i in token_ids)
