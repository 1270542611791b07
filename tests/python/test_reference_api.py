"""Code written for the reference TorchTPU (and for torch.cuda) runs unchanged:
torch.accelerator's memory API, the reference's eager-mode and precision
names, the torch.cuda-like device and RNG functions, fused optimizers."""
import os
import subprocess
import sys

import pytest
import torch

import torch_tpu
from conftest import assert_same

MODES = ["DEFER_NEVER", "DEFER_AND_FUSE"]


# ---- torch.accelerator memory API ------------------------------------------------

def test_accelerator_is_tpu():
    assert torch.accelerator.current_accelerator().type == "tpu"
    assert torch.accelerator.device_count() == torch.tpu.device_count()
    assert torch.accelerator.current_device_index() == torch.tpu.current_device()
    torch.accelerator.synchronize()


def test_accelerator_memory_counts_allocations():
    torch.tpu.synchronize()
    before = torch.accelerator.memory_allocated()
    assert before == torch.tpu.memory_allocated()
    x = torch.empty(1024, device="tpu")
    assert torch.accelerator.memory_allocated() == before + 4096
    assert torch.accelerator.max_memory_allocated() >= before + 4096
    # Nothing is cached: reserved is what is allocated.
    assert torch.accelerator.memory_reserved() == torch.accelerator.memory_allocated()
    assert torch.accelerator.max_memory_reserved() >= before + 4096
    del x
    assert torch.accelerator.memory_allocated() == before
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == before
    assert torch.tpu.max_memory_allocated() == before


def test_accelerator_memory_stats_keys():
    x = torch.ones(256, device="tpu")  # noqa: F841
    stats = torch.accelerator.memory_stats()
    for key in ["allocated_bytes.all.current", "allocated_bytes.all.peak",
                "active_bytes.all.peak", "reserved_bytes.all.peak",
                "allocation.all.allocated", "segment.all.current",
                "num_alloc_retries", "num_ooms"]:
        assert key in stats, key
        assert stats[key] >= 0
    assert stats["allocated_bytes.all.current"] >= 1024
    assert stats["active_bytes.all.current"] == stats["allocated_bytes.all.current"]
    assert torch.tpu.memory_stats() == dict(stats)
    assert torch.tpu.memory_stats("tpu:0") == dict(torch.accelerator.memory_stats(0))


def test_accelerator_reset_accumulated_stats():
    x = torch.ones(64, device="tpu")  # noqa: F841
    torch.accelerator.reset_accumulated_memory_stats()
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.allocated"] == 0
    assert stats["allocated_bytes.all.freed"] == 0
    assert stats["allocated_bytes.all.current"] >= 256


def test_storage_resize_is_counted():
    x = torch.ones(16, device="tpu")
    before = torch.accelerator.memory_allocated()
    x.untyped_storage().resize_(0)
    assert torch.accelerator.memory_allocated() == before - 64
    x.untyped_storage().resize_(128)
    assert torch.accelerator.memory_allocated() == before + 64


def test_accelerator_empty_cache_and_memory_info():
    x = torch.ones(8, device="tpu") * 2
    torch.accelerator.empty_cache()
    torch.tpu.empty_cache()
    assert x.sum().item() == 16
    free, total = torch.accelerator.get_memory_info()
    assert 0 < free <= total
    assert torch.tpu.mem_get_info() == pytest.approx((free, total), rel=0.5)


def test_accelerator_memory_bad_device_raises():
    with pytest.raises(IndexError, match="not a valid device"):
        torch.accelerator.memory_allocated(99)
    with pytest.raises(IndexError, match="not a valid device"):
        torch.accelerator.reset_peak_memory_stats(64)
    with pytest.raises(IndexError, match="not a valid device"):
        torch.accelerator.get_memory_info(-5)
    with pytest.raises(RuntimeError, match="valid device"):
        torch.tpu.memory_allocated(99)


# ---- eager modes and precision, the reference's names ------------------------------

def test_eager_mode_enum_and_property():
    E = torch.tpu.EagerMode
    assert {"DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "DEFER_AND_FUSE"} <= set(E.__members__)
    assert torch.tpu.EagerMode is torch_tpu.EagerMode
    previous = torch.tpu.eager_mode
    assert isinstance(previous, E)
    try:
        torch.tpu.eager_mode = E.DEFER_AND_FUSE
        assert torch.tpu.eager_mode == E.DEFER_AND_FUSE
        assert torch_tpu.get_eager_mode() == E.DEFER_AND_FUSE
        y = torch.ones(3, device="tpu") + 1
        assert y.cpu().tolist() == [2, 2, 2]
    finally:
        torch.tpu.eager_mode = previous
    assert torch.tpu.eager_mode == previous


def test_set_eager_mode_as_setter_and_context_manager():
    E = torch.tpu.EagerMode
    previous = torch.tpu.eager_mode
    with torch.tpu.set_eager_mode(E.DEFER_AND_FUSE):
        assert torch.tpu.eager_mode == E.DEFER_AND_FUSE
        with torch.tpu.set_eager_mode(E.DEFER_NEVER_AND_LAUNCH_BLOCKING):
            assert torch.tpu.eager_mode == E.DEFER_NEVER_AND_LAUNCH_BLOCKING
        assert torch.tpu.eager_mode == E.DEFER_AND_FUSE
    assert torch.tpu.eager_mode == previous
    try:
        torch.tpu.set_eager_mode("defer_and_fuse")  # a plain call sets it
        assert torch.tpu.eager_mode == E.DEFER_AND_FUSE
    finally:
        torch.tpu.set_eager_mode(previous)
    # Ours: torch_tpu.eager_mode is the context manager.
    with torch_tpu.eager_mode("DEFER_AND_FUSE"):
        assert torch_tpu.get_eager_mode() == E.DEFER_AND_FUSE
    assert torch.tpu.eager_mode == previous


def test_set_eager_mode_restores_after_an_exception():
    previous = torch.tpu.eager_mode
    with pytest.raises(KeyError):
        with torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_AND_FUSE):
            raise KeyError("x")
    assert torch.tpu.eager_mode == previous


@pytest.mark.parametrize("mode", ["bogus", 17, None])
def test_bad_eager_mode_raises_value_error(mode):
    previous = torch.tpu.eager_mode
    with pytest.raises(ValueError, match="eager mode"):
        torch.tpu.set_eager_mode(mode)
    with pytest.raises(ValueError, match="eager mode"):
        torch.tpu.eager_mode = mode
    assert torch.tpu.eager_mode == previous


def test_reference_launch_blocking_environment_variable():
    env = dict(os.environ, TORCH_TPU_LAUNCH_BLOCKING="1")
    env.pop("TPU_LAUNCH_BLOCKING", None)
    out = subprocess.run(
        [sys.executable, "-c", "import torch, torch_tpu; print(torch.tpu.eager_mode.name)"],
        env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("DEFER_NEVER_AND_LAUNCH_BLOCKING")


def test_precision_enum():
    P = torch.tpu.Precision
    assert {"DEFAULT", "HIGH", "HIGHEST"} <= set(P.__members__)
    a = torch.randn(32, 32)
    b = torch.randn(32, 32)
    previous = torch.tpu.get_precision()
    with torch.tpu.precision(P.HIGHEST):
        assert torch.tpu.get_precision() == "highest"
        y = (a.to("tpu") @ b.to("tpu")).cpu()
    assert torch.tpu.get_precision() == previous
    torch.testing.assert_close(y, a @ b, atol=1e-4, rtol=1e-4)
    with torch.tpu.precision(P.HIGH):
        assert torch.tpu.get_precision() == "high"
    with torch.tpu.precision("float32"):  # our strings still work
        assert torch.tpu.get_precision() == "float32"
    with pytest.raises(ValueError, match="precision"):
        torch.tpu.precision("bogus")


# ---- device and RNG functions, as torch.cuda's ---------------------------------------

def test_device_functions():
    assert torch.tpu.is_available()
    assert torch.tpu.device_count() >= 1
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    torch.tpu.set_device("tpu:0")
    torch.tpu.set_device(torch.device("tpu", 0))
    assert torch.tpu.current_device() == 0
    torch.tpu.synchronize()
    torch.tpu.synchronize(0)
    torch.tpu.empty_cache()
    assert torch.tpu.is_initialized()
    with pytest.raises(RuntimeError, match="valid device"):
        torch.tpu.set_device(99)
    with pytest.raises(ValueError, match="tpu device"):
        torch.tpu.set_device("cpu")


def test_device_of():
    x = torch.ones(2, device="tpu:0")
    with torch.tpu.device_of(x):
        assert torch.tpu.current_device() == 0
    with torch.tpu.device_of(torch.ones(2)):  # a CPU tensor leaves the current device
        assert torch.tpu.current_device() == 0


def test_manual_seed_reproduces_draws():
    torch.tpu.manual_seed(1234)
    a = torch.rand(16, device="tpu").cpu()
    torch.tpu.manual_seed(1234)
    b = torch.rand(16, device="tpu").cpu()
    assert torch.equal(a, b)
    assert torch.tpu.initial_seed() == 1234
    torch.tpu.manual_seed_all(7)
    assert torch.tpu.initial_seed() == 7
    c = torch.rand(16, device="tpu").cpu()
    assert not torch.equal(a, c)


def test_seed_picks_a_new_seed():
    torch.tpu.manual_seed(5)
    torch.tpu.seed()
    assert torch.tpu.initial_seed() != 5


def test_rng_state_round_trip():
    torch.tpu.manual_seed(3)
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.randn(8, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    b = torch.randn(8, device="tpu").cpu()
    assert torch.equal(a, b)
    states = torch.tpu.get_rng_state_all()
    assert len(states) == torch.tpu.device_count()
    with pytest.raises(ValueError, match="uint8"):
        torch.tpu.set_rng_state(torch.zeros(3))


def test_default_generators():
    gens = torch.tpu.default_generators
    assert isinstance(gens, tuple) and len(gens) == torch.tpu.device_count()
    g = gens[0]
    assert isinstance(g, torch.Generator) and g.device.type == "tpu"
    g.manual_seed(99)
    assert torch.tpu.initial_seed() == 99
    a = torch.rand(4, device="tpu").cpu()
    torch.tpu.manual_seed(99)
    assert torch.equal(torch.rand(4, device="tpu").cpu(), a)


def test_amp_dtypes():
    assert torch.bfloat16 in torch.tpu.get_amp_supported_dtype()


# ---- fused optimizers -------------------------------------------------------------------

def _params(seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(5, 3, generator=g, dtype=dtype), torch.randn(7, generator=g, dtype=dtype),
            torch.randn((), generator=g, dtype=dtype)]


def _train(device, make_opt, steps=4, dtype=torch.float32):
    params = [p.to(device).requires_grad_() for p in _params(dtype=dtype)]
    opt = make_opt(params)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g, dtype=dtype).to(device)
        opt.step()
    return [p.detach() for p in params], opt


OPTIMIZERS = {
    "adamw": lambda ps, **kw: torch.optim.AdamW(ps, lr=0.01, **kw),
    "adamw_wd_amsgrad": lambda ps, **kw: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1,
                                                          amsgrad=True, **kw),
    "adamw_maximize": lambda ps, **kw: torch.optim.AdamW(ps, lr=0.02, maximize=True,
                                                        betas=(0.8, 0.9), **kw),
    "adamw_tensor_lr": lambda ps, **kw: torch.optim.AdamW(ps, lr=torch.tensor(0.01),
                                                         weight_decay=0.05, **kw),
    "adam": lambda ps, **kw: torch.optim.Adam(ps, lr=0.01, **kw),
    "adam_wd_amsgrad_maximize": lambda ps, **kw: torch.optim.Adam(
        ps, lr=0.01, weight_decay=0.1, amsgrad=True, maximize=True, eps=1e-6, **kw),
    "sgd": lambda ps, **kw: torch.optim.SGD(ps, lr=0.1, **kw),
    "sgd_momentum": lambda ps, **kw: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1,
                                                    weight_decay=0.01, **kw),
    "sgd_nesterov_maximize": lambda ps, **kw: torch.optim.SGD(
        ps, lr=0.05, momentum=0.9, nesterov=True, maximize=True, **kw),
    "sgd_tensor_lr": lambda ps, **kw: torch.optim.SGD(ps, lr=torch.tensor(0.1), momentum=0.5,
                                                     **kw),
    "adagrad": lambda ps, **kw: torch.optim.Adagrad(ps, lr=0.1, lr_decay=0.01,
                                                   weight_decay=0.05, **kw),
    "adagrad_maximize_tensor_lr": lambda ps, **kw: torch.optim.Adagrad(
        ps, lr=torch.tensor(0.1), maximize=True, **kw),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_fused_optimizer_matches_cpu(name, mode):
    make = OPTIMIZERS[name]
    expected, _ = _train("cpu", lambda ps: make(ps, fused=True))
    unfused, _ = _train("cpu", lambda ps: make(ps, foreach=False))
    with torch_tpu.eager_mode(mode):
        actual, opt = _train("tpu", lambda ps: make(ps, fused=True))
    assert opt.defaults["fused"]
    assert_same(actual, expected, atol=1e-5, rtol=1e-5)
    assert_same(actual, unfused, atol=1e-5, rtol=1e-5)
    for state in opt.state.values():  # optimizer state lives on the device
        for v in state.values():
            if isinstance(v, torch.Tensor):
                assert v.device.type == "tpu"


def test_fused_adamw_bf16_params():
    make = OPTIMIZERS["adamw_wd_amsgrad"]
    expected, _ = _train("cpu", lambda ps: make(ps, fused=True), dtype=torch.bfloat16)
    actual, _ = _train("tpu", lambda ps: make(ps, fused=True), dtype=torch.bfloat16)
    assert_same(actual, expected, atol=1e-2, rtol=1e-2)


def _fused_args(device, found_inf):
    ps = _params(2)
    lists = [[t.clone().to(device) for t in ps] for _ in range(5)]
    g = torch.Generator().manual_seed(3)
    for lst in lists[2:]:
        for t in lst:
            t.copy_(torch.rand(t.shape, generator=g).to(device))
    steps = [torch.tensor(3.0).to(device) for _ in ps]
    scale = torch.tensor([4.0]).to(device)
    inf = torch.tensor([found_inf]).to(device)
    return lists, steps, scale, inf


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("found_inf", [0.0, 1.0])
@pytest.mark.parametrize("op", ["adamw", "adam"])
def test_fused_adam_grad_scale_and_found_inf(op, found_inf, mode):
    fn = getattr(torch, f"_fused_{op}_")

    def run(device):
        lists, steps, scale, inf = _fused_args(device, found_inf)
        fn(*lists, steps, lr=0.01, beta1=0.9, beta2=0.99, weight_decay=0.01, eps=1e-8,
           amsgrad=True, maximize=False, grad_scale=scale, found_inf=inf)
        return lists

    expected = run("cpu")
    with torch_tpu.eager_mode(mode):
        actual = run("tpu")
    assert_same(actual, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("found_inf", [0.0, 1.0])
def test_fused_sgd_grad_scale_and_found_inf(found_inf):
    def run(device):
        lists, _, scale, inf = _fused_args(device, found_inf)
        params, grads, bufs = lists[:3]
        torch._fused_sgd_(params, grads, bufs, weight_decay=0.01, momentum=0.9, lr=0.1,
                          dampening=0.0, nesterov=False, maximize=False, is_first_step=False,
                          grad_scale=scale, found_inf=inf)
        return params, grads, bufs

    assert_same(run("tpu"), run("cpu"), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("found_inf", [0.0, 1.0])
def test_fused_adagrad_grad_scale_and_found_inf(found_inf):
    def run(device):
        lists, steps, scale, inf = _fused_args(device, found_inf)
        params, grads, sums = lists[:3]
        torch._fused_adagrad_(params, grads, sums, steps, lr=0.1, lr_decay=0.01,
                              weight_decay=0.01, eps=1e-10, maximize=True,
                              grad_scale=scale, found_inf=inf)
        return params, grads, sums, steps

    assert_same(run("tpu"), run("cpu"), atol=1e-5, rtol=1e-5)


def test_fused_optimizer_bad_input_raises():
    p = torch.zeros(3, device="tpu")
    with pytest.raises(RuntimeError):
        torch._fused_adamw_([p], [torch.zeros(4, device="tpu")], [p.clone()], [p.clone()], [],
                            [torch.tensor(1.0, device="tpu")], lr=0.1, beta1=0.9, beta2=0.99,
                            weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fused_opt", ["adamw", "sgd"])
def test_fused_step_with_a_scheduled_lr_compiles_once(fused_opt, mode):
    params = [torch.randn(4, 3).to("tpu").requires_grad_()]
    make = {"adamw": lambda: torch.optim.AdamW(params, lr=0.1, fused=True),
            "sgd": lambda: torch.optim.SGD(params, lr=0.1, momentum=0.9, fused=True)}
    opt = make[fused_opt]()
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
    grad = torch.ones(4, 3).to("tpu")

    def step():
        params[0].grad = grad.clone()
        opt.step()
        sched.step()
        torch.tpu.synchronize()

    with torch_tpu.eager_mode(mode):
        for _ in range(3):  # warm-up: first step, momentum's first step
            step()
        before = torch_tpu.cache_stats()["misses"]
        for _ in range(4):
            step()
        assert torch_tpu.cache_stats()["misses"] == before
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5 ** 7)
