"""Random ops inside a captured step (torch.tpu.graph): the generator's
(seed, offset) is state the step's program reads and advances, so each replay
draws what the same eager step would draw from the generator's state at that
replay, and the host generator advances as the eager step advances it.

Our random streams are defined by (seed, offset), so replays are compared
bit for bit against eager tpu runs from the same seed; against CPU (another
generator) only in distribution."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu
from test_step_capture import _step


def _offset():
    return int(torch.tpu.get_rng_state().view(torch.int64)[1])


def _draws(out):
    """Every random op a step may hold, written into the static `out`."""
    x = torch.ones(64, device="tpu")
    probs = torch.linspace(0.0, 1.0, 64, device="tpu")

    def step():
        out["dropout"].copy_(F.dropout(x, p=0.5, training=True))
        out["rand"].copy_(torch.rand(64, device="tpu"))
        out["randn"].copy_(torch.randn(8, 8, device="tpu"))
        out["randint"].copy_(torch.randint(0, 10, (64,), device="tpu"))
        out["bernoulli"].copy_(torch.bernoulli(probs))
        out["normal_"].normal_(2.0, 3.0)
        out["uniform_"].uniform_(-1.0, 1.0)
    return step


def _outputs():
    return {"dropout": torch.zeros(64, device="tpu"), "rand": torch.zeros(64, device="tpu"),
            "randn": torch.zeros(8, 8, device="tpu"),
            "randint": torch.zeros(64, dtype=torch.int64, device="tpu"),
            "bernoulli": torch.zeros(64, device="tpu"), "normal_": torch.zeros(64, device="tpu"),
            "uniform_": torch.zeros(16, device="tpu")}


def _snapshot(out):
    return {k: v.cpu() for k, v in out.items()}


def test_replays_draw_the_bits_of_the_same_eager_steps():
    out = _outputs()
    step = _draws(out)
    torch.tpu.manual_seed(7)
    step()  # a warm-up step, eager, as before any capture
    eager = []
    for _ in range(3):
        step()
        eager.append(_snapshot(out))
    eager_offset = _offset()

    torch.tpu.manual_seed(7)
    step()
    before = _offset()
    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        step()
    assert _offset() == before  # capture records the step; it draws nothing
    replayed = []
    for _ in range(3):
        uploads = torch_tpu.metrics().get("transfers_to_device", 0)
        g.replay()
        # The generator's state stays on the device between replays.
        assert torch_tpu.metrics().get("transfers_to_device", 0) == uploads
        replayed.append(_snapshot(out))
    assert _offset() == eager_offset
    for e, r in zip(eager, replayed):
        for name in e:
            assert torch.equal(e[name], r[name]), name
    for name in replayed[0]:  # each replay draws new numbers
        assert not torch.equal(replayed[0][name], replayed[1][name]), name


def test_replays_and_eager_draws_interleave_as_one_stream():
    out = torch.zeros(32, device="tpu")
    torch.tpu.manual_seed(11)
    expected = [torch.rand(32, device="tpu").cpu() for _ in range(5)]

    torch.tpu.manual_seed(11)
    first = torch.rand(32, device="tpu").cpu()  # eager
    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        out.copy_(torch.rand(32, device="tpu"))
    g.replay()
    second = out.cpu()
    third = torch.rand(32, device="tpu").cpu()  # eager between replays
    g.replay()
    fourth = out.cpu()
    g.replay()
    for got, want in zip([first, second, third, fourth, out.cpu()], expected):
        assert torch.equal(got, want)
    # A new seed between replays is honoured, as eager would.
    torch.tpu.manual_seed(11)
    g.replay()
    assert torch.equal(out.cpu(), expected[0])
    torch.tpu.set_rng_state(torch.tensor([11, 64], dtype=torch.int64).view(torch.uint8))
    g.replay()
    assert torch.equal(out.cpu(), expected[2])


def test_an_explicit_generator_is_read_at_each_replay():
    gen = torch.Generator(device="tpu")
    gen.manual_seed(5)
    expected = [torch.randn(16, device="tpu", generator=gen).cpu() for _ in range(3)]
    default_before = _offset()
    gen.manual_seed(5)
    out = torch.zeros(16, device="tpu")
    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        out.copy_(torch.randn(16, device="tpu", generator=gen))
    for want in expected:
        g.replay()
        assert torch.equal(out.cpu(), want)
    assert gen.get_offset() == 3 * 16
    assert _offset() == default_before  # the default generator is not the step's


def test_draws_match_cpu_in_distribution():
    n = 1 << 14
    outs = {"rand": torch.zeros(n, device="tpu"), "randn": torch.zeros(n, device="tpu"),
            "dropout": torch.zeros(n, device="tpu"), "bernoulli": torch.zeros(n, device="tpu")}
    x = torch.ones(n, device="tpu")
    torch.tpu.manual_seed(0)
    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        outs["rand"].copy_(torch.rand(n, device="tpu"))
        outs["randn"].copy_(torch.randn(n, device="tpu"))
        outs["dropout"].copy_(F.dropout(x, p=0.3, training=True))
        outs["bernoulli"].copy_(torch.bernoulli(torch.full((n,), 0.25, device="tpu")))
    torch.manual_seed(0)
    cpu = {"rand": torch.rand(n), "randn": torch.randn(n),
           "dropout": F.dropout(torch.ones(n), p=0.3, training=True),
           "bernoulli": torch.bernoulli(torch.full((n,), 0.25))}
    for _ in range(2):
        g.replay()
        for name, c in cpu.items():
            t = outs[name].cpu()
            # Means within 6 standard errors of the difference of two samples.
            bound = 6 * (2 * c.var().item() / n) ** 0.5
            assert abs(t.mean().item() - c.mean().item()) < bound, name
            assert abs(t.std().item() - c.std().item()) < 0.05 * c.std().item(), name
            if name == "dropout":  # kept values are scaled by 1 / (1 - p)
                assert set(t.unique().tolist()) == set(c.unique().tolist())


class _DropoutMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.2),
                                 nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.2),
                                 nn.Linear(64, 4))

    def forward(self, x):
        return self.net(x)


def _batches(n):
    """A learnable task: the label is the argmax of a fixed linear map."""
    g = torch.Generator().manual_seed(1)
    w = torch.randn(16, 4, generator=g)
    xs = [torch.randn(32, 16, generator=g) for _ in range(n)]
    return [(x, (x @ w).argmax(dim=1)) for x in xs]


def _train(model, batches, captured):
    """One eager warm-up step, then the rest eagerly or as replays of one
    captured step; the losses and the model after."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2,
                            capturable=model.net[0].weight.device.type == "tpu")
    device = model.net[0].weight.device
    static_x, static_y = (t.to(device) for t in batches[0])
    losses = [_step(model, opt, static_x, static_y).item()]
    if captured:
        g = torch.tpu.TPUGraph()
        with torch.tpu.graph(g):
            static_loss = _step(model, opt, static_x, static_y)
    for x, y in batches[1:]:
        static_x.copy_(x)
        static_y.copy_(y)
        if captured:
            g.replay()
            losses.append(static_loss.item())
        else:
            losses.append(_step(model, opt, static_x, static_y).item())
    return losses, model


def test_dropout_mlp_replays_equal_eager_tpu_steps(highest_precision):
    batches = _batches(16)
    torch.manual_seed(0)
    cpu_model = _DropoutMLP()
    torch.tpu.manual_seed(3)
    eager_losses, eager_model = _train(copy.deepcopy(cpu_model).to("tpu"), batches, False)
    eager_offset = _offset()
    torch.tpu.manual_seed(3)
    replay_losses, replay_model = _train(copy.deepcopy(cpu_model).to("tpu"), batches, True)
    assert _offset() == eager_offset
    # Same dropout masks: the same steps, up to the rounding of one fused program.
    torch.testing.assert_close(replay_losses, eager_losses, atol=1e-5, rtol=1e-5)
    for a, b in zip(replay_model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(a.cpu(), b.cpu(), atol=1e-5, rtol=1e-5)
    # CPU draws other masks: the trajectories agree in shape only.
    torch.manual_seed(3)
    cpu_losses, _ = _train(cpu_model, batches, False)
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    for part in (slice(0, 4), slice(-4, None)):  # the first and the last steps
        assert abs(mean(replay_losses[part]) - mean(cpu_losses[part])) < 0.1 * mean(cpu_losses[part])
    assert mean(replay_losses[-4:]) < 0.8 * mean(replay_losses[:4])


def test_an_abandoned_capture_draws_as_the_eager_step():
    x = torch.ones(32, device="tpu")
    torch.tpu.manual_seed(9)
    want = F.dropout(x, p=0.5, training=True).cpu()
    eager_offset = _offset()
    torch.tpu.manual_seed(9)
    g = torch.tpu.TPUGraph()
    with pytest.raises(RuntimeError, match="item"):
        with torch.tpu.graph(g):
            y = F.dropout(x, p=0.5, training=True)
            y.sum().item()
    assert torch.equal(y.cpu(), want)  # the recorded ops ran eagerly
    assert _offset() == eager_offset


def test_reseeding_inside_a_capture_is_refused():
    g = torch.tpu.TPUGraph()
    with pytest.raises(RuntimeError, match="reseeded or rewound during a step capture"):
        with torch.tpu.graph(g):
            torch.rand(4, device="tpu")
            torch.tpu.manual_seed(1)
            torch.rand(4, device="tpu")
    with pytest.raises(RuntimeError, match="reseeded or rewound during it"):
        with torch.tpu.graph(g):
            torch.rand(4, device="tpu")
            torch.tpu.manual_seed(1)  # after the last draw: found at the end
    assert not torch.tpu.is_current_stream_capturing()
    assert torch.rand(4, device="tpu").shape == (4,)
