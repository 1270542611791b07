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


@pytest.mark.parametrize("mode, antialias", [("bilinear", False), ("bicubic", False), ("bilinear", True)])
@pytest.mark.parametrize("size, align_corners", [((31, 17), False), ((7, 9), True), ((40, 52), False)])
def test_uint8_interpolation_rounds_and_clamps_each_pass(mode, antialias, size, align_corners):
    """CPU resamples uint8 images separably, each pass rounded and clamped to
    uint8 (bicubic overshoot is clipped after the first pass): the tpu
    truncated, and kept the first pass in float (bicubic was off by up to 29).
    CPU's weights are fixed-point, so a few pixels still differ by 1."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (2, 3, 20, 26), dtype=torch.uint8, generator=g)
    import torch.nn.functional as F
    kw = dict(size=size, mode=mode, align_corners=align_corners, antialias=antialias)
    want = F.interpolate(x, **kw)
    got = F.interpolate(x.to("tpu"), **kw).cpu()
    diff = (want.int() - got.int()).abs()
    assert got.dtype == torch.uint8
    assert diff.max() <= 1 and (diff > 0).float().mean() < 0.06


@pytest.mark.parametrize("dtype", NARROW)
def test_bincount_of_every_integer_type(dtype):
    """A uint8 input was passed on as an index, which PyTorch reads as a mask."""
    x = ints(dtype, lo=0, hi=20)
    w = torch.rand(x.numel(), generator=torch.Generator().manual_seed(1))
    assert torch.equal(torch.bincount(x.to("tpu")).cpu(), torch.bincount(x))
    torch.testing.assert_close(torch.bincount(x.to("tpu"), w.to("tpu"), minlength=30).cpu(),
                               torch.bincount(x, w, minlength=30))
