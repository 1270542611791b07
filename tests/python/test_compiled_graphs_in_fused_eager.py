"""torch.compile(backend="tpu") graphs inside Fused Eager: a replayed graph is
recorded into the thread's recording as one call of its program instead of
being launched, so a compiled training step's forward, backward and
optimizer graphs and the eager ops between them run as one program. Results
equal the same steps with each graph launched on its own (Strict) and CPU."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu

from conftest import assert_same

FUSED = "DEFER_AND_FUSE"


@pytest.fixture(autouse=True)
def fresh_dynamo(highest_precision):
    torch._dynamo.reset()
    globals().pop("_train_graph", None)
    yield
    torch._dynamo.reset()


def executions():
    return torch_tpu.metrics().get("executions", 0)


class Step:
    """A model, AdamW and a batch; __call__ is forward, loss, zero_grad,
    backward and the optimizer step, compiled whole on tpu."""

    def __init__(self, kind, device):
        torch.manual_seed(0)
        if kind == "mlp":
            self.model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
            g = torch.Generator().manual_seed(1)
            self.x, self.y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
        else:
            self.model = nn.Sequential(nn.Embedding(32, 16), nn.LayerNorm(16), nn.Linear(16, 32))
            g = torch.Generator().manual_seed(1)
            self.x = torch.randint(0, 32, (2, 6), generator=g)
            self.y = torch.randint(0, 32, (2, 6), generator=g)
        self.model.to(device)
        self.x, self.y = self.x.to(device), self.y.to(device)
        tpu = device == "tpu"
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-2, capturable=tpu)
        self.step = torch.compile(self.eager_step, backend="tpu") if tpu else self.eager_step

    def eager_step(self):
        logits = self.model(self.x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), self.y.reshape(-1))
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss


@pytest.mark.parametrize("kind", ["mlp", "embedding"])
def test_compiled_training_step_is_one_program_and_trains_like_strict_and_cpu(kind):
    cpu = Step(kind, "cpu")
    cpu_losses = [cpu.step().item() for _ in range(6)]

    strict = Step(kind, "tpu")
    strict_losses = [strict.step().item() for _ in range(6)]

    with torch_tpu.eager_mode(FUSED):
        fused = Step(kind, "tpu")
        losses = [fused.step() for _ in range(6)]
        torch.tpu.synchronize()
        launched = []
        for _ in range(4):
            before = executions()
            losses.append(fused.step())
            torch.tpu.synchronize()
            launched.append(executions() - before)
    # Forward, backward and optimizer graphs, one program per step.
    assert launched == [1, 1, 1, 1]
    assert_same(torch.stack(losses[:6]), torch.tensor(strict_losses), atol=1e-6, rtol=1e-6)
    assert_same(torch.stack(losses[:6]), torch.tensor(cpu_losses), atol=1e-5, rtol=1e-5)
    strict_more = [strict.step().item() for _ in range(4)]
    assert_same(torch.stack(losses[6:]), torch.tensor(strict_more), atol=1e-6, rtol=1e-6)
    for p, q in zip(fused.model.parameters(), strict.model.parameters()):
        assert_same(p.detach(), q.detach().cpu(), atol=1e-6, rtol=1e-6)


def test_training_graph_between_eager_ops_joins_their_program():
    # The forward graph's input is pending in the recording and its output
    # feeds eager ops and the backward graph: nothing is flushed for the
    # graphs, one program runs them all.
    lin = nn.Linear(8, 3)
    f = torch.compile(lambda m, a: torch.tanh(m(a)) + 1, backend="tpu")
    a = torch.randn(4, 8)
    expected = (torch.tanh(lin(a * 2)) + 1).sum()
    expected.backward()
    tlin, ta = copy.deepcopy(lin).to("tpu"), a.to("tpu")
    with torch_tpu.eager_mode(FUSED):
        for call in range(4):
            tlin.zero_grad()
            torch.tpu.synchronize()
            before, flushes = executions(), torch_tpu.metrics().get("flush_graph_input", 0)
            out = f(tlin, ta * 2).sum()
            out.backward()
            assert_same(out, expected.detach(), atol=1e-5, rtol=1e-5)
            assert_same(tlin.weight.grad, lin.weight.grad, atol=1e-5, rtol=1e-5)
            if call >= 2:  # after the captures and the first recorded call
                assert executions() - before == 1
            assert torch_tpu.metrics().get("flush_graph_input", 0) == flushes


def test_inference_graph_launches_alone():
    # A no_grad graph (a decode step) keeps its own program: the eager ops
    # around it change shape from call to call (a growing token list), and a
    # program joining them would compile the graph again for each.
    def step(a):
        return a.sin() * 3

    f = torch.compile(step, backend="tpu")
    start = torch.randn(6)
    a, expected = start, torch.zeros(1, dtype=torch.long)
    for _ in range(5):
        a = step(a)
        expected = torch.cat([expected, a.argmax().reshape(1)])
    a, tokens = start.to("tpu"), torch.zeros(1, dtype=torch.long).to("tpu")
    with torch_tpu.eager_mode(FUSED), torch.no_grad():
        for call in range(5):
            torch.tpu.synchronize()
            before = executions()
            a = f(a)
            if call >= 2:
                assert executions() - before == 1  # launched at the call
            tokens = torch.cat([tokens, a.argmax().reshape(1)])
    assert_same(tokens, expected)


def training_call():
    """Records a training graph's call: a no_grad graph after it joins the
    same recording (as an optimizer's update does)."""
    global _train_graph, _weight
    if "_train_graph" not in globals():
        _train_graph = torch.compile(lambda w: (w * w).sum(), backend="tpu")
        _weight = torch.randn(3).to("tpu").requires_grad_()
    return _train_graph(_weight)


def test_graph_that_updates_its_input_in_place():
    def f(x, y):
        x.mul_(2)
        return x + y

    compiled = torch.compile(f, backend="tpu")
    x, y = torch.randn(5), torch.randn(5)
    tx, ty = x.to("tpu"), y.to("tpu")
    with torch_tpu.eager_mode(FUSED):
        for call in range(4):
            training_call()
            before = executions()
            out = compiled(tx, ty)
            if call >= 2:
                assert executions() == before  # recorded, not launched
            expected = f(x, y)
            tx.add_(1)  # an eager write after the graph's, in the same recording
            x.add_(1)
            assert_same(out, expected)
            assert_same(tx, x)


def test_constant_outputs_stay_each_calls_own():
    const = torch.tensor([3, 4])

    def f(x):
        return x * 2, const.to(x.device), torch.tensor(7, device=x.device)

    compiled = torch.compile(f, backend="tpu")
    with torch_tpu.eager_mode(FUSED):
        results = []
        for call in range(3):
            x = torch.randn(5)
            training_call()
            before = executions()
            out = compiled(x.to("tpu"))
            if call >= 2:
                assert executions() == before  # recorded, not launched
            assert_same(list(out), list(f(x)))
            results.append(out)
        results[0][1].add_(1)  # in place on one call's output: the others keep theirs
        assert_same(results[0][1], const + 1)
        assert_same(results[1][1], const)
        x = torch.randn(5)
        assert_same(list(compiled(x.to("tpu"))), list(f(x)))


def test_graphs_compiled_in_the_background_launch_alone():
    # A program joining an async_compile graph would compile at the call:
    # the stall the option avoids. Its replays keep their own program.
    lin = nn.Linear(4, 2).to("tpu")
    f = torch.compile(lambda m, a: m(a).relu().sum(), backend="tpu",
                      options={"async_compile": True})
    a = torch.randn(3, 4).to("tpu")
    with torch_tpu.eager_mode(FUSED):
        for call in range(4):
            torch_tpu._C._drain_background_compiles()
            torch.tpu.synchronize()
            before = executions()
            loss = f(lin, a * 1)
            if call >= 2:  # ready: replayed, and launched at the call
                assert executions() - before >= 1
            loss.backward()
    assert torch_tpu.compiler.compile_metrics().get("async_compiles", 0) >= 1


def test_strict_replays_still_launch_at_the_call():
    f = torch.compile(lambda a: a.sin() * 3, backend="tpu")
    a = torch.randn(6).to("tpu")
    f(a)
    f(a)
    before = executions()
    f(a)
    assert executions() - before == 1
