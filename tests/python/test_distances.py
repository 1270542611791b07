"""cdist's backward on tpu against CPU: empty batches and values."""
import torch

from conftest import check_grad


def test_cdist_backward_empty_batch():
    for s1, s2 in (((1, 4, 5), (0, 3, 5)), ((0, 4, 5), (3, 5))):
        x1, x2 = torch.randn(s1), torch.randn(s2)
        out = torch.cdist(x1, x2)
        check_grad(lambda a, b: torch.cdist(a, b), x1, x2, grad=torch.ones(out.shape))


def test_cdist_backward_values():
    torch.manual_seed(0)
    x1, x2 = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    check_grad(lambda a, b: torch.cdist(a, b, p=2.0), x1, x2,
               grad=torch.randn(2, 3, 5), atol=1e-4, rtol=1e-4)
