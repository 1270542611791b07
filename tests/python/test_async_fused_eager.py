"""Asynchronous compiles of Fused Eager recordings (torch_tpu.set_async_compile,
csrc/engine/async_eager.cc): a recording whose program is not in the cache
runs op by op, each op a Strict program, while the program compiles on the
background worker; once compiled, the same recording launches it. The worker
is held (`_hold_background_compiles`) so that "still compiling" is
deterministic. CPU PyTorch is the reference throughout."""
import warnings

import pytest
import torch
import torch.nn as nn

import torch_tpu
from torch_tpu import _C

from conftest import assert_same


@pytest.fixture(autouse=True)
def _async_fused():
    torch_tpu.clear_cache()  # every whole-step program is a miss
    torch_tpu.set_async_compile(True)
    with torch_tpu.eager_mode("DEFER_AND_FUSE"), torch.tpu.precision("highest"):
        yield
    _C._hold_background_compiles(False)
    _C._drain_background_compiles()
    torch_tpu.set_async_compile(None)  # the environment's choice again


def _counts():
    m = torch_tpu.metrics()
    return {k: m.get(k, 0) for k in ("async_eager_recordings", "async_fused_compiles",
                                      "flush_async_eager", "flush_new_op", "trace_hits", "compiles",
                                      "async_fused_compile_failures")}


def _delta(before):
    return {k: v - before[k] for k, v in _counts().items()}


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))


def _train(steps, hold_until, model, opt, cpu, cpu_opt):
    """Steps on tpu and CPU side by side; the worker is held before step
    `hold_until`. Returns the metric deltas of each step."""
    per_step = []
    for step in range(steps):
        _C._hold_background_compiles(step < hold_until)
        if step == hold_until:
            _C._drain_background_compiles()
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        before = _counts()
        loss = nn.functional.mse_loss(model(x.to("tpu")), y.to("tpu"))
        loss.backward()
        opt.step()
        opt.zero_grad()
        got = loss.item()
        per_step.append(_delta(before))
        cpu_loss = nn.functional.mse_loss(cpu(x), y)
        cpu_loss.backward()
        cpu_opt.step()
        cpu_opt.zero_grad()
        assert got == pytest.approx(cpu_loss.item(), abs=1e-5), step
    for p, q in zip(model.parameters(), cpu.parameters()):
        assert_same(p, q, atol=1e-5, rtol=1e-5)
    return per_step


def test_training_runs_op_by_op_while_compiling_then_launches_the_program():
    cpu = _mlp()
    model = _mlp().to("tpu")
    per_step = _train(8, 4, model, torch.optim.AdamW(model.parameters(), lr=1e-2),
                      cpu, torch.optim.AdamW(cpu.parameters(), lr=1e-2))
    # While the worker is held no step waits for a whole-step compile: step
    # 0's ops are new, each run as its Strict program; later steps'
    # recordings run op by op, their compiles queued once each (step 0's
    # pieces and the optimizer's first step never).
    assert per_step[0]["flush_new_op"] >= 5 and per_step[0]["async_fused_compiles"] == 0, per_step
    waiting = per_step[1:4]
    assert all(d["async_eager_recordings"] >= 1 and d["flush_async_eager"] > 1 for d in waiting), per_step
    assert 1 <= sum(d["async_fused_compiles"] for d in per_step) <= 4, per_step
    assert per_step[3]["async_fused_compiles"] == 0, per_step
    # Once compiled, every recording launches its program.
    for d in per_step[4:]:
        assert d["async_eager_recordings"] == 0 and d["flush_async_eager"] == 0, per_step
        assert d["trace_hits"] >= 1, per_step


def test_with_per_op_programs_cached_no_step_waits_for_a_compile():
    # The scenario: Strict Eager's per-op programs are in the cache
    # (here from a Strict run of the same model), the whole-step programs are
    # not. In Fused Eager with asynchronous compiles no step compiles on the
    # calling thread: the worker is held for steps 0-3, and nothing compiles.
    cpu = _mlp()
    with torch_tpu.eager_mode("DEFER_NEVER"):
        warm, warm_cpu = _mlp().to("tpu"), _mlp()
        _train(3, 0, warm, torch.optim.AdamW(warm.parameters(), lr=1e-2),
               warm_cpu, torch.optim.AdamW(warm_cpu.parameters(), lr=1e-2))
    model = _mlp().to("tpu")
    per_step = _train(6, 4, model, torch.optim.AdamW(model.parameters(), lr=1e-2),
                      cpu, torch.optim.AdamW(cpu.parameters(), lr=1e-2))
    assert all(d["async_eager_recordings"] >= 1 for d in per_step[:4]), per_step
    assert sum(d["compiles"] for d in per_step[:4]) == 0, per_step
    assert sum(d["async_fused_compiles"] for d in per_step) >= 1, per_step
    # The worker, let go before step 4, compiled them: step 5 launches them.
    assert per_step[5]["async_eager_recordings"] == 0 and per_step[5]["trace_hits"] >= 1, per_step


def test_off_by_default_nothing_runs_op_by_op():
    torch_tpu.set_async_compile(False)
    assert not torch_tpu.async_compile_enabled()
    cpu = _mlp()
    model = _mlp().to("tpu")
    per_step = _train(4, 0, model, torch.optim.SGD(model.parameters(), lr=0.1),
                      cpu, torch.optim.SGD(cpu.parameters(), lr=0.1))
    assert all(d["async_eager_recordings"] == 0 and d["async_fused_compiles"] == 0
               for d in per_step), per_step


def _step_ops(x, idx):
    # A dead intermediate, an in-place update, a value read before and after
    # it through a view, an index that goes through the run-time checks.
    dead = x * 3
    a = dead.sin() + 1
    x.mul_(2)
    b = a[:, 1:] * x[:, 1:].exp()
    return b.sum(1), b[idx]


def _seen_in_strict(fn, *args):
    # Runs fn's ops once, one program each: Fused Eager records them as
    # traces from then on, and their whole program is still uncompiled (as
    # at the second step of a training loop).
    with torch_tpu.eager_mode("DEFER_NEVER"):
        fn(*args)
        torch.tpu.synchronize()


def test_in_place_views_dead_intermediates_and_index_checks_are_exact():
    _C._hold_background_compiles(True)
    base = torch.randn(5, 4)
    idx = torch.tensor([4, 0, 2])
    _seen_in_strict(_step_ops, base.clone().to("tpu"), idx.to("tpu"))
    for i in range(3):
        x, xt = base.clone() + i, (base.clone() + i).to("tpu")
        before = _counts()
        got = _step_ops(xt, idx.to("tpu"))
        want = _step_ops(x, idx)
        assert_same(got[0], want[0], atol=1e-6, rtol=1e-6)
        assert_same(got[1], want[1], atol=1e-6, rtol=1e-6)
        assert_same(xt, x)
        d = _delta(before)
        assert d["async_eager_recordings"] == 1 and d["flush_async_eager"] >= 6, d
    # An index out of range raises at the host read, as in every mode.
    xt = base.clone().to("tpu")
    with pytest.raises(IndexError):
        _step_ops(xt, torch.tensor([5, 0, 2]).to("tpu"))[1].cpu()
    # The process keeps working.
    assert_same(xt + 1, base * 2 + 1)


def test_failed_background_compile_warns_once_and_stays_op_by_op():
    def f(x):
        return (x * 2).sin().cumsum(0) - x

    x = torch.randn(6, 3)
    _seen_in_strict(f, x.to("tpu"))
    _C._break_next_background_compile()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            before = _counts()
            assert_same(f(x.to("tpu")), f(x), atol=1e-6, rtol=1e-6)
            assert _delta(before)["async_eager_recordings"] == 1
            _C._drain_background_compiles()
    ours = [str(w.message) for w in caught if "failed to compile in the background" in str(w.message)]
    assert len(ours) == 1, ours
    assert torch_tpu.metrics().get("async_fused_compile_failures", 0) >= 1


def test_a_recording_that_may_run_once_compiles_when_it_comes_again():
    # A loop over lengths at one line: each new length's program is a
    # reshaped recompilation, queued only when that length comes again.
    def f(x):
        return (x.exp() * 2).sum(0) + x.mean(0)

    _C._hold_background_compiles(True)
    xs = {n: torch.randn(n, 3) for n in (4, 6, 8)}
    for x in xs.values():
        _seen_in_strict(f, x.to("tpu"))
    queued = []
    for n in (4, 6, 6, 8, 8):
        before = _counts()
        assert_same(f(xs[n].to("tpu")), f(xs[n]), atol=1e-6, rtol=1e-6)
        d = _delta(before)
        assert d["async_eager_recordings"] == 1, (n, d)
        queued.append(d["async_fused_compiles"])
    # 4: the line's first program, queued at once; 6 and 8: the same ops over
    # new sizes, queued the second time each comes.
    assert queued == [1, 0, 1, 0, 1], queued


def test_switch_takes_a_bool_or_none(monkeypatch):
    with pytest.raises(TypeError, match="set_async_compile"):
        torch_tpu.set_async_compile("yes")
    assert torch_tpu.async_compile_enabled()
    monkeypatch.setenv("TORCH_TPU_ASYNC_COMPILE", "0")
    torch_tpu.set_async_compile(None)
    assert not torch_tpu.async_compile_enabled()
    monkeypatch.setenv("TORCH_TPU_ASYNC_COMPILE", "1")
    torch_tpu.set_async_compile(None)
    assert torch_tpu.async_compile_enabled()
