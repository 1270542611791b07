import torch

from conftest import check


def test_add_scalar_and_tensor():
    x, y = torch.randn(4, 5), torch.randn(5)
    check(lambda a, b: a + b * 2 - 1, x, y)


def test_view_inplace_updates_base():
    x = torch.randn(4, 5)
    t = x.to("tpu")
    t[1:3].mul_(10)
    x[1:3].mul_(10)
    torch.testing.assert_close(t.cpu(), x)
