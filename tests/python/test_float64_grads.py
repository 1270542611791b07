"""float64 gradients at float64 precision: a backward lowering that rounds a
constant or an intermediate to float32 shows as a 1e-8 relative error, far
inside float32 tolerances (found by a float64 sweep of OpInfo gradients)."""
import pytest
import torch

from conftest import to_tpu


def grads(fn, args, cot):
    def run(device):
        xs = [a.detach().to(device).requires_grad_() for a in args]
        return torch.autograd.grad(fn(*xs), xs, cot.to(device))
    return run("tpu"), run("cpu")


@pytest.mark.parametrize("n", [3, 6, 7, 10])
def test_layer_norm_input_gradient_keeps_double_precision(n):
    """The input gradient scaled by 1/n rounded to float (3e-8 off for n = 6)."""
    g = torch.Generator().manual_seed(n)
    x, w, b = (torch.randn(2, n, generator=g, dtype=torch.float64) for _ in range(3))
    cot = torch.randn(2, n, generator=g, dtype=torch.float64)
    got, want = grads(lambda x, w, b: torch.nn.functional.layer_norm(x, (n,), w[0], b[0], 0.5),
                      (x, w, b), cot)
    for a, e in zip(got, want):
        torch.testing.assert_close(a.cpu(), e, atol=1e-13, rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_hardsigmoid_backward_is_bit_exact(dtype):
    """CPU multiplies by 1/6 rounded to float in every dtype (float64 too)."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4000, generator=g) * 2).to(dtype)
    dy = torch.randn(4000, generator=g).to(dtype)
    want = torch.ops.aten.hardsigmoid_backward(dy, x)
    got = torch.ops.aten.hardsigmoid_backward(*to_tpu((dy, x)))
    assert torch.equal(got.cpu(), want)
