"""A steady training loop compiles nothing after its first steps, in Strict
and in Fused Eager, whatever the timing of the programs it launches.

Whether an input buffer is donated to a program is part of the program. It
used to depend on whether earlier launched programs still held the buffer,
that is on timing: a steady Strict loop compiled a new program at random
steps. The loops here sleep at random points so that launched programs are
sometimes finished and sometimes still running when the next op records."""
import random
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu

from conftest import assert_same

STEPS = 200


class TinyGPT(nn.Module):
    def __init__(self, vocab=64, dim=32, heads=2, seq=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.block = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0,
                                                batch_first=True, norm_first=True)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, idx):
        x = self.tok(idx) + self.pos
        return self.head(self.norm(self.block(x, src_mask=self.mask, is_causal=True)))


def _mlp_task(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 4)).to(device)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(128, 16, generator=g), torch.randint(0, 4, (128,), generator=g)
    return model, lambda m: F.cross_entropy(m(x.to(device)), y.to(device))


def _gpt_task(device):
    torch.manual_seed(0)
    model = TinyGPT().to(device)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 64, (4, 17), generator=g)
    inp, tgt = idx[:, :-1].to(device), idx[:, 1:].to(device)
    return model, lambda m: F.cross_entropy(m(inp).flatten(0, 1), tgt.flatten())


def _train(task, device, steps, jitter=None):
    """Trains with AdamW; returns the cache misses after each step and the loss."""
    model, loss_fn = task(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    misses = []
    for _ in range(steps):
        loss = loss_fn(model)
        if jitter:
            jitter()
        opt.zero_grad()
        loss.backward()
        if jitter:
            jitter()
        opt.step()
        if device != "cpu":
            misses.append(torch_tpu.metrics().get("cache_misses", 0))
    return misses, loss.detach()


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
@pytest.mark.parametrize("task", [_mlp_task, _gpt_task], ids=["mlp", "gpt"])
def test_steady_loop_compiles_nothing_after_warmup(task, mode):
    rng = random.Random(0)

    def jitter():  # sometimes let the launched programs finish, sometimes not
        if rng.random() < 0.3:
            time.sleep(rng.choice([0.0005, 0.002, 0.005]))

    torch_tpu.clear_cache()
    with torch.tpu.precision("highest"), torch_tpu.eager_mode(mode):
        misses, loss = _train(task, "tpu", STEPS, jitter)
    # The optimizer step is one program in both modes, and step 1's also
    # creates the optimizer state: step 2 compiles the steady update;
    # nothing after it.
    assert misses[-1] == misses[1], f"compiled after step 2: misses per step {misses}"
    _, cpu_loss = _train(task, "cpu", STEPS)
    assert_same(loss, cpu_loss, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("task", [_mlp_task, _gpt_task], ids=["mlp", "gpt"])
def test_fused_second_step_compiles_only_the_update(task):
    """Fused Eager cuts a training step where optimizer.step() begins and
    ends: the forward-backward program of step 1 runs again in step 2, and
    step 2 compiles only the steady update (step 1's update also created the
    optimizer state), not a second whole-step program."""
    torch_tpu.clear_cache()
    with torch.tpu.precision("highest"), torch_tpu.eager_mode("DEFER_AND_FUSE"):
        model, loss_fn = task("tpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
        per_step = []
        for _ in range(5):
            before = torch_tpu.metrics()
            loss = loss_fn(model)
            opt.zero_grad()
            loss.backward()
            opt.step()
            after = torch_tpu.metrics()
            per_step.append({k: after.get(k, 0) - before.get(k, 0)
                             for k in ("cache_misses", "executions", "flush_optimizer_step_begin")})
    assert per_step[1] == {"cache_misses": 1, "executions": 2, "flush_optimizer_step_begin": 1}, per_step
    for step in per_step[2:]:
        assert step == {"cache_misses": 0, "executions": 2, "flush_optimizer_step_begin": 1}, per_step
