"""Donation on replay (torch.tpu.graph): a replay hands the buffers of the
storages the step rewrites (parameters, optimizer state, gradients) to its
program when nothing else holds them, so the results take their memory."""
import copy

import pytest
import torch

import torch_tpu
from test_step_capture import _mlp, _step


@pytest.fixture
def donation():
    previous = torch_tpu._C._step_graph_donation()
    yield torch_tpu._C._set_step_graph_donation
    torch_tpu._C._set_step_graph_donation(previous)


def _captured(model):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 16, generator=g).to("tpu"), torch.randint(0, 4, (32,), generator=g).to("tpu")
    _step(model, opt, x, y)
    graph = torch.tpu.TPUGraph()
    with torch.tpu.graph(graph):
        loss = _step(model, opt, x, y)
    return graph, opt, loss


def _replays(graph, n):
    torch.tpu.synchronize()
    before = torch_tpu.metrics()
    for _ in range(n):
        graph.replay()
    torch.tpu.synchronize()
    after = torch_tpu.metrics()
    return {k: after.get(k, 0) - before.get(k, 0)
            for k in ("step_replays", "step_replays_donating", "step_replay_bytes")}


def test_donating_replays_allocate_less_and_compute_the_same(donation, highest_precision):
    torch.manual_seed(0)
    base = _mlp()
    runs = {}
    for on in (True, False):
        donation(on)
        model = copy.deepcopy(base).to("tpu")
        graph, opt, loss = _captured(model)
        counts = _replays(graph, 10)
        runs[on] = (counts, [p.detach().cpu() for p in model.parameters()], loss.cpu())
    on, off = runs[True][0], runs[False][0]
    assert on["step_replays"] == off["step_replays"] == 10
    assert on["step_replays_donating"] == 10 and off["step_replays_donating"] == 0
    # Device memory one replay allocates beyond its arguments (from the
    # compiled programs' statistics): XLA:CPU aliases every rewritten buffer
    # but copies some of them first (temporaries), so the saving is smaller
    # than the state's bytes.
    assert 0 < on["step_replay_bytes"] < off["step_replay_bytes"]
    for a, b in zip(runs[True][1], runs[False][1]):
        assert torch.equal(a, b)
    assert torch.equal(runs[True][2], runs[False][2])


def test_a_buffer_a_pending_op_still_reads_is_not_donated(donation):
    donation(True)
    w = torch.arange(4.0, device="tpu")
    graph = torch.tpu.TPUGraph()
    with torch.tpu.graph(graph):
        w.mul_(2).add_(1)
    with torch.tpu.set_eager_mode("DEFER_AND_FUSE"):
        graph.replay()  # nothing else holds w's buffer: donated
        pending = w * 10  # recorded, not run: it reads w's current buffer
        before = torch_tpu.metrics().get("step_replays_donating", 0)
        graph.replay()
        assert torch_tpu.metrics().get("step_replays_donating", 0) == before
        expected = torch.arange(4.0) * 2 + 1
        torch.testing.assert_close(pending.cpu(), expected * 10)
        torch.testing.assert_close(w.cpu(), expected * 2 + 1)
