"""uint8, int8 and int16 (the OpInfo suite runs int64, int32 and bool; a
one-off sweep of every OpInfo's forward in these found the cases below)."""
import pytest
import torch

from conftest import to_tpu

NARROW = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def ints(dtype, n=500, seed=0, lo=None, hi=100):
    g = torch.Generator().manual_seed(seed)
    lo = (0 if dtype == torch.uint8 else -100) if lo is None else lo
    return torch.randint(lo, hi, (n,), dtype=dtype, generator=g)


@pytest.mark.parametrize("dtype", NARROW)
def test_gcd_lcm_bit_exact(dtype):
    """uint8 failed to compile (stablehlo.abs takes no unsigned type); lcm of
    8- and 16-bit types overflowing the type wraps as CPU's (which computes
    |a / g * b| in C++'s int, then narrows)."""
    a, b = ints(dtype), ints(dtype, seed=1)
    for fn in (torch.gcd, torch.lcm):
        assert torch.equal(fn(*to_tpu((a, b))).cpu(), fn(a, b))
    if dtype in (torch.int32, torch.int64):
        big = ints(dtype, seed=2, lo=-2**30, hi=2**30)
        assert torch.equal(torch.lcm(*to_tpu((big, b))).cpu(), torch.lcm(big, b))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bool])
def test_abs_of_unsigned_and_bool_is_itself(dtype):
    x = ints(torch.uint8) if dtype == torch.uint8 else ints(torch.uint8) > 50
    if dtype == torch.bool:
        with pytest.raises(RuntimeError):
            torch.abs(x)
        return
    assert torch.equal(torch.abs(x.to("tpu")).cpu(), torch.abs(x))
    assert torch.equal(torch.linalg.vector_norm(x.to("tpu").float(), 1).cpu(),
                       torch.linalg.vector_norm(x.float(), 1))
