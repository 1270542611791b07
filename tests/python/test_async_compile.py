"""torch.compile(backend="tpu", options={"async_compile": True}): a graph's
program compiles on the background worker while calls run its ops eagerly;
once ready, each call replays the one program. The background worker is held
(`_hold_background_compiles`) so that "still compiling" is deterministic."""
import warnings

import pytest
import torch
import torch.nn as nn

import torch_tpu
from torch_tpu import _C, async_compile

from conftest import assert_same

ASYNC = {"async_compile": True}


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    torch_tpu.clear_cache()  # every whole-graph program is a miss
    yield
    _C._hold_background_compiles(False)
    _C._drain_background_compiles()
    torch._dynamo.reset()


def _counts():
    m, c = torch_tpu.metrics(), torch_tpu.compiler.compile_metrics()
    return {"executions": m.get("executions", 0), "replays": c.get("replays", 0),
            "async_eager_calls": c.get("async_eager_calls", 0),
            "async_compiles": c.get("async_compiles", 0)}


def _delta(before):
    return {k: v - before[k] for k, v in _counts().items()}


def _mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))


def test_forward_is_exact_while_compiling_then_replays_one_program(highest_precision):
    cpu = _mlp()
    tpu = _mlp().to("tpu")
    compiled = torch.compile(tpu, backend="tpu", options=ASYNC)
    xs = [torch.randn(8, 16, generator=torch.Generator().manual_seed(i)) for i in range(5)]
    _C._hold_background_compiles(True)
    with torch.no_grad():
        before = _counts()
        assert_same(compiled(xs[0].to("tpu")), cpu(xs[0]))
        first = _delta(before)
        # The call returned with the graph's compile queued, not done.
        assert first["async_compiles"] == 1 and first["async_eager_calls"] == 1, first
        assert first["replays"] == 0, first
        before = _counts()
        assert_same(compiled(xs[1].to("tpu")), cpu(xs[1]))
        assert _delta(before)["async_eager_calls"] == 1  # still compiling: eager again
        _C._hold_background_compiles(False)
        _C._drain_background_compiles()
        for x in xs[2:]:
            before = _counts()
            assert_same(compiled(x.to("tpu")), cpu(x))
            d = _delta(before)
            assert d["replays"] == 1 and d["executions"] == 1 and d["async_eager_calls"] == 0, d


def test_training_step_is_exact_on_every_call(highest_precision):
    def make(device):
        model = _mlp(1).to(device)
        return model, torch.optim.SGD(model.parameters(), lr=0.1)

    def step(model, x, y):
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    cpu_model, cpu_opt = make("cpu")
    tpu_model, tpu_opt = make("tpu")
    compiled = torch.compile(step, backend="tpu", options=ASYNC)
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)) for _ in range(6)]
    _C._hold_background_compiles(True)
    per_call = []
    for i, (x, y) in enumerate(batches):
        if i == 2:  # two steps ran eagerly while the forward and backward compiled
            _C._hold_background_compiles(False)
            _C._drain_background_compiles()
        before = _counts()
        cpu_opt.zero_grad()
        cpu_loss = step(cpu_model, x, y)
        cpu_opt.step()
        tpu_opt.zero_grad()
        tpu_loss = compiled(tpu_model, x.to("tpu"), y.to("tpu"))
        tpu_opt.step()
        assert_same(tpu_loss, cpu_loss)
        for p, q in zip(tpu_model.parameters(), cpu_model.parameters()):
            assert_same(p, q)
        per_call.append(_delta(before))
    assert per_call[0]["async_compiles"] == 2, per_call  # forward and backward
    for d in per_call[:2]:
        assert d["async_eager_calls"] == 2 and d["replays"] == 0, per_call
    for d in per_call[2:]:
        assert d["async_eager_calls"] == 0 and d["replays"] == 2, per_call


def test_failed_background_compile_falls_back_with_one_warning():
    def f(x):
        return (x * 2).sin().sum(0)

    compiled = torch.compile(f, backend="tpu", options=ASYNC)
    x = torch.randn(5, 3)
    _C._break_next_background_compile()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            _C._drain_background_compiles()
            assert_same(compiled(x.to("tpu")), f(x))
    ours = [str(w.message) for w in caught if "background compile failed" in str(w.message)]
    assert len(ours) == 1, ours
    assert "graph inference_1" in ours[0] or "graph forward_1" in ours[0], ours
    assert torch_tpu.compiler.compile_metrics().get("async_compile_failures", 0) >= 1
    # The process goes on: a new graph compiles in the background and replays.
    g = torch.compile(lambda x: x.cos() + 1, backend="tpu", options=ASYNC)
    g(x.to("tpu"))
    _C._drain_background_compiles()
    before = _counts()
    assert_same(g(x.to("tpu")), x.cos() + 1)
    assert _delta(before)["replays"] == 1


def test_bucketed_graphs_compile_before_returning():
    """A graph over varying sizes runs only as its bucket's program (its ops
    take padded inputs with bounded dimensions), so async_compile leaves it
    synchronous, and every length is exact."""
    def f(x):
        return torch.softmax(x * 2, dim=0).sum() + x.mean()

    compiled = torch.compile(f, backend="tpu", dynamic=True, options=ASYNC)
    _C._hold_background_compiles(True)
    before = _counts()
    for n in (5, 7, 9, 20):
        x = torch.randn(n)
        assert_same(compiled(x.to("tpu")), f(x), atol=1e-5, rtol=1e-5)
    d = _delta(before)
    assert d["async_compiles"] == 0 and d["async_eager_calls"] == 0, d


def test_off_by_default_compiles_before_the_first_call_returns():
    compiled = torch.compile(lambda x: x.exp() - 1, backend="tpu")
    before = _counts()
    x = torch.randn(4)
    assert_same(compiled(x.to("tpu")), x.exp() - 1)
    d = _delta(before)
    assert d["async_compiles"] == 0 and d["async_eager_calls"] == 0, d


@pytest.mark.parametrize("value", ["yes", 1, "true"])
def test_bad_option_values_raise(value):
    with pytest.raises(ValueError, match="async_compile"):
        async_compile.check_option(value)
    compiled = torch.compile(lambda x: x + 1, backend="tpu", options={"async_compile": value})
    with pytest.raises(Exception, match="`async_compile` must be True or False"):
        compiled(torch.ones(3, device="tpu"))


def test_environment_switch(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_ASYNC_COMPILE", "maybe")
    compiled = torch.compile(lambda x: x + 1, backend="tpu")
    with pytest.raises(Exception, match="TORCH_TPU_ASYNC_COMPILE must be 0 or 1"):
        compiled(torch.ones(3, device="tpu"))
    torch._dynamo.reset()
    monkeypatch.setenv("TORCH_TPU_ASYNC_COMPILE", "1")
    _C._hold_background_compiles(True)
    compiled = torch.compile(lambda x: x * 3, backend="tpu")
    before = _counts()
    x = torch.randn(4)
    assert_same(compiled(x.to("tpu")), x * 3)
    assert _delta(before)["async_eager_calls"] == 1


# --- ahead-of-time warm-up: torch_tpu._internal.compile.async_compile ------

def test_warm_up_compiles_every_shape_without_running_it(highest_precision):
    from torch_tpu._internal.compile import async_compile as warm_up

    cpu = _mlp()
    tpu = _mlp().to("tpu")
    xs = [torch.randn(n, 16, generator=torch.Generator().manual_seed(n)) for n in (3, 5, 9)]
    c0 = dict(torch_tpu.compiler.compile_metrics())
    compiled = warm_up(tpu, [(x.to("tpu"),) for x in xs])
    c = torch_tpu.compiler.compile_metrics()
    # Each shape traced and queued once; no call ran a graph (eagerly or not).
    assert c.get("captures", 0) - c0.get("captures", 0) == 3
    assert c.get("async_compiles", 0) - c0.get("async_compiles", 0) == 3
    assert c.get("async_eager_calls", 0) == c0.get("async_eager_calls", 0)
    assert c.get("eager_calls", 0) == c0.get("eager_calls", 0)
    before = _counts()
    for x in xs:
        out = compiled(x.to("tpu"))
        assert not out.requires_grad  # no_grad by default (inference)
        assert_same(out, cpu(x).detach())
    after = _delta(before)
    assert after["replays"] == 3 and after["async_eager_calls"] == 0, after
    assert torch_tpu.compiler.compile_metrics().get("captures", 0) == c.get("captures", 0)


def test_warm_up_input_forms_and_artifacts():
    from torch_tpu._internal.compile import (AsyncCompilationSubmitted, async_compile,
                                             resolve_compilations)

    def f(x, scale=1.0):
        return torch.tanh(x) * scale

    x2, x3, x4, x5 = (torch.randn(n, 4).to("tpu") for n in (2, 3, 4, 5))
    # A tuple, a dict, an (args, kwargs) pair, a single tensor.
    before = torch_tpu.compiler.compile_metrics().get("async_compiles", 0)
    compiled = async_compile(f, [(x2,), {"x": x3}, ((x4,), {"scale": 2.0}), x5])
    assert torch_tpu.compiler.compile_metrics().get("async_compiles", 0) - before == 4
    for x, kw in ((x2, {}), (x3, {}), (x4, {"scale": 2.0}), (x5, {})):
        assert_same(compiled(x, **kw), f(x.cpu(), **kw))
    # resolve_compilations waits for submitted graphs and counts them.
    _C._hold_background_compiles(True)
    compiled_g = torch.compile(lambda x: x.exp() + 1, backend="tpu", fullgraph=True,
                               options=ASYNC)
    from torch_tpu._internal import compile as warm
    warm._submit_only.on = True
    try:
        with pytest.raises(AsyncCompilationSubmitted) as submitted:
            compiled_g(x2)
    finally:
        warm._submit_only.on = False
    assert submitted.value.artifact.status == "pending"
    _C._hold_background_compiles(False)
    assert resolve_compilations([submitted.value]) == 1
    assert submitted.value.artifact.status == "ready"
    assert_same(compiled_g(x2), x2.cpu().exp() + 1)


def test_warm_up_with_gradients_trains_like_cpu(highest_precision):
    from torch_tpu._internal.compile import async_compile as warm_up

    cpu = _mlp()
    tpu = _mlp().to("tpu")
    x = torch.randn(6, 16, generator=torch.Generator().manual_seed(3))
    compiled = warm_up(tpu, [(x.to("tpu"),)], no_grad=False)
    compiled(x.to("tpu")).square().sum().backward()
    cpu(x).square().sum().backward()
    for p, q in zip(tpu.parameters(), cpu.parameters()):
        assert_same(p.grad, q.grad)


def test_warm_up_bad_arguments_are_clear():
    from torch_tpu._internal.compile import async_compile, resolve_compilations

    with pytest.raises(TypeError, match="callable"):
        async_compile(3, [])
    with pytest.raises(TypeError, match="warmup_inputs must be a sequence"):
        async_compile(torch.tanh, torch.ones(2, device="tpu"))
    with pytest.raises(TypeError, match="resolve_compilations takes"):
        resolve_compilations(["not a graph"])
