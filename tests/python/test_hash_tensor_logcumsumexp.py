"""hash_tensor (a reduction) and logcumsumexp (a scan) on tpu, against CPU."""
import pytest
import torch

from conftest import check, check_grad


# -- hash_tensor --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64,
                                   torch.bool, torch.uint8])
def test_hash_tensor(dtype):
    torch.manual_seed(3)
    x = (torch.randn(3, 4) * 50).to(dtype)
    check(torch.hash_tensor, x)
    check(lambda t: torch.hash_tensor(t, 1, keepdim=True), x)
    check(lambda t: torch.hash_tensor(t, [0]), x)


def test_hash_tensor_negative_and_empty():
    check(torch.hash_tensor, torch.tensor([-1, -7, 3], dtype=torch.int8))
    check(torch.hash_tensor, torch.tensor([-0.0, 1.5, float("nan")]))
    check(lambda t: torch.hash_tensor(t, 0), torch.empty(3, 0))


# -- logcumsumexp -------------------------------------------------------------------

@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_logcumsumexp_backward_large(scale):
    torch.manual_seed(4)
    x = torch.randn(4, 6, 3) * scale
    check(lambda t: torch.logcumsumexp(t, 1), x)
    check_grad(lambda t: torch.logcumsumexp(t, 1), x, grad=torch.randn(4, 6, 3))


def test_logcumsumexp_special_values():
    inf, nan = float("inf"), float("nan")
    check(lambda t: torch.logcumsumexp(t, 0), torch.tensor([-inf, -inf, 1.0, inf, 2.0, inf, nan, 3.0]))
    check(lambda t: torch.logcumsumexp(t, -1), torch.tensor([[-inf, 0.0], [5.0, 5.0]]).bfloat16())
    check(lambda t: torch.logcumsumexp(t, 0), torch.tensor(2.0))
