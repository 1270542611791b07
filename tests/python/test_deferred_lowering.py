"""Fused Eager's deferred lowering: an op whose signature lowered before is
recorded without lowering it, and a flush whose trace ran before launches
that program without building it. Results must be CPU's whatever path an op
takes; new signatures still raise their errors at the op."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu

from conftest import assert_same


def _metric(name):
    return torch_tpu.metrics().get(name, 0)


def _fused():
    return torch_tpu.eager_mode("DEFER_AND_FUSE")


def test_steady_loop_replays_traces_and_matches_cpu():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    ref = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    ref.load_state_dict(model.state_dict())
    model.to("tpu")
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(32, 8, generator=g), torch.randint(0, 3, (32,), generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    xt, yt = x.to("tpu"), y.to("tpu")
    with torch.tpu.precision("highest"), _fused():
        for step in range(6):
            if step == 3:
                torch.tpu.synchronize()
                torch_tpu.reset_metrics()
            loss = F.cross_entropy(model(xt), yt)
            opt.zero_grad()
            loss.backward()
            opt.step()
        torch.tpu.synchronize()
    for _ in range(6):
        ref_loss = F.cross_entropy(ref(x), y)
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
    # The last three steps: every op deferred, every flush a known trace
    # (two per step: forward-backward, then the update).
    assert _metric("ops_deferred") >= _metric("ops_recorded") > 0
    assert _metric("trace_hits") == 6 and _metric("trace_misses") == 0
    assert _metric("deferred_lowerings") == 0
    assert_same(loss.detach(), ref_loss.detach(), atol=1e-5, rtol=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_same(p.detach(), q.detach(), atol=1e-5, rtol=1e-5)


def test_new_scalar_values_reuse_the_trace():
    x = torch.linspace(-1, 1, 10)
    xt = x.to("tpu")
    with _fused():
        for s in (0.5, 0.5, 0.25, -3.0, 7.5):
            torch_tpu.reset_metrics()
            out = (xt * s + s).relu()
            assert_same(out, (x * s + s).relu())
            if s != 0.5:
                assert _metric("trace_hits") == 1, s


def test_unseen_signature_raises_at_the_op():
    # An argument error (here CPU's: round with decimals of an integer tensor)
    # is raised by the call that made it, not at a later flush, and the ops
    # deferred before it still run.
    a = torch.randn(3, 3)
    with _fused():
        for _ in range(3):
            t = a.to("tpu") + 1
        with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
            torch.round(torch.arange(4, device="tpu"), decimals=2)
        assert_same(t * 2, (a + 1) * 2)


def test_which_results_are_alive_is_part_of_the_trace():
    x = torch.arange(6.0)
    xt = x.to("tpu")
    kept = []
    with _fused():
        for i in range(6):
            y = xt * (i + 1)
            z = y + 1
            if i % 2:
                kept.append((i, y))  # alive: one more program output
            torch_tpu.sync()
            assert_same(z, x * (i + 1) + 1)
    for i, y in kept:
        assert_same(y, x * (i + 1))


def test_views_and_in_place_updates_of_views():
    base = torch.arange(12.0).reshape(3, 4)
    with _fused():
        for _ in range(3):
            t = base.to("tpu") * 2
            col = t[:, 1:3]            # a strided read of a pending value
            r = col * 10
            t[0].add_(100)             # an in-place write through a view
            t.add_(1)
            assert_same(r, (base * 2)[:, 1:3] * 10)
            expected = base * 2
            expected[0] += 100
            assert_same(t, expected + 1)


def test_host_read_in_the_middle_of_a_trace():
    x = torch.randn(5)
    xt = x.to("tpu")
    with _fused():
        for _ in range(4):
            a = xt.exp()
            b = a * 2
            v = b.sum().item()
            c = a - v
            assert_same(c, x.exp() - (x.exp() * 2).sum().item(), atol=1e-5, rtol=1e-5)


def test_unwritten_storage_reads_as_zeros():
    with _fused():
        for _ in range(3):
            t = torch.empty(4, device="tpu")
            t.add_(1.5)
            assert_same(t, torch.full((4,), 1.5))


def test_deferral_can_be_turned_off():
    x = torch.randn(7)
    assert torch_tpu._C._defer_lowering()
    try:
        with _fused():
            torch_tpu._C._set_defer_lowering(False)
            for _ in range(3):
                y = x.to("tpu") * 3
            torch_tpu.sync()
            torch_tpu.reset_metrics()
            y = x.to("tpu") * 3
            torch_tpu.sync()
            assert _metric("ops_deferred") == 0 and _metric("ops_recorded") >= 1
            assert_same(y, x * 3)
    finally:
        torch_tpu._C._set_defer_lowering(True)


def test_copies_resized_outs_and_permuted_results_are_deferred():
    # clone/contiguous (a tpu copy_), arange (an out= argument resized from
    # empty) and an elementwise op on a transposed view (its result keeps the
    # permuted layout) all stay in the trace: no lowering after warm-up.
    x = torch.randn(4, 6)
    xt = x.to("tpu")
    with _fused():
        for step in range(5):
            if step == 3:
                torch_tpu.sync()
                torch_tpu.reset_metrics()
            a = torch.arange(4, device="tpu", dtype=torch.float32)
            t = xt.t() * 2
            c = t.contiguous()
            out = c[:, :4] + a
            torch_tpu.sync()
            assert not t.is_contiguous()
            assert_same(out, (x.t() * 2)[:, :4] + torch.arange(4.0))
            assert_same(t, x.t() * 2)
    assert _metric("deferred_lowerings") == 0
    assert _metric("trace_hits") == 2


def test_random_ops_draw_the_same_stream_deferred_or_not():
    def run():
        torch.manual_seed(7)
        x = torch.ones(64, device="tpu")
        outs = []
        with _fused():
            for _ in range(4):
                outs.append(F.dropout(x, p=0.5, training=True).cpu())
        return outs

    deferred = run()
    torch_tpu._C._set_defer_lowering(False)
    try:
        lowered = run()
    finally:
        torch_tpu._C._set_defer_lowering(True)
    for a, b in zip(deferred, lowered):
        assert torch.equal(a, b)
    assert not torch.equal(deferred[0], deferred[1])  # the offset advanced


def test_matmul_precision_is_part_of_the_signature():
    # The same mm alternates between one bf16 pass and the f32-exact mode:
    # a deferred call must not reuse the other mode's lowering.
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 32, generator=g), torch.randn(32, 8, generator=g)
    at, bt = a.to("tpu"), b.to("tpu")
    exact = a @ b
    with _fused():
        for step in range(6):
            mode = "highest" if step % 2 else "default"
            with torch.tpu.precision(mode):
                out = (at @ bt).cpu()
            err = (out - exact).abs().max().item()
            if mode == "highest":
                assert err < 1e-4, (step, err)
            else:
                assert err > 1e-4, (step, err)  # bf16 operands: visibly rounded
