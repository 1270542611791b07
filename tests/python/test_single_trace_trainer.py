"""torch.tpu.optimizers.SingleTraceTrainer over one captured step graph:
against CPU (or, where random bits cannot match CPU's generator, against the
same eager tpu steps from the same seed), in Strict and Fused Eager."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu
from conftest import assert_same

MODES = ["DEFER_NEVER", "DEFER_AND_FUSE"]


def _batches(n, dim=6, out=3, batch=5):
    g = torch.Generator().manual_seed(4)
    return [(torch.randn(batch, dim, generator=g), torch.randn(batch, out, generator=g))
            for _ in range(n)]


@pytest.mark.parametrize("mode", MODES)
def test_batchnorm_model_params_and_buffers_match_cpu(mode, highest_precision):
    torch.manual_seed(0)
    # No bias before the BatchNorm: its gradient is zero up to rounding, and
    # AdamW would amplify that noise into full steps.
    cpu_model = nn.Sequential(nn.Linear(6, 8, bias=False), nn.BatchNorm1d(8), nn.Tanh(),
                              nn.Linear(8, 3))
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    ref = torch.optim.AdamW(cpu_model.parameters(), lr=0.01)
    batches = _batches(6)
    with torch.tpu.set_eager_mode(mode):
        trainer = torch.tpu.optimizers.SingleTraceTrainer(
            tpu_model, torch.tpu.optimizers.AdamW(lr=0.01, use_bfloat16_moments=False))
        step = trainer.make_compiled_train_step(*batches[0])  # CPU examples are fine
        losses = []
        for x, y in batches:
            ref.zero_grad()
            expected = F.mse_loss(cpu_model(x), y)
            expected.backward()
            ref.step()
            losses.append(step(x, y))
        for loss in losses[:-1]:  # each call's loss is its own tensor
            assert loss.data_ptr() != losses[-1].data_ptr()
        assert_same(losses[-1], expected.detach(), atol=1e-5, rtol=1e-4)
    for n, p in cpu_model.named_parameters():
        assert_same(trainer.params[n], p.detach(), atol=1e-5, rtol=1e-4)
        assert_same(dict(tpu_model.named_parameters())[n], p.detach(), atol=1e-5, rtol=1e-4)
    for (n, b), c in zip(tpu_model.named_buffers(), cpu_model.buffers()):
        assert_same(b, c, atol=1e-5, rtol=1e-4)


def test_without_optimizer_each_call_sets_that_steps_grads(highest_precision):
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 3))
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    trainer = torch.tpu.optimizers.SingleTraceTrainer(tpu_model)
    batches = _batches(3)
    step = trainer.make_compiled_train_step(batches[0][0].to("tpu"))
    for x, _ in batches:
        cpu_model.zero_grad()
        expected = cpu_model(x).mean()
        expected.backward()
        assert_same(step(x.to("tpu")), expected.detach(), atol=1e-5, rtol=1e-4)
        for p, q in zip(cpu_model.parameters(), tpu_model.parameters()):
            assert_same(q.grad, p.grad, atol=1e-5, rtol=1e-4)


class _DropoutMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 32), nn.Linear(32, 3)

    def forward(self, x):
        return self.fc2(F.dropout(F.relu(self.fc1(x)), p=0.3, training=True))


def test_dropout_steps_equal_the_same_eager_tpu_steps(highest_precision):
    torch.manual_seed(0)
    model = _DropoutMLP()
    eager_model, trained = copy.deepcopy(model).to("tpu"), copy.deepcopy(model).to("tpu")
    batches = _batches(5)
    torch.tpu.manual_seed(21)
    ref = torch.optim.AdamW(eager_model.parameters(), lr=0.01, capturable=True)
    eager_losses = []
    for x, y in batches:
        ref.zero_grad()
        loss = F.mse_loss(eager_model(x.to("tpu")), y.to("tpu"))
        loss.backward()
        ref.step()
        eager_losses.append(loss.detach().cpu())
    eager_state = torch.tpu.get_rng_state()

    torch.tpu.manual_seed(21)
    trainer = torch.tpu.optimizers.SingleTraceTrainer(
        trained, torch.tpu.optimizers.AdamW(lr=0.01, use_bfloat16_moments=False))
    step = trainer.make_compiled_train_step(*batches[0])
    losses = [step(x, y).cpu() for x, y in batches]
    assert torch.equal(torch.tpu.get_rng_state(), eager_state)
    # The same dropout masks each step (new ones every step).
    torch.testing.assert_close(losses, eager_losses, atol=1e-5, rtol=1e-5)
    for p, q in zip(trained.parameters(), eager_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), atol=1e-5, rtol=1e-4)


def test_inputs_other_than_the_examples_raise():
    torch.manual_seed(0)
    model = nn.Linear(6, 3).to("tpu")
    trainer = torch.tpu.optimizers.SingleTraceTrainer(model, torch.tpu.optimizers.Sgd(lr=0.1))
    x, y = _batches(1)[0]
    step = trainer.make_compiled_train_step(x, y)
    with pytest.raises(ValueError, match=r"input tensor 0 is \(4, 6\) torch.float32; the step "
                                         r"was captured for \(5, 6\)"):
        step(torch.randn(4, 6), y)
    with pytest.raises(ValueError, match="structure"):
        step((x, x), y)
    with pytest.raises(ValueError, match="targets"):
        step(x)
    before = model.weight.detach().cpu()
    step(x, y)  # still usable; a step happened
    assert not torch.equal(model.weight.detach().cpu(), before)


def test_a_host_read_in_the_step_names_the_op():
    model = nn.Linear(6, 3).to("tpu")

    def loss_fn(model, args, kwargs):
        out = model(*args)
        if out.sum().item() > 1e9:  # a host read inside the step
            return out.mean()
        return out.pow(2).mean()

    trainer = torch.tpu.optimizers.SingleTraceTrainer(
        model, torch.tpu.optimizers.Sgd(lr=0.1), compute_loss_fn=loss_fn)
    x = torch.randn(5, 6)
    step = trainer.make_compiled_train_step(x)
    with pytest.raises(RuntimeError, match=r"item\(\).*test_single_trace_trainer.py"):
        step(x)
    assert torch_tpu.get_eager_mode() is not None  # the process goes on
    assert (model(x.to("tpu")).sum() * 0).item() == 0.0


def test_traced_path_through_compile_fn_still_works(highest_precision):
    from torch_tpu.single_trace_trainer import graph_runner_compile

    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 3))
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    ref = torch.optim.AdamW(cpu_model.parameters(), lr=0.01)
    trainer = torch.tpu.optimizers.SingleTraceTrainer(
        tpu_model, torch.tpu.optimizers.AdamW(lr=0.01, use_bfloat16_moments=False),
        compile_fn=graph_runner_compile)
    batches = _batches(3)
    step = trainer.make_compiled_train_step(*(t.to("tpu") for t in batches[0]))
    for x, y in batches:
        ref.zero_grad()
        expected = F.mse_loss(cpu_model(x), y)
        expected.backward()
        ref.step()
        assert_same(step(x.to("tpu"), y.to("tpu")), expected.detach(), atol=1e-5, rtol=1e-4)
    for n, p in cpu_model.named_parameters():
        assert_same(trainer.params[n], p.detach(), atol=1e-5, rtol=1e-4)
