"""Strict Eager runs an optimizer step as one program (torch_tpu/modes.py's
hooks, Engine::flush): the step's ops are recorded between the flushes at its
start and end instead of each launching its own program, as a fused optimizer
kernel runs them. Debug Eager keeps one program per op. A step that raises
ends its program at the next flush (a host read), and Strict is per-op again
after it."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu

from conftest import assert_same


def _executions():
    return torch_tpu.metrics().get("executions", 0)


def _train(device, steps, optimizer, per_step=None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
    opt = optimizer(model.parameters())
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 16, generator=g).to(device), torch.randint(0, 4, (64,), generator=g)
    y = y.to(device)
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        if device == "tpu":
            torch.tpu.synchronize()
            before = _executions()
        opt.step()
        if device == "tpu":
            torch.tpu.synchronize()
            per_step.append(_executions() - before)
    return [p.detach() for p in model.parameters()]


OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=1e-2),
    "adam_amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=1e-1, momentum=0.9, nesterov=True),
    "adamw_for_loop": lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=False),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_strict_optimizer_step_is_one_program_and_matches_cpu(name):
    per_step = []
    with torch.tpu.precision("highest"), torch_tpu.eager_mode("DEFER_NEVER"):
        params = _train("tpu", 4, OPTIMIZERS[name], per_step)
    assert per_step == [1, 1, 1, 1], per_step
    for p, q in zip(params, _train("cpu", 4, OPTIMIZERS[name])):
        assert_same(p, q, atol=1e-5, rtol=1e-5)


def test_debug_eager_runs_the_step_op_by_op():
    per_step = []
    with torch.tpu.precision("highest"), torch_tpu.eager_mode("DEFER_NEVER_AND_LAUNCH_BLOCKING"):
        debug = _train("tpu", 2, OPTIMIZERS["adamw"], per_step)
    assert min(per_step) > 1, per_step
    with torch.tpu.precision("highest"), torch_tpu.eager_mode("DEFER_NEVER"):
        strict = _train("tpu", 2, OPTIMIZERS["adamw"], [])
    for p, q in zip(strict, debug):
        assert_same(p, q.cpu(), atol=1e-6, rtol=1e-6)


class _Failing(torch.optim.Optimizer):
    """Updates its parameters, then raises: the step's post-hook never runs."""

    def __init__(self, params):
        super().__init__(params, {})

    def step(self, closure=None):
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    p.add_(1.0)
        raise RuntimeError("boom")


def test_a_step_that_raises_ends_at_the_next_host_read():
    p = nn.Parameter(torch.zeros(4, device="tpu"))
    opt = _Failing([p])
    with torch_tpu.eager_mode("DEFER_NEVER"):
        torch.tpu.synchronize()
        before = _executions()
        with pytest.raises(RuntimeError, match="boom"):
            opt.step()
        assert _executions() == before  # the update is recorded, not launched yet
        assert torch.equal(p.detach().cpu(), torch.ones(4))  # the read runs it
        assert _executions() == before + 1
        q = p.detach() * 2  # one program per op again
        assert _executions() == before + 2
        assert torch.equal(q.cpu(), torch.full((4,), 2.0))


TWO_MODELS_AT_ONE_LINE = textwrap.dedent("""
    import sys, torch, torch.nn as nn, torch_tpu
    torch_tpu.set_eager_mode(sys.argv[1])

    def train(width):
        model = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 2)).to("tpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        x = torch.randn(16, 8).to("tpu")
        for _ in range(3):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()  # one line: the second model's steps are reshaped recompilations
        torch.tpu.synchronize()

    train(16)
    before = torch_tpu.metrics().get("quick_compiles", 0)
    train(24)
    print(int(torch_tpu.metrics().get("quick_compiles", 0) - before))
""")


@pytest.mark.parametrize("mode,quick", [("DEFER_NEVER", False), ("DEFER_AND_FUSE", True)])
def test_strict_step_at_a_line_that_saw_other_shapes_compiles_optimized(mode, quick):
    """A steady Strict optimizer step is never compiled quickly (tiered
    compilation): its speed must not wait for a background upgrade. Only the
    first step's update, which creates the state and runs once, is quick (1).
    Fused Eager's programs at the same line compile quickly (the control)."""
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0")
    env.pop("TORCH_TPU_TIERED_COMPILE", None)
    proc = subprocess.run([sys.executable, "-c", TWO_MODELS_AT_ONE_LINE, mode],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (int(proc.stdout.split()[-1]) > 1) == quick, proc.stdout
