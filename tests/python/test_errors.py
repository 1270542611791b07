"""Errors are as clear as on CPU, say what helps, and leave the process usable."""
import warnings

import pytest
import torch

import torch_tpu
from conftest import assert_same

# Ops with no tpu lowering, for the fallback tests; the first one still
# unlowered is used, so lowering one of them does not break these tests.
UNLOWERED = [
    ("aten::histc", lambda x: torch.histc(x, bins=4, min=-2, max=2)),
    ("aten::special_zeta", lambda x: torch.special.zeta(x.abs() + 2, 3.0)),
    ("aten::_fft_r2c", lambda x: torch.fft.rfft(x).abs()),
]


def unlowered_op():
    native = set(torch_tpu.native_ops())
    for name, fn in UNLOWERED:
        if name.split("::")[1] not in native and name not in native:
            return name, fn
    pytest.skip("every candidate op is lowered now; add a new one to UNLOWERED")


@pytest.fixture(autouse=True)
def process_keeps_working():
    """After every test, errors included, a fresh op still runs correctly."""
    yield
    x = torch.tensor([1.0, 2.0])
    assert torch.equal((x.to("tpu") * 3 + 1).cpu(), x * 3 + 1)


def cpu_error(fn, *args):
    with pytest.raises(Exception) as info:
        fn(*args)
    return info


# Shape errors are found by PyTorch's meta functions; the message is the CPU
# kernel's own for the same call (the tpu asks the CPU on the error path).

def test_shape_mismatch_in_add():
    a, b = torch.randn(2, 3), torch.randn(4)
    expected = cpu_error(torch.add, a, b)
    with pytest.raises(RuntimeError) as info:
        torch.add(a.to("tpu"), b.to("tpu"))
    assert type(info.value) is type(expected.value)
    assert str(info.value) == str(expected.value)


def test_inplace_shape_mismatch():
    a, b = torch.randn(3), torch.randn(2, 3)
    expected = cpu_error(a.add_, b)
    with pytest.raises(RuntimeError) as info:
        a.to("tpu").add_(b.to("tpu"))
    assert type(info.value) is type(expected.value)
    message = str(info.value)
    assert "doesn't match the broadcast shape" in message and "3" in message, message


def test_mm_shape_mismatch():
    a, b = torch.randn(2, 3), torch.randn(4, 5)
    expected = cpu_error(torch.mm, a, b)
    with pytest.raises(RuntimeError) as info:
        torch.mm(a.to("tpu"), b.to("tpu"))
    assert type(info.value) is type(expected.value)
    assert str(info.value) == str(expected.value)  # "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"


def test_mixing_cpu_and_tpu_names_both_devices():
    a, b = torch.randn(3).to("tpu"), torch.randn(3)
    for fn in (lambda: a + b, lambda: b + a, lambda: a.mul_(b)):
        with pytest.raises(RuntimeError) as info:
            fn()
        message = str(info.value)
        assert "tpu" in message and "cpu" in message, message


def test_invalid_device_index():
    for fn in (lambda: torch.zeros(2, device="tpu:7"),
               lambda: torch.empty(2, device="tpu:7"),
               lambda: torch.randn(2).to("tpu:7")):
        with pytest.raises((RuntimeError, IndexError), match="tpu:7"):
            fn()


def test_unsupported_op_names_op_and_fallback_switch():
    name, fn = unlowered_op()
    x = torch.linspace(-1.5, 1.5, 8)
    with pytest.raises(NotImplementedError) as info:
        fn(x.to("tpu"))
    message = str(info.value)
    assert name.split("::")[1] in message, message
    assert "TORCH_TPU_CPU_FALLBACK" in message


def test_cpu_fallback_runs_op_warns_once_and_counts():
    name, fn = unlowered_op()
    key = name.split("::")[1]
    x = torch.linspace(-1.5, 1.5, 8)
    before = {k: v for k, v in torch_tpu.fallback_counts().items() if key in k}
    torch_tpu.set_cpu_fallback(True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = fn(x.to("tpu"))
            second = fn(x.to("tpu"))
        assert_same(first, fn(x))
        assert_same(second, fn(x))
    finally:
        torch_tpu.set_cpu_fallback(False)
    after = {k: v for k, v in torch_tpu.fallback_counts().items() if key in k}
    assert sum(after.values()) - sum(before.values()) >= 2, after
    ours = [w for w in caught if key in str(w.message)]
    if not before:  # the warning is given once per op per process
        assert len(ours) == 1, [str(w.message) for w in caught]
    assert not torch_tpu._C._cpu_fallback_enabled()
    with pytest.raises(NotImplementedError):
        fn(x.to("tpu"))


@pytest.mark.parametrize("mode", ["bogus", "defer", 17, -1, None])
def test_invalid_eager_mode_raises_value_error(mode):
    previous = torch_tpu.get_eager_mode()
    with pytest.raises(ValueError, match="eager mode"):
        torch_tpu.set_eager_mode(mode)
    with pytest.raises(ValueError):
        with torch_tpu.eager_mode(mode):
            pass
    assert torch_tpu.get_eager_mode() == previous


def test_valid_eager_mode_names():
    previous = torch_tpu.get_eager_mode()
    try:
        for name in ("defer_and_fuse", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "defer_never"):
            torch_tpu.set_eager_mode(name)
            assert torch_tpu.get_eager_mode().name == name.upper()
            x = torch.tensor([1.0, -2.0])
            assert_same(x.to("tpu") * 2 - 1, x * 2 - 1)
    finally:
        torch_tpu.set_eager_mode(previous)


def test_error_inside_fused_mode_leaves_engine_usable():
    a, b = torch.randn(2, 3), torch.randn(4)
    with torch_tpu.eager_mode("defer_and_fuse"):
        pending = a.to("tpu") + 1
        with pytest.raises(RuntimeError):
            pending + b.to("tpu")
        assert_same(pending * 2, (a + 1) * 2)


def test_unsupported_dtype_is_a_clear_error():
    x = torch.tensor([1, 2], dtype=torch.float8_e4m3fn)
    with pytest.raises((TypeError, RuntimeError), match="tpu"):
        x.to("tpu")


def _cpu_check_cases():
    def long(n, d):
        return torch.empty(n, dtype=torch.long, device=d)
    return {
        "masked_select into its input": lambda d: (lambda x: torch.masked_select(
            x, torch.ones(6, dtype=torch.bool, device=d), out=x))(torch.randn(6, device=d)),
        "masked_select into an expanded tensor": lambda d: torch.masked_select(
            torch.randn(6, device=d), torch.ones(6, dtype=torch.bool, device=d),
            out=torch.empty(1, device=d).expand(3)),
        "index.Tensor_out into its input": lambda d: (lambda x: torch.ops.aten.index.Tensor_out(
            x, [torch.tensor([0, 1], device=d)], out=x))(torch.randn(6, device=d)),
        "kthvalue into its input": lambda d: (lambda x: torch.kthvalue(x, 5, out=(x, long((), d))))(
            torch.randn(10, device=d)),
        "masked_scatter with a uint8 mask": lambda d: torch.randn(1, 3, device=d).masked_scatter(
            torch.ones(1, 3, dtype=torch.uint8, device=d), torch.randn(3, 4, device=d)),
        "complex of float32 and float64": lambda d: torch.complex(
            torch.randn(3, device=d), torch.randn(3, dtype=torch.float64, device=d)),
        "complex into the wrong complex dtype": lambda d: torch.complex(
            torch.randn(3, dtype=torch.float64, device=d), torch.randn(3, dtype=torch.float64, device=d),
            out=torch.empty(3, dtype=torch.complex64, device=d)),
        "aminmax into a float64 max": lambda d: torch.aminmax(
            torch.randn(4, 4, device=d), dim=0,
            out=(torch.empty(4, device=d), torch.empty(4, dtype=torch.float64, device=d))),
        "as_strided_scatter out of bounds": lambda d: torch.as_strided_scatter(
            torch.randn(4, 4, device=d), torch.randn(2, 2, device=d), [2, 2], [200, 200], 0),
        "multinomial of int64": lambda d: torch.multinomial(torch.ones(1, 2, dtype=torch.long, device=d), 2),
        "multinomial into float64": lambda d: torch.multinomial(
            torch.ones(1, 2, dtype=torch.float64, device=d), 2,
            out=torch.empty(1, 2, dtype=torch.float64, device=d)),
        "histogramdd with too few bins": lambda d: torch.histogramdd(torch.randn(5, 6, device=d), [1] * 5),
        "bucketize on 2-D boundaries": lambda d: torch.bucketize(
            torch.randn(5, 5, 5, device=d), torch.randn(5, 5, device=d)),
        "index_add of a misshapen source": lambda d: torch.index_add(
            torch.randn(3, 2, device=d), 0, torch.tensor([0, 1], device=d), torch.randn(2, device=d)),
    }


@pytest.mark.parametrize("name", list(_cpu_check_cases()))
def test_cpu_kernel_checks_raise_as_on_cpu(name):
    """Checks CPU's kernels make that PyTorch's meta functions leave out
    (found by a sweep of OpInfo's error inputs): overlapping out= tensors,
    kernel dtypes, shapes and bounds. The tpu accepted each of these."""
    fn = _cpu_check_cases()[name]
    want = cpu_error(fn, "cpu")
    with pytest.raises(type(want.value)) as got:
        r = fn("tpu")
        torch.tpu.synchronize()
        del r
    assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]


@pytest.mark.parametrize("probs, message", [
    ([[1.0, float("nan")]], "probability tensor contains either `inf`, `nan` or element < 0"),
    ([[1.0, float("inf")]], "probability tensor contains either `inf`, `nan` or element < 0"),
    ([[1.0, -1.0]], "probability tensor contains either `inf`, `nan` or element < 0"),
    ([[0.5, 0.5], [0.0, 0.0]], "invalid multinomial distribution"),
])
@pytest.mark.parametrize("replacement", [False, True])
def test_multinomial_checks_probabilities_on_the_device(probs, message, replacement):
    """CPU rejects NaN, infinite, negative and all-zero rows; the tpu checks
    the same on the device and raises at the next host read."""
    p = torch.tensor(probs)
    with pytest.raises(RuntimeError, match="probability|invalid multinomial"):
        torch.multinomial(p, 1, replacement)
    with pytest.raises(RuntimeError, match=message.replace("(", r"\(")):
        torch.multinomial(p.to("tpu"), 1, replacement).cpu()
    good = torch.multinomial(torch.tensor([[0.0, 1.0, 0.0]], device="tpu"), 1, replacement)
    assert good.cpu().tolist() == [[1]]
