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
                     max_positions: int = 512, sliding_window: int | None = None,
                     seed: int = 0) -> str:
    """Writes the checkpoint into `path` (created) and returns it. With a
    `sliding_window` it is a Mistral checkpoint whose attention sees that many
    keys back."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    os.makedirs(path, exist_ok=True)
    kind, extra = ((transformers.LlamaConfig, transformers.LlamaForCausalLM), {})
    if sliding_window is not None:
        kind = (transformers.MistralConfig, transformers.MistralForCausalLM)
        extra = dict(sliding_window=sliding_window)
    config = kind[0](
        vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        tie_word_embeddings=False, **extra)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = kind[1](config)
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
