"""Grid sampling (2-d bicubic, 3-d) and antialiased bilinear upsampling on tpu
against CPU, forward and backward."""
import pytest
import torch
import torch.nn.functional as F

from conftest import check, check_grad


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_bicubic(padding):
    x, grid = torch.randn(1, 2, 5, 4), torch.rand(1, 3, 4, 2) * 2.6 - 1.3
    check_grad(lambda x, g: F.grid_sample(x, g, mode="bicubic", padding_mode=padding,
                                          align_corners=False),
               x, grid, grad=torch.randn(1, 2, 3, 4), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_3d(mode, align):
    x, grid = torch.randn(1, 2, 3, 4, 5), torch.rand(1, 2, 3, 2, 3) * 2.6 - 1.3
    check_grad(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode="reflection",
                                          align_corners=align),
               x, grid, grad=torch.randn(1, 2, 2, 3, 2), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("size,align", [((3, 4), False), ((7, 2), True)])
def test_upsample_bilinear_antialias(size, align):
    x = torch.randn(1, 2, 8, 5)
    fn = lambda x: F.interpolate(x, size=size, mode="bilinear", antialias=True,
                                 align_corners=align)
    check(fn, x, atol=1e-6, rtol=1e-5)
    check_grad(fn, x, grad=torch.randn(1, 2, *size), atol=1e-6, rtol=1e-5)
