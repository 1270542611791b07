"""Pointwise ops on tpu against CPU: floor division's rounding (16-bit and
f32), sgn's backward, complex and polar."""
import pytest
import torch

from conftest import check, check_grad


def test_floor_divide_16bit_rounds_once():
    # 16-bit quotients computed in f32 and rounded once, as on CPU: here
    # the 16-bit quotient would round up to an integer before the floor.
    for dtype, x0, y0 in ((torch.bfloat16, [8.625, -8.625], [1.7265625, -0.06982421875]),
                          (torch.float16, [8.0390625, 13.09375], [-0.200927734375, 0.873046875])):
        x = torch.tensor(x0 + [-7.0, 0.5, -0.0, 3.0, 1.0], dtype=dtype)
        y = torch.tensor(y0 + [2.0, -3.0, 1.0, 0.0, -0.0], dtype=dtype)
        check(torch.floor_divide, x, y)
        check(lambda a, b: torch.div(a, b, rounding_mode="floor"), x, y)


def test_floor_divide_float32_matches_cpu_formula():
    x = torch.tensor([7.0, -7.0, 1e-30, -0.25, 5.0, float("nan"), float("inf")])
    y = torch.tensor([0.1, 0.1, 3.0, 8.0, -0.5, 1.0, 2.0])
    check(torch.floor_divide, x, y)


def test_sgn_backward_uses_zero_tensor():
    x = torch.tensor([-2.0, 0.0, 3.0])
    check_grad(torch.sgn, x, grad=torch.tensor([1.0, 2.0, 3.0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_complex_and_polar_broadcast_their_parts(dtype):
    torch.manual_seed(3)
    re, im = torch.randn(3, 1, dtype=dtype), torch.randn(4, dtype=dtype)
    check(torch.complex, re, im)
    check(torch.polar, re.abs(), im)
    inf, nan = float("inf"), float("nan")
    special = torch.tensor([0.0, -0.0, inf, nan, 2.0], dtype=dtype)
    check(torch.complex, special, special.flip(0))
    check(torch.polar, special.abs(), torch.tensor([0.0, 3.0, 1.0, 0.5, nan], dtype=dtype))
