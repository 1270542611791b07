"""torch.compile(backend="tpu"): whole graphs as one program, against CPU eager."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu
from conftest import assert_same


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))


@pytest.fixture(autouse=True)
def fresh_dynamo(highest_precision):
    torch._dynamo.reset()
    yield


def test_inference_matches_cpu_and_replays():
    model = mlp()
    compiled = torch.compile(copy.deepcopy(model).to("tpu"), backend="tpu")
    before = torch_tpu.compiler.compile_metrics()
    for _ in range(3):
        x = torch.randn(5, 8)
        with torch.no_grad():
            assert_same(compiled(x.to("tpu")), model(x), atol=1e-5, rtol=1e-5)
    after = torch_tpu.compiler.compile_metrics()
    assert after.get("captures", 0) - before.get("captures", 0) == 1
    assert after.get("replays", 0) - before.get("replays", 0) == 2


def train_steps(model, opt, xs, ys, step_fn):
    losses = []
    for x, y in zip(xs, ys):
        losses.append(step_fn(model, opt, x, y))
    return losses


def step(model, opt, x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_full_training_step_compiled(optimizer):
    cpu_model = mlp()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")

    def make(m, capturable):
        if optimizer == "sgd":
            return torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        return torch.optim.AdamW(m.parameters(), lr=1e-2, capturable=capturable)

    cpu_opt, tpu_opt = make(cpu_model, False), make(tpu_model, True)
    xs = [torch.randn(6, 8) for _ in range(3)]
    ys = [torch.randint(0, 4, (6,)) for _ in range(3)]
    expected = train_steps(cpu_model, cpu_opt, xs, ys, step)
    compiled = torch.compile(step, backend="tpu")
    actual = train_steps(tpu_model, tpu_opt, [x.to("tpu") for x in xs],
                         [y.to("tpu") for y in ys], compiled)
    for a, e in zip(actual, expected):
        assert_same(a, e, atol=1e-4, rtol=1e-4)
    for p_tpu, p_cpu in zip(tpu_model.parameters(), cpu_model.parameters()):
        assert_same(p_tpu.detach(), p_cpu.detach(), atol=1e-4, rtol=1e-4)


def test_torch_tpu_adds_no_graph_break_to_a_compiled_training_step():
    """The hooks torch_tpu installs on optimizer.step() (Fused Eager's loop
    cut, step capture's capturable check) stay out of a traced step: only
    PyTorch's own breaks (zero_grad, backward) remain."""
    from torch._dynamo.utils import counters

    model = copy.deepcopy(mlp()).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)
    counters.clear()
    compiled = torch.compile(step, backend="tpu")
    for _ in range(2):
        compiled(model, opt, torch.randn(6, 8).to("tpu"), torch.randint(0, 4, (6,)).to("tpu"))
    reasons = list(counters["graph_break"])
    assert reasons, "expected PyTorch's own breaks (backward, zero_grad)"
    assert not [r for r in reasons if "torch_tpu" in r], reasons


def test_graph_break_runs_eager_piece_on_tpu():
    def fn(x):
        y = x.sin() * 2
        torch._dynamo.graph_break()
        return (y + 1).cos()

    x = torch.randn(4, 4)
    assert_same(torch.compile(fn, backend="tpu")(x.to("tpu")), fn(x), atol=1e-6, rtol=1e-6)


def test_dynamic_shapes_compile_once_per_bucket():
    # (test_dynamic_shapes.py covers the buckets and the ops in detail)
    fn = torch.compile(lambda a: (a * a).sum(dim=0), backend="tpu", dynamic=True)
    before = torch_tpu.compiler.compile_metrics().get("captures", 0)
    for n in (3, 5, 3):  # one bucket (16) for both sizes
        x = torch.randn(n, 4)
        assert_same(fn(x.to("tpu")), (x * x).sum(dim=0), atol=1e-5, rtol=1e-5)
    assert torch_tpu.compiler.compile_metrics().get("captures", 0) - before == 1


def test_inductor_mode_and_options_are_accepted_and_ignored():
    x = torch.randn(3, 3)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        out = torch.compile(lambda a: a.exp(), backend="tpu", mode="max-autotune")(x.to("tpu"))
    assert_same(out, x.exp())


def test_default_backend_is_tpu_for_tpu_inputs():
    fn = torch.compile(lambda a: (a - 1).abs())
    before = torch_tpu.compiler.compile_metrics().get("captures", 0)
    x = torch.randn(4)
    assert_same(fn(x.to("tpu")), (x - 1).abs())
    assert torch_tpu.compiler.compile_metrics().get("captures", 0) == before + 1


def test_no_grad_and_inference_mode_around_compiled_calls():
    model = copy.deepcopy(mlp()).to("tpu")
    compiled = torch.compile(model, backend="tpu")
    x = torch.randn(2, 8)
    with torch.no_grad():
        a = compiled(x.to("tpu"))
    with torch.inference_mode():
        b = compiled(x.to("tpu"))
    assert not a.requires_grad and not b.requires_grad
    assert_same(a, b.cpu())


def test_stablehlo_of_compiled_graphs_and_export(tmp_path):
    torch.compile(lambda a: a.tanh() + 1, backend="tpu")(torch.randn(3).to("tpu"))
    name, text = torch_tpu.compiler.graphs()[-1]
    assert "stablehlo.tanh" in text and "func.func public @main" in text
    model = mlp().eval()
    exported = torch.export.export(model, (torch.randn(2, 8),))
    path = tmp_path / "mlp.mlir"
    text = torch_tpu.export_stablehlo(exported, str(path))
    assert path.read_text() == text and "stablehlo.dot_general" in text


def test_unlowered_op_in_graph_raises_clear_error():
    torch_tpu.set_cpu_fallback(False)
    fn = torch.compile(lambda a: torch.ops.aten._foobar(a) if hasattr(torch.ops.aten, "_foobar")
                       else torch.special.airy_ai(a), backend="tpu")
    with pytest.raises(Exception) as info:
        fn(torch.randn(3).to("tpu"))
    assert "airy_ai" in str(info.value) or "_foobar" in str(info.value)
    assert_same(torch.ones(2).to("tpu") + 1, torch.full((2,), 2.0))  # still working


def test_default_backend_keeps_inductor_for_cpu_code():
    fn = torch.compile(lambda a: (a * 3).relu())
    before = torch_tpu.compiler.compile_metrics().get("captures", 0)
    x = torch.randn(8)
    out = fn(x)
    assert out.device.type == "cpu"
    torch.testing.assert_close(out, (x * 3).relu())
    assert torch_tpu.compiler.compile_metrics().get("captures", 0) == before
    assert torch._dynamo.utils.counters["inductor"], "Inductor did not compile the CPU graph"
