"""transformers' `generate()` on tpu: greedy tokens equal CPU's (float32,
HIGHEST matmul precision) with the default cache and with
`cache_implementation="static"` (transformers then compiles the decode step
with `backend="tpu"`), in Strict and Fused Eager; how many programs a whole
generation compiles; an explicit Inductor backend on tpu tensors raises one
clear error."""
import copy
import importlib.util

import pytest
import torch

import torch_tpu

transformers = pytest.importorskip("transformers")

MODES = {"strict": torch_tpu.EagerMode.DEFER_NEVER, "fused": torch_tpu.EagerMode.DEFER_AND_FUSE}


def tiny_llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def models():
    cpu = tiny_llama()
    return cpu, copy.deepcopy(cpu).to("tpu")


@pytest.fixture(autouse=True)
def fresh(highest_precision):
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


PROMPT = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(2))


def generate(model, new_tokens, cache=None, **kwargs):
    kwargs = dict(max_new_tokens=new_tokens, do_sample=False, pad_token_id=0, **kwargs)
    if cache:
        kwargs["cache_implementation"] = cache
    device = next(model.parameters()).device
    with torch.no_grad():
        out = model.generate(PROMPT.to(device), **kwargs)
    return out[0, PROMPT.shape[1]:].cpu().tolist()


def _delta(before, after, name):
    return after.get(name, 0) - before.get(name, 0)


@pytest.mark.parametrize("cache", [None, "static"], ids=["default_cache", "static_cache"])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_greedy_tokens_equal_cpu(models, mode, cache):
    cpu, tpu = models
    expected = generate(cpu, 8, cache)
    before = torch_tpu.compiler.compile_metrics()
    with torch_tpu.set_eager_mode(MODES[mode]):
        first = generate(tpu, 8, cache)
        again = generate(tpu, 8, cache)
    after = torch_tpu.compiler.compile_metrics()
    assert first == expected and again == expected
    if cache == "static":
        # transformers compiled the decode step (tpu is one of its compile
        # devices, with backend "tpu"): captured once, replayed at every
        # later step of both calls.
        assert _delta(before, after, "captures") == 1
        assert _delta(before, after, "replays") == 2 * 7 - 1
        assert _delta(before, after, "eager_calls") == 0
    else:
        assert _delta(before, after, "captures") == 0


@pytest.mark.parametrize("cache", [None, "static"], ids=["default_cache", "static_cache"])
def test_left_padded_batch_with_beam_search_equals_cpu(models, cache):
    # Two prompts, the second left-padded (its mask's zeros reach the 4-D
    # masks), greedy and with two beams (the cache reordered by beam).
    cpu, tpu = models
    ids = torch.randint(1, 128, (2, 8), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(2, 8, dtype=torch.long)
    ids[1, :3] = 0
    mask[1, :3] = 0
    with torch_tpu.set_eager_mode(MODES["fused"]):
        for beams in (1, 2):
            kwargs = dict(max_new_tokens=4, do_sample=False, pad_token_id=0, num_beams=beams)
            if cache:
                kwargs["cache_implementation"] = cache
            with torch.no_grad():
                expected = cpu.generate(ids, attention_mask=mask, **kwargs)
                actual = tpu.generate(ids.to("tpu"), attention_mask=mask.to("tpu"), **kwargs)
            assert torch.equal(actual.cpu(), expected)


def test_explicit_tpu_compile_config_equals_cpu(models):
    cpu, tpu = models
    config = transformers.CompileConfig(backend="tpu", dynamic=False)
    expected = generate(cpu, 6, "static")
    before = torch_tpu.compiler.compile_metrics()
    assert generate(tpu, 6, "static", compile_config=config) == expected
    after = torch_tpu.compiler.compile_metrics()
    assert _delta(before, after, "captures") == 1


def _compiles_of_first_generate(tpu, mode, new_tokens, cache):
    """Programs compiled by a first generate() (the caches emptied first)."""
    torch_tpu.clear_cache()
    with torch_tpu.set_eager_mode(MODES[mode]):
        before = torch_tpu.metrics()
        tokens = generate(tpu, new_tokens, cache)
        after = torch_tpu.metrics()
    return tokens, _delta(before, after, "compiles")


# Programs a first 32-token static-cache generate() compiles: 4 before the
# prefill, the prefill, the captured decode graph and the first step's
# bookkeeping, then per token two small Fused programs or four one-op Strict
# programs (below).
STATIC_32_TOKEN_COMPILES = {"fused": 7 + 2 * 31, "strict": 78 + 4 * 31}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_static_cache_generate_of_32_tokens_compiles_the_decode_step_once(models, mode):
    # The decode step is one captured graph for the whole generation. What
    # still compiles per token is generate()'s own bookkeeping, whose tensors
    # grow by one each step (input_ids and the 2-D attention mask, cat'ed in
    # transformers' loop): in Fused Eager one program up to the stop check's
    # host read and one that builds the 4-D mask from the grown 2-D mask; in
    # Strict the ops that read a grown tensor.
    cpu, tpu = models
    before = torch_tpu.compiler.compile_metrics()
    tokens, compiles = _compiles_of_first_generate(tpu, mode, 32, "static")
    after = torch_tpu.compiler.compile_metrics()
    assert tokens == generate(cpu, 32, "static")
    assert _delta(before, after, "captures") == 1
    assert _delta(before, after, "replays") == 30
    assert compiles == STATIC_32_TOKEN_COMPILES[mode]


def test_default_cache_fused_generate_compiles_one_decode_program_per_token(models):
    # With transformers' default DynamicCache, every decode step concatenates
    # the key/value cache, so each step's program has new shapes.
    cpu, tpu = models
    tokens, compiles = _compiles_of_first_generate(tpu, "fused", 8, None)
    assert tokens == generate(cpu, 8, None)
    assert compiles == 5 + 8


@pytest.mark.skipif(importlib.util.find_spec("jax") is not None,
                    reason="with JAX, Inductor's own Pallas path for tpu is left in place")
def test_inductor_on_tpu_tensors_raises_one_clear_error(models):
    _, tpu = models
    config = transformers.CompileConfig(backend="inductor")
    with pytest.raises(Exception, match='backend="tpu"') as info:
        generate(tpu, 3, "static", compile_config=config)
    assert "JAX" in str(info.value) and "No module named" not in str(info.value)

