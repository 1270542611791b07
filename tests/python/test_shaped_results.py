"""Programs on XLA:CPU return shaped results (hlo::Target::shaped_results):
a storage's flat array leaves the program as the value it was reshaped
from, and the engine keeps using the buffer as the storage's flat array.
These check both halves: the printed program, and the ways a later op
reads such a buffer (views, another dtype, in-place writes, resizes, compiled
graphs), against CPU. (Captured programs keep flat results: test_step_capture.)"""
import pytest
import torch
import torch_tpu

MODES = [torch_tpu.EagerMode.DEFER_NEVER, torch_tpu.EagerMode.DEFER_AND_FUSE]


@pytest.fixture(params=MODES, ids=lambda m: m.name)
def mode(request):
    with torch_tpu.eager_mode(request.param):
        yield request.param


def test_a_program_returns_the_tensor_shape_not_the_flat_storage():
    with torch_tpu.eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        x, b = torch.randn(4, 8), torch.randn(8)
        xt, bt = x.to("tpu"), b.to("tpu")
        torch.tpu.synchronize()
        y = xt * 2 + bt
        text = torch_tpu._C._flush_text()
    main = next(line for line in text.splitlines() if "@main" in line)
    assert main.endswith("-> (tensor<4x8xf32>) {"), main  # inputs stay flat storages
    assert "%0: tensor<32xf32>" in main, main
    torch.testing.assert_close(y.cpu(), x * 2 + b, rtol=0, atol=0)


def test_an_in_place_update_takes_its_donated_buffer_in_the_result_shape():
    """XLA updates a donated buffer in place only when parameter and result
    have one shape: the parameter is taken as [4, 8] and reshaped to the
    flat storage the body reads (a [4, 8] result of a flat parameter was
    written to a temporary and copied back), and named as the buffer of its
    result (`tf.aliasing_output`), not a donor XLA may give to any result."""
    x, b = torch.randn(4, 8), torch.randn(8)
    xt, bt = x.to("tpu"), b.to("tpu")
    torch.tpu.synchronize()
    with torch_tpu.eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        xt.mul_(0.5).add_(bt)
        text = torch_tpu._C._flush_text()
    main = next(line for line in text.splitlines() if "@main" in line)
    assert "%p0: tensor<4x8xf32> {tf.aliasing_output = 0 : i32}" in main, main
    assert main.endswith("-> (tensor<4x8xf32>) {"), main
    assert '%0 = "stablehlo.reshape"(%p0) : (tensor<4x8xf32>) -> tensor<32xf32>' in text, text
    x.mul_(0.5).add_(b)
    torch.testing.assert_close(xt.cpu(), x)


@pytest.mark.parametrize("shape", [(6, 5), (2, 3, 4), (7,)])
def test_in_place_updates_of_donated_buffers_read_back_in_every_way(mode, shape):
    torch.manual_seed(0)
    x, y = torch.randn(*shape), torch.randn(*shape)
    b = torch.randn(shape[-1])
    xt, yt, bt = x.to("tpu"), y.to("tpu"), b.to("tpu")
    for step in range(3):  # a loop: the second and third runs reuse the program
        xt.add_(yt, alpha=0.5).mul_(1.5).add_(bt)
        yt.lerp_(xt, 0.25)
        x.add_(y, alpha=0.5).mul_(1.5).add_(b)
        y.lerp_(x, 0.25)
        torch.tpu.synchronize()
    torch.testing.assert_close(xt.cpu(), x)
    torch.testing.assert_close(yt.cpu(), y)
    flat = xt.view(-1)
    assert torch.equal(flat[1:].cpu(), xt.cpu().view(-1)[1:])  # the storage read flat
    assert torch.equal(xt.view(torch.int32).cpu(), xt.cpu().view(torch.int32))
    if xt.dim() > 1:
        assert torch.equal(xt.transpose(0, -1).contiguous().cpu(),
                           xt.cpu().transpose(0, -1).contiguous())
    xt[..., :1].zero_()  # in place through a view, into the updated buffer
    x[..., :1].zero_()
    torch.testing.assert_close(xt.cpu(), x)


def test_a_shaped_result_is_read_as_its_storage_in_every_way(mode):
    torch.manual_seed(0)
    x, b = torch.randn(6, 5), torch.randn(5)
    yt = x.to("tpu") * 3 + b.to("tpu")
    torch.tpu.synchronize()  # yt's buffer is now the program's [6, 5] result
    # The reference is the device's own values (a fused multiply-add may
    # round once where CPU rounds twice): what is checked is how the buffer
    # is read.
    y = yt.cpu()
    torch.testing.assert_close(y, x * 3 + b)
    assert torch.equal(yt.view(torch.int32).cpu(), y.view(torch.int32))  # another dtype
    assert torch.equal(yt.view(-1)[7:19].cpu(), y.view(-1)[7:19])  # flat view
    assert torch.equal(yt.t().contiguous().cpu(), y.t().contiguous())
    assert torch.equal(yt[1:5:2, ::2].cpu(), y[1:5:2, ::2])  # strided view
    yt[:, 1].mul_(-1)  # in place through a view
    y[:, 1].mul_(-1)
    assert torch.equal(yt.cpu(), y)
    z, zt = (y @ y.t()).sum(0), (yt @ yt.t()).sum(0)  # a shaped result feeding a dot
    torch.testing.assert_close(zt.cpu(), z, rtol=1e-2, atol=1e-2)
    wt = yt.clone()
    w = y.clone()
    torch.tpu.synchronize()
    wt.resize_(40)  # a resize reads the storage's flat array
    w.resize_(40)
    assert torch.equal(wt[:30].cpu(), w[:30])


def test_a_compiled_graph_takes_a_shaped_result_as_input(mode):
    x = torch.randn(3, 4, 5)
    xt = x.to("tpu") + 1  # a program's shaped [3, 4, 5] result
    torch.tpu.synchronize()
    f = torch.compile(lambda a: (a.transpose(0, 2) * 2).sum(1), backend="tpu")
    # A graph that returns a view of its input: eager ops then read the
    # view of the shaped buffer strided.
    g = torch.compile(lambda a: a[1:].transpose(0, 2), backend="tpu")
    for _ in range(2):  # capture, then replay
        torch.testing.assert_close(f(xt).cpu(), ((x + 1).transpose(0, 2) * 2).sum(1))
        v = g(xt)
        torch.testing.assert_close((v[::2] * 2).cpu(), (x + 1)[1:].transpose(0, 2)[::2] * 2)


FOREACH_ADAMW = """
import sys, torch, torch_tpu
torch_tpu.set_eager_mode(sys.argv[1])
def run(device):
    g = torch.Generator().manual_seed(0)
    ps = [torch.randn(s, generator=g).to(device).requires_grad_()
          for s in [(16, 8), (8, 16), (8,), (16, 8)]]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g).to(device)
    opt = torch.optim.AdamW(ps, lr=1e-2, foreach=True)
    for _ in range(3):
        opt.step()
    return [p.detach().cpu() for p in ps]
with torch.tpu.precision("highest"):
    got = run("tpu")
print(max(float((a - b).abs().max()) for a, b in zip(got, run("cpu"))))
"""


@pytest.mark.skipif(torch_tpu._C._platform()[0] != "cpu", reason="reads XLA:CPU's optimized HLO")
@pytest.mark.parametrize("mode_name", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_a_foreach_adamw_step_updates_parameters_and_moments_in_place(tmp_path, mode_name):
    """Each donated parameter is named as the buffer of the result that
    overwrites it (`tf.aliasing_output`): as a mere donor, XLA:CPU gave the
    new moments the parameters' buffers (same shapes) and copied every old
    parameter and moment on entry, 104 copies in a 26-tensor step, which ran
    at less than half the speed of `fused=True`. The optimized programs have
    no copy, and the values are CPU's."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, TORCH_TPU_DISK_CACHE="0",
               XLA_FLAGS=f"--xla_dump_to={tmp_path} --xla_dump_hlo_as_text")
    proc = subprocess.run([sys.executable, "-c", FOREACH_ADAMW, mode_name], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.split()[-1]) < 1e-5
    optimized = sorted(tmp_path.glob("*after_optimizations.txt"), key=lambda f: f.stat().st_size)
    assert optimized
    step = optimized[-1].read_text()  # the largest: an optimizer step
    assert step.count("fusion(") >= 8, step[:2000]
    assert " copy(" not in step, [line for line in step.splitlines() if " copy(" in line][:5]
