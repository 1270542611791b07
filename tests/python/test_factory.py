"""Factories on tpu produce exactly CPU's dtypes and values."""
import pytest
import torch

from conftest import assert_same, check


def same(fn, **tol):
    """fn(device) on tpu equals fn(device) on CPU."""
    assert_same(fn("tpu"), fn("cpu"), **tol)


DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32, torch.uint8,
          torch.bool]


@pytest.mark.parametrize("dtype", DTYPES)
def test_zeros_ones_full(dtype):
    same(lambda d: torch.zeros(2, 3, dtype=dtype, device=d))
    same(lambda d: torch.ones(2, 3, dtype=dtype, device=d))
    same(lambda d: torch.full((3,), 1 if dtype == torch.bool else 7, dtype=dtype, device=d))


def test_full_infers_dtype_and_rounds_like_cpu():
    same(lambda d: torch.full((2,), 3, device=d))            # int64
    same(lambda d: torch.full((2,), True, device=d))         # bool
    same(lambda d: torch.full((2,), 0.1, device=d))          # float32
    same(lambda d: torch.full((2,), 0.1, dtype=torch.float64, device=d))
    same(lambda d: torch.full((2,), 2**40 + 1, device=d))    # exact int64
    same(lambda d: torch.full((2,), float("nan"), device=d))
    same(lambda d: torch.full((2,), -float("inf"), dtype=torch.float16, device=d))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_like_factories(dtype):
    x = torch.ones(2, 3, dtype=dtype)
    check(torch.zeros_like, x)
    check(torch.ones_like, x)
    check(lambda t: torch.full_like(t, 1), x)
    check(lambda t: torch.full_like(t, 5, dtype=torch.float64), x)
    check(lambda t: torch.empty_like(t).shape, x)
    check(lambda t: t.new_zeros(4), x)
    check(lambda t: t.new_ones((1, 2)), x)
    check(lambda t: t.new_full((2,), 1), x)
    assert torch.empty_like(x.to("tpu")).dtype == dtype


def test_empty_shapes():
    same(lambda d: torch.zeros(0, 3, device=d))
    same(lambda d: torch.full((2, 0), 1.5, device=d))
    same(lambda d: torch.arange(0, device=d))
    same(lambda d: torch.linspace(0, 1, 0, device=d))
    same(lambda d: torch.eye(0, device=d))


def test_fill_and_zero_in_place_on_views():
    def fn(t):
        t = t.clone()
        t[1:3].fill_(7.5)
        t[:, ::2].zero_()
        t[0].fill_(torch.tensor(-2.0, device=t.device))
        return t
    check(fn, torch.randn(4, 5))
    check(lambda t: t.clone().fill_(255), torch.zeros(3, dtype=torch.uint8))
    check(lambda t: t.clone().fill_(2.7), torch.zeros(3, dtype=torch.int64))
    check(lambda t, v: t.clone().fill_(v), torch.zeros(3), torch.tensor(1.25))
    check(lambda t: torch.fill(t, 3), torch.zeros(2, 2))


INT_RANGES = [(0, 10, 1), (10, -10, -3), (-7, 8, 4), (2**40, 2**40 + 2**35, 2**30)]


@pytest.mark.parametrize("start,end,step", INT_RANGES)
def test_arange_integers(start, end, step):
    same(lambda d: torch.arange(start, end, step, device=d))
    same(lambda d: torch.arange(start, end, step, dtype=torch.float32, device=d))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.int32, torch.uint8])
def test_arange_dtypes(dtype):
    same(lambda d: torch.arange(5, dtype=dtype, device=d))
    same(lambda d: torch.arange(1, 4, 0.5 if dtype.is_floating_point else 2, dtype=dtype,
                                device=d))


def test_arange_float_steps():
    same(lambda d: torch.arange(5.0, device=d))                 # float32 by inference
    same(lambda d: torch.arange(0, 1, 0.25, device=d))
    same(lambda d: torch.arange(-3, 3, 0.5, device=d))
    # A step that is inexact in float32 is taken in double, like CPU.
    same(lambda d: torch.arange(0, 0.7, 0.1, device=d))
    same(lambda d: torch.arange(0, 0.7, 0.1, dtype=torch.float64, device=d))
    same(lambda d: torch.arange(0.5, 5, 1, dtype=torch.int64, device=d))
    # Long ranges: CPU's vectorized kernel rounds per block; within an ulp.
    same(lambda d: torch.arange(-1.7, 200.3, 0.37, device=d))


def test_arange_out_resizes():
    def fn(d):
        out = torch.empty(0, dtype=torch.int64, device=d)
        torch.arange(3, 9, out=out)
        return out
    same(fn)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.int64, torch.uint8])
def test_linspace(dtype):
    lo = 1 if dtype == torch.uint8 else -1.3
    same(lambda d: torch.linspace(lo, 20.9, 7, dtype=dtype, device=d))
    same(lambda d: torch.linspace(lo, 2.9, 1, dtype=dtype, device=d))
    same(lambda d: torch.linspace(5, lo, 10, dtype=dtype, device=d))


def test_linspace_long_and_default_dtype():
    same(lambda d: torch.linspace(-1.3, 2.9, 100, device=d))
    same(lambda d: torch.linspace(0, 1, 11, device=d))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int32])
def test_logspace(dtype):
    same(lambda d: torch.logspace(-1.3 if dtype.is_floating_point else 0, 2.9, 7, dtype=dtype,
                                  device=d))
    same(lambda d: torch.logspace(0, 6, 7, base=2, dtype=dtype, device=d))
    same(lambda d: torch.logspace(2, 3, 1, dtype=dtype, device=d))


def test_logspace_float64_within_an_ulp():
    # XLA's f64 pow is not always correctly rounded, glibc's is.
    same(lambda d: torch.logspace(-1.3, 2.9, 7, dtype=torch.float64, device=d), rtol=1e-15,
         atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_eye(dtype):
    same(lambda d: torch.eye(3, dtype=dtype, device=d))
    same(lambda d: torch.eye(2, 5, dtype=dtype, device=d))
    same(lambda d: torch.eye(4, 1, dtype=dtype, device=d))


def test_tensor_and_scalar_tensor():
    same(lambda d: torch.tensor([[1, 2], [3, 4]], device=d))
    same(lambda d: torch.tensor([1.5, -2.25], dtype=torch.bfloat16, device=d))
    same(lambda d: torch.scalar_tensor(3.7, device=d))
    same(lambda d: torch.scalar_tensor(3, dtype=torch.int32, device=d))
    same(lambda d: torch.as_tensor([True, False], device=d))


def test_dtype_conversions_of_factories():
    same(lambda d: torch.arange(6, device=d).to(torch.float16).reshape(2, 3))
    same(lambda d: torch.ones(3, device=d).to(torch.int8))
    same(lambda d: torch.zeros(2, device=d, dtype=torch.float64).to(torch.bfloat16))


def test_efficientzerotensor_factory():
    z = torch.ops.aten._efficientzerotensor([2, 3], dtype=torch.float16, device="tpu")
    assert z.device.type == "tpu" and z.dtype == torch.float16
    assert torch.equal(z.cpu(), torch.zeros(2, 3, dtype=torch.float16))
