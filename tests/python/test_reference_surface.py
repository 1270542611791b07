"""The rest of the reference TorchTPU's public surface, against CPU:
torch.tpu.compiler.custom_compiler_options (compile options in the cache
key), allow_excess_precision, device properties, torch.tpu.sync,
torch.tpu.ops (max pooling without indices, ragged_dot, _grouped_mm) and
torch.tpu.optimizers (AdamW, Sgd, Muon, SingleTraceTrainer)."""
import copy
import os
import subprocess
import sys

import pytest
import torch

import torch_tpu
from conftest import assert_same

MODES = ["DEFER_NEVER", "DEFER_AND_FUSE"]


def _compiles():
    return torch_tpu.metrics().get("compiles", 0)


# ---- torch.tpu.compiler.custom_compiler_options ----------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_compiler_options_make_another_executable(mode):
    x = torch.randn(37, 41)
    with torch.tpu.set_eager_mode(mode):
        t = x.to("tpu")
        expected = (x * 3.5).tanh() + x
        assert_same((t * 3.5).tanh() + t, expected)  # compiled under no options
        before = _compiles()
        assert_same((t * 3.5).tanh() + t, expected)
        assert _compiles() == before  # a cache hit
        with torch.tpu.compiler.custom_compiler_options({"xla_optimization_level": "O1"}):
            assert_same((t * 3.5).tanh() + t, expected)
            assert _compiles() > before  # same program, other options: compiled again
            after = _compiles()
            assert_same((t * 3.5).tanh() + t, expected)
            assert _compiles() == after  # and cached under those options
        assert_same((t * 3.5).tanh() + t, expected)
        assert _compiles() == after  # the block's end brings the first executable back


def test_compiler_options_nest_and_restore():
    cco = torch.tpu.compiler.custom_compiler_options
    assert torch.tpu.compiler.current_compiler_options() == {}
    with cco({"xla_optimization_level": "O1", "xla_backend_optimization_level": 1}):
        with cco({"xla_optimization_level": "O2"}):
            assert torch.tpu.compiler.current_compiler_options() == {
                "xla_optimization_level": "O2", "xla_backend_optimization_level": 1}
        assert torch.tpu.compiler.current_compiler_options()["xla_optimization_level"] == "O1"
    assert torch.tpu.compiler.current_compiler_options() == {}
    assert torch_tpu._C._compile_options_key() == ""


def test_compiler_options_debug_option_by_type():
    x = torch.randn(64, 64)
    with torch.tpu.compiler.custom_compiler_options({"xla_backend_optimization_level": 0,
                                                     "xla_llvm_disable_expensive_passes": True}):
        assert_same((x.to("tpu") * 2 - 1).exp(), (x * 2 - 1).exp())


@pytest.mark.parametrize("options, error, words", [
    ({"xla_no_such_option_at_all": True}, ValueError, "xla_no_such_option_at_all"),
    ({"xla_optimization_level": "O7"}, ValueError, "'O0', 'O1', 'O2', 'O3'"),
    ({"xla_optimization_level": 2}, ValueError, "'O0', 'O1', 'O2', 'O3'"),
    ({"xla_backend_optimization_level": [1]}, TypeError, "str, bool, int or float"),
    ({3: "O1"}, TypeError, "names are str"),
    ("O1", TypeError, "dict"),
])
def test_compiler_options_bad_input(options, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(")):
        with torch.tpu.compiler.custom_compiler_options(options):
            pass
    assert torch.tpu.compiler.current_compiler_options() == {}
    assert_same(torch.ones(3, device="tpu") + 1, torch.ones(3) + 1)  # still usable


def test_compiler_options_in_a_fresh_process_hit_the_disk_cache(tmp_path):
    script = (
        "import torch, torch_tpu\n"
        "x = torch.arange(12.).reshape(3, 4).to('tpu')\n"
        "with torch.tpu.compiler.custom_compiler_options({'xla_optimization_level': 'O1'}):\n"
        "    y = (x.sin() * 2).cpu()\n"
        "print(torch_tpu.cache_stats()['misses'], torch_tpu.cache_stats()['disk_hits'])\n")
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path), TORCH_TPU_DISK_CACHE="1")
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    first, second = (list(map(int, r.stdout.split()[-2:])) for r in runs)
    assert first[0] >= 1 and second[0] == 0 and second[1] >= 1


# ---- allow_excess_precision, device properties, amp ------------------------------

def test_allow_excess_precision_is_part_of_the_key():
    assert torch.tpu.allow_excess_precision is True  # XLA's default unless XLA_FLAGS says
    x = torch.randn(16, 16).bfloat16()
    t = x.to("tpu")
    expected = (x * 1.25 + 0.5) * x
    assert_same((t * 1.25 + 0.5) * t, expected)
    before = _compiles()
    try:
        torch.tpu.allow_excess_precision = False
        assert torch.tpu.allow_excess_precision is False
        assert_same((t * 1.25 + 0.5) * t, expected)
        assert _compiles() > before
    finally:
        torch.tpu.allow_excess_precision = True
    with pytest.raises(TypeError, match="True or False"):
        torch.tpu.allow_excess_precision = "no"


def test_device_properties():
    p = torch.tpu.get_device_properties(0)
    assert p.name == torch.tpu.get_device_name(0).split(" (")[0]
    assert p.total_memory == torch.accelerator.get_memory_info(0)[1] > 0
    assert p.core_count == p.multi_processor_count >= 1
    if p.platform == "cpu":
        assert p.core_count == len(os.sched_getaffinity(0))
    assert "total_memory" in repr(p)
    with pytest.raises(RuntimeError, match="not a valid device"):
        torch.tpu.get_device_properties(torch.tpu.device_count())


def test_amp_dtypes_and_initialized():
    assert torch.tpu.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    torch.ones(1, device="tpu")
    assert torch.tpu.is_initialized()


@pytest.mark.parametrize("var, mode", [("TORCH_TPU_LAUNCH_BLOCKING", "DEFER_NEVER_AND_LAUNCH_BLOCKING"),
                                       ("TPU_LAUNCH_BLOCKING", "DEFER_NEVER_AND_LAUNCH_BLOCKING"),
                                       ("TORCH_TPU_DEFER_AND_FUSE", "DEFER_AND_FUSE")])
def test_reference_env_switches(var, mode):
    env = {k: v for k, v in os.environ.items() if "LAUNCH_BLOCKING" not in k and "DEFER_AND" not in k}
    env[var] = "1"
    r = subprocess.run([sys.executable, "-c", "import torch; print(torch.tpu.eager_mode.name)"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-1] == mode


# ---- torch.tpu.sync --------------------------------------------------------------

def test_sync_pending_program_text():
    x = torch.randn(8, 8)
    with torch.tpu.set_eager_mode("DEFER_AND_FUSE"):
        t = x.to("tpu")
        torch.tpu.synchronize()
        y = (t * 2).sin() + 1
        text = torch.tpu.sync.computation_mlir(y)
        assert "stablehlo.sine" in text and "func.func" in text
        assert torch.tpu.sync.computation_mlir(y) == ""  # nothing pending any more
        assert_same(y, (x * 2).sin() + 1)
        z = y.exp()
        torch.tpu.sync.synchronize([z])
        assert_same(z, ((x * 2).sin() + 1).exp())
    with torch.tpu.set_eager_mode("DEFER_NEVER"):
        assert torch.tpu.sync.computation_mlir(torch.ones(2, device="tpu") * 3) == ""


def test_sync_dump_and_bad_input(tmp_path):
    with torch.tpu.set_eager_mode("DEFER_AND_FUSE"):
        y = torch.ones(4, device="tpu").cos()
        path = tmp_path / "sub" / "program.mlir"
        torch.tpu.sync.dump_computation_mlir([y], str(path))
        assert "stablehlo.cosine" in path.read_text()
    with pytest.raises(TypeError, match="tpu tensors"):
        torch.tpu.sync.synchronize([1.0])
    with pytest.raises(ValueError, match="cpu"):
        torch.tpu.sync.synchronize(torch.ones(2))


# ---- torch.tpu.ops ---------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_optimization_barrier(mode):
    x, y = torch.randn(4, 5), torch.randn(5)
    with torch.tpu.set_eager_mode(mode):
        a, b = torch.tpu.ops.optimization_barrier([x.to("tpu") * 2, y.to("tpu") + 1])
        assert_same(a, x * 2)
        assert_same(b, y + 1)
        (c,) = torch.tpu.ops.optimization_barrier([x.to("tpu").exp()])
        text = torch.tpu.sync.computation_mlir(c + 1)
        assert ("stablehlo.optimization_barrier" in text) == (mode == "DEFER_AND_FUSE")
        assert_same(c + 1, x.exp() + 1)
    (d,) = torch.tpu.ops.optimization_barrier([x])  # CPU: a copy
    assert d.equal(x) and d.data_ptr() != x.data_ptr()


POOLS = [  # (n, input shape, kernel, stride, padding, dilation, ceil_mode)
    (1, (2, 3, 11), [3], [2], [1], [1], False),
    (1, (3, 10), [2], [2], [0], [2], True),
    (2, (2, 3, 9, 8), [3, 2], [2, 1], [1, 0], [1, 2], True),
    (3, (1, 2, 5, 6, 7), [2, 2, 3], [2, 1, 2], [0, 1, 1], [1, 1, 1], False),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n, shape, k, s, p, d, ceil", POOLS)
def test_max_pool_without_indices(mode, n, shape, k, s, p, d, ceil):
    x = torch.randn(shape)
    pool = getattr(torch.nn.functional, f"max_pool{n}d")
    ref = x.clone().requires_grad_()
    expected = pool(ref, k, s, p, d, ceil_mode=ceil)
    grad = torch.randn(expected.shape)
    expected.backward(grad)
    ops = torch.tpu.ops
    with torch.tpu.set_eager_mode(mode):
        t = x.to("tpu")
        assert_same(getattr(ops, f"max_pool{n}d")(t, k, s, p, d, ceil), expected.detach())
        back = getattr(ops, f"max_pool{n}d_backward")(grad.to("tpu"), t, k, s, p, d, ceil)
        assert_same(back, ref.grad)


def test_max_pool_bad_window():
    with pytest.raises(ValueError, match="one value per spatial dim"):
        torch.tpu.ops.max_pool2d(torch.ones(1, 1, 4, 4, device="tpu"), [2], [2, 2], [0, 0],
                                 [1, 1], False)


def _ragged_reference(lhs, rhs, sizes):
    out, start = torch.zeros(lhs.shape[0], rhs.shape[2], dtype=lhs.dtype), 0
    for i, n in enumerate(sizes.tolist()):
        out[start:start + n] = lhs[start:start + n] @ rhs[i]
        start += n
    return out


@pytest.mark.parametrize("mode", MODES)
def test_ragged_dot_and_its_gradients(mode, highest_precision):
    lhs, rhs = torch.randn(10, 6), torch.randn(4, 6, 5)
    sizes = torch.tensor([3, 0, 5, 2])
    l_ref, r_ref = lhs.clone().requires_grad_(), rhs.clone().requires_grad_()
    expected = _ragged_reference(l_ref, r_ref, sizes)
    grad = torch.randn(expected.shape)
    expected.backward(grad)
    with torch.tpu.set_eager_mode(mode):
        l, r = lhs.to("tpu").requires_grad_(), rhs.to("tpu").requires_grad_()
        out = torch.tpu.ops.ragged_dot(l, r, sizes.to("tpu"))
        assert_same(out, expected.detach(), atol=1e-5, rtol=1e-5)
        out.backward(grad.to("tpu"))
        assert_same(l.grad, l_ref.grad, atol=1e-5, rtol=1e-5)
        assert_same(r.grad, r_ref.grad, atol=1e-5, rtol=1e-5)
        wgrad = torch.tpu.ops.ragged_dot_weight_grad(lhs.to("tpu"), grad.to("tpu"), sizes.to("tpu"))
        assert_same(wgrad, r_ref.grad, atol=1e-5, rtol=1e-5)
        buf = torch.empty(10, 5, device="tpu")
        assert torch.tpu.ops.ragged_dot(lhs.to("tpu"), rhs.to("tpu"), sizes.to("tpu"), out=buf) is buf
        assert_same(buf, expected.detach(), atol=1e-5, rtol=1e-5)


def test_ragged_dot_other_groups_inf_does_not_leak():
    lhs, rhs = torch.randn(4, 3), torch.randn(2, 3, 2)
    rhs[1] = float("inf")
    sizes = torch.tensor([4, 0])
    out = torch.tpu.ops.ragged_dot(lhs.to("tpu"), rhs.to("tpu"), sizes.to("tpu"))
    assert torch.isfinite(out.cpu()).all()


@pytest.mark.parametrize("lhs, rhs, sizes, words", [
    ((4, 3), (2, 4, 2), [2, 2], "k must match"),
    ((4, 3), (3, 3, 2), [2, 2], "3 groups"),
    ((4, 3, 1), (2, 3, 2), [2, 2], "lhs must be 2-D"),
])
def test_ragged_dot_bad_shapes(lhs, rhs, sizes, words):
    with pytest.raises(ValueError, match=words):
        torch.tpu.ops.ragged_dot(torch.ones(lhs, device="tpu"), torch.ones(rhs, device="tpu"),
                                 torch.tensor(sizes, device="tpu"))
    with pytest.raises(TypeError, match="integer"):
        torch.tpu.ops.ragged_dot(torch.ones(4, 3, device="tpu"), torch.ones(2, 3, 2, device="tpu"),
                                 torch.tensor([2.0, 2.0], device="tpu"))


@pytest.mark.parametrize("case", ["2d3d", "3d2d", "2d2d", "3d3d"])
def test_grouped_mm(case, highest_precision):
    g = 3
    offs = torch.tensor([2, 5, 8], dtype=torch.int32)
    # Row strides of 16 bytes' multiples, as PyTorch's _grouped_mm asks.
    a, b = {"2d3d": ((8, 4), (g, 4, 8)), "3d2d": ((g, 5, 4), (4, 8)),
            "2d2d": ((5, 8), (8, 8)), "3d3d": ((g, 5, 4), (g, 4, 8))}[case]
    a, b = torch.randn(a), torch.randn(b)
    o = None if case == "3d3d" else offs
    a_ref, b_ref = a.clone().requires_grad_(), b.clone().requires_grad_()
    expected = torch._grouped_mm(a_ref, b_ref, o)
    grad = torch.randn(expected.shape)
    expected.backward(grad)
    at, bt = a.to("tpu").requires_grad_(), b.to("tpu").requires_grad_()
    out = torch._grouped_mm(at, bt, None if o is None else o.to("tpu"))
    assert_same(out, expected.detach(), atol=1e-5, rtol=1e-5)
    out.backward(grad.to("tpu"))
    assert_same(at.grad, a_ref.grad, atol=1e-5, rtol=1e-5)
    assert_same(bt.grad, b_ref.grad, atol=1e-5, rtol=1e-5)


GROUPED_SHAPES = {"2d3d": ((8, 8), (3, 8, 8)), "3d2d": ((3, 8, 8), (8, 8)),
                  "2d2d": ((8, 8), (8, 8)), "3d3d": ((3, 8, 8), (3, 8, 8))}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", sorted(GROUPED_SHAPES))
def test_grouped_mm_compiled_every_dtype(case, dtype, highest_precision):
    # PyTorch's fake rule takes bf16 only; the tpu rule (torch_tpu/_fake_rules.py)
    # takes what the kernel takes, so the graph traces and runs as one program.
    torch._dynamo.reset()
    sa, sb = GROUPED_SHAPES[case]
    a, b = torch.randn(sa).to(dtype), torch.randn(sb).to(dtype)
    offs = None if case == "3d3d" else torch.tensor([2, 5, 8], dtype=torch.int32)

    def f(a, b, offs):
        return (torch._grouped_mm(a, b, offs) * 2).float().square().sum()

    a_ref, b_ref = a.clone().requires_grad_(), b.clone().requires_grad_()
    expected = f(a_ref, b_ref, offs)
    expected.backward()
    at, bt = a.to("tpu").requires_grad_(), b.to("tpu").requires_grad_()
    before = torch_tpu.compiler.compile_metrics()
    out = torch.compile(f, backend="tpu")(at, bt, None if offs is None else offs.to("tpu"))
    out.backward()
    after = torch_tpu.compiler.compile_metrics()
    assert after.get("captures", 0) - before.get("captures", 0) == 2  # forward, backward
    assert after.get("eager_calls", 0) == before.get("eager_calls", 0)
    tol = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]
    assert_same(out, expected.detach(), atol=tol, rtol=tol)
    assert_same(at.grad, a_ref.grad, atol=tol * 10, rtol=tol)
    assert_same(bt.grad, b_ref.grad, atol=tol * 10, rtol=tol)


def test_grouped_mm_compiled_bad_input_raises_as_eager():
    torch._dynamo.reset()
    a, b = torch.randn(8, 8, device="tpu"), torch.randn(3, 8, 8, device="tpu")
    offs = torch.tensor([2, 5, 8], device="tpu")  # int64: PyTorch asks for int32
    f = torch.compile(lambda a, b, o: torch._grouped_mm(a, b, o), backend="tpu")
    with pytest.raises(Exception, match="Offsets have to be int32"):
        f(a, b, offs)
    with pytest.raises(RuntimeError, match="Offsets have to be int32"):
        torch._grouped_mm(a, b, offs)


# ---- torch.tpu.optimizers --------------------------------------------------------

def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def _grads(model, x):
    model.zero_grad()
    model(x).square().mean().backward()
    return {n.replace(".", "_"): p.grad.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("make, torch_make", [
    (lambda: torch.tpu.optimizers.AdamW(lr=0.01, weight_decay=0.1, use_bfloat16_moments=False),
     lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)),
    (lambda: torch.tpu.optimizers.Sgd(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
], ids=["AdamW", "Sgd"])
def test_functional_optimizers_match_torch_optim(mode, make, torch_make, highest_precision):
    cpu_model = _model()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    ref = torch_make(cpu_model.parameters())
    opt = make()
    with torch.tpu.set_eager_mode(mode):
        group = opt.init_param_group(tpu_model)
        for step in range(3):
            x = torch.randn(5, 6)
            _grads(cpu_model, x)
            ref.step()
            grads = _grads(tpu_model, x.to("tpu"))
            group = opt(group, grads)
        for n, p in cpu_model.named_parameters():
            assert_same(group.params[n.replace(".", "_")], p.detach(), atol=1e-5, rtol=1e-4)
        assert float(next(iter(group.opt_steps.values())).cpu()) == 3.0
    assert opt.defaults["lr"] in (0.01, 0.05)


def test_muon_matches_torch_optim(highest_precision):
    torch.manual_seed(1)
    w = torch.randn(6, 4)
    cpu_w = torch.nn.Parameter(w.clone())
    ref = torch.optim.Muon([cpu_w], lr=0.02, weight_decay=0.1)
    opt = torch.tpu.optimizers.Muon(lr=0.02, weight_decay=0.1)
    group = opt.init_param_group({"w": w.to("tpu")})
    for _ in range(2):
        g = torch.randn(6, 4)
        cpu_w.grad = g.clone()
        ref.step()
        group = opt.step(group, {"w": g.to("tpu")})
    assert_same(group.params["w"], cpu_w.detach(), atol=2e-2, rtol=2e-2)  # bf16 Newton-Schulz
    with pytest.raises(ValueError, match="2-D"):
        opt.init_param_group({"b": torch.ones(3, device="tpu")})


def test_optimizer_step_missing_grad():
    opt = torch.tpu.optimizers.AdamW()
    group = opt.init_param_group({"w": torch.ones(2, device="tpu")})
    with pytest.raises(KeyError, match="no gradient"):
        opt.step(group, {})


def test_single_trace_trainer_matches_torch_optim(highest_precision):
    cpu_model = _model()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    ref = torch.optim.AdamW(cpu_model.parameters(), lr=0.01)
    trainer = torch.tpu.optimizers.SingleTraceTrainer(
        tpu_model, torch.tpu.optimizers.AdamW(lr=0.01, use_bfloat16_moments=False))
    x0, y0 = torch.randn(5, 6), torch.randn(5, 3)
    step = trainer.make_compiled_train_step(x0.to("tpu"), y0.to("tpu"))
    for i in range(4):
        x, y = torch.randn(5, 6), torch.randn(5, 3)
        ref.zero_grad()
        expected = torch.nn.functional.mse_loss(cpu_model(x), y)
        expected.backward()
        ref.step()
        x, y = x.to("tpu"), y.to("tpu")
        torch.tpu.synchronize()
        before = torch_tpu.metrics()
        loss = step(x, y)
        torch.tpu.synchronize()
        after = torch_tpu.metrics()
        assert_same(loss, expected.detach(), atol=1e-5, rtol=1e-4)
        if i > 0:  # one program for the whole step: captured once, replayed after
            assert after.get("compiles", 0) == before.get("compiles", 0)
            # the batch copied in (both copies one program: in Strict Eager a
            # device copy runs with what follows it), the replay, the loss handed out
            assert after["executions"] - before["executions"] == 3
    for n, p in cpu_model.named_parameters():
        assert_same(trainer.params[n], p.detach(), atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="targets"):
        step(x.to("tpu"))


def test_single_trace_trainer_without_optimizer_sets_grads(highest_precision):
    cpu_model = _model()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    trainer = torch.tpu.optimizers.SingleTraceTrainer(tpu_model)
    x = torch.randn(4, 6)
    step = trainer.make_compiled_train_step(x.to("tpu"))
    loss = step(x.to("tpu"))
    expected = cpu_model(x).mean()
    expected.backward()
    assert_same(loss, expected.detach(), atol=1e-5, rtol=1e-4)
    for (n, p), q in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        assert_same(q.grad, p.grad, atol=1e-5, rtol=1e-4)
