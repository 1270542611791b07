"""torch.compile(backend="tpu") on tiny Hugging Face models (random weights,
no downloads): sliding-window attention (Mistral, Gemma 2, Gemma 3) and
mixture of experts (Mixtral, Qwen3-MoE, through aten::_grouped_mm) compile
whole, one program per graph and one launch per call, equal to CPU eager."""
import copy
import warnings

import pytest
import torch

import torch_tpu
from conftest import assert_same

transformers = pytest.importorskip("transformers")

COMMON = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def mistral():
    return transformers.MistralForCausalLM(transformers.MistralConfig(sliding_window=4, **COMMON))


def gemma2():
    return transformers.Gemma2ForCausalLM(
        transformers.Gemma2Config(sliding_window=4, head_dim=8, **COMMON))


def gemma3():
    return transformers.Gemma3ForCausalLM(
        transformers.Gemma3TextConfig(sliding_window=4, head_dim=8, **COMMON))


def mixtral():
    return transformers.MixtralForCausalLM(
        transformers.MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **COMMON))


def qwen3_moe():
    return transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, head_dim=8, **COMMON))


MODELS = {"mistral": mistral, "gemma2": gemma2, "gemma3": gemma3, "mixtral": mixtral,
          "qwen3_moe": qwen3_moe}


@pytest.fixture(autouse=True)
def fresh_dynamo(highest_precision):
    torch._dynamo.reset()
    yield


def _delta(before, after, name):
    return after.get(name, 0) - before.get(name, 0)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_inference_compiles_whole_and_matches_cpu(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    compiled = torch.compile(copy.deepcopy(model).to("tpu"), backend="tpu")
    inputs = [torch.randint(0, 64, (2, 12)) for _ in range(3)]
    before = torch_tpu.compiler.compile_metrics()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*runs eagerly.*")
        with torch.no_grad():
            for i, ids in enumerate(inputs):
                launches = torch_tpu.metrics().get("executions", 0)
                out = compiled(ids.to("tpu")).logits
                if i > 0:  # a replay: one program, one launch
                    assert torch_tpu.metrics().get("executions", 0) - launches == 1
                assert_same(out, model(ids).logits, atol=1e-5, rtol=1e-5)
    after = torch_tpu.compiler.compile_metrics()
    assert _delta(before, after, "captures") == 1
    assert _delta(before, after, "replays") == 2
    assert _delta(before, after, "eager_calls") == 0


@pytest.mark.parametrize("name", ["mistral", "mixtral"])
def test_training_step_compiles_whole_and_matches_cpu(name):
    torch.manual_seed(0)
    model = MODELS[name]().train()
    tpu_model = copy.deepcopy(model).to("tpu")
    compiled = torch.compile(tpu_model, backend="tpu")
    ids = torch.randint(0, 64, (2, 12))
    before = torch_tpu.compiler.compile_metrics()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*runs eagerly.*")
        for _ in range(2):
            for p in tpu_model.parameters():
                p.grad = None
            loss = compiled(ids.to("tpu"), labels=ids.to("tpu")).loss
            loss.backward()
    after = torch_tpu.compiler.compile_metrics()
    assert _delta(before, after, "eager_calls") == 0
    assert _delta(before, after, "captures") == 2  # forward and backward graphs
    ref = model(ids, labels=ids).loss
    ref.backward()
    assert_same(loss, ref.detach(), atol=1e-5, rtol=1e-5)
    for (n, p), q in zip(model.named_parameters(), tpu_model.parameters()):
        if p.grad is not None:
            assert_same(q.grad, p.grad, atol=1e-4, rtol=1e-4)


def test_constant_output_is_a_fresh_tensor_each_call():
    # A CPU constant moved to tpu inside the graph is returned as is (the
    # sliding-window caches' step counters): not computed by the program, the
    # same value every call, and each call's tensor its own.
    const = torch.tensor([3, 4])

    def f(x):
        return x * 2, const.to(x.device), torch.tensor(7, device=x.device)

    compiled = torch.compile(f, backend="tpu")
    before = torch_tpu.compiler.compile_metrics()
    results = []
    for _ in range(3):
        x = torch.randn(5)
        out = compiled(x.to("tpu"))
        assert_same(list(out), list(f(x)))
        results.append(out)
    results[0][1].add_(1)  # in place on one call's output: the others keep theirs
    assert_same(results[1][1], const)
    assert_same(compiled(torch.randn(5).to("tpu"))[1], const)
    after = torch_tpu.compiler.compile_metrics()
    assert _delta(before, after, "eager_calls") == 0
    assert _delta(before, after, "replays") == 3


def test_graph_that_reads_the_host_mid_graph_runs_eagerly_and_says_why():
    # nonzero reads its input on the host while the graph is captured: the
    # work before it ran in its own program, so the last program alone would
    # replay stale values. The graph runs eagerly (right results) and says so.
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    try:
        def f(x):
            y = x * 2
            return torch.nonzero(y > 0).sum() + y.sum(), y + 1

        compiled = torch.compile(f, backend="tpu")
        with pytest.warns(UserWarning, match="read device values on the host"):
            compiled(torch.randn(8).to("tpu"))
        for _ in range(2):
            x = torch.randn(8)
            assert_same(list(compiled(x.to("tpu"))), list(f(x)))
    finally:
        torch._dynamo.config.capture_dynamic_output_shape_ops = False
