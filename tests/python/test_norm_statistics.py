"""Layer, batch and group normalization on tpu against CPU: single-element
backward numerics and the saved statistics (dtypes as CPU returns them, not as
the meta functions say)."""
import pytest
import torch

from conftest import check, check_grad


# -- normalization numerics ---------------------------------------------------------

@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_single_element_backward(affine):
    # CPU's gradient is the exact rounding noise of its formula; it is matched.
    torch.manual_seed(5)
    x, dy = torch.randn(8, 1) * 3, torch.randn(8, 1) * 30
    w, b = (torch.randn(1), torch.randn(1)) if affine else (None, None)

    def run(t, g, *wb):
        out, mean, rstd = torch.ops.aten.native_layer_norm(t, [1], *wb, 1e-5)
        return (out, mean, rstd) + tuple(
            torch.ops.aten.native_layer_norm_backward(g, t, [1], mean, rstd, *wb, [True, False, False]))

    args = (x, dy, w, b) if affine else (x, dy, None, None)
    check(lambda *a: run(*a)[:4], *args, atol=0, rtol=0)



def test_layer_norm_single_element_weight_grad():
    # CPU's weight gradient uses a fused multiply-add: a x - a mean keeps the
    # rounding error of a x, which is not zero; it is matched exactly.
    x = torch.tensor([-8.478425979614258])
    check_grad(lambda t, w: torch.native_layer_norm(t, (1,), w, None, 1e-5)[0], x, x.clone(),
               grad=torch.tensor([0.37]), atol=0, rtol=0)


# -- saved statistics follow CPU, not the meta functions ----------------------------

@pytest.mark.parametrize("dtype,pdtype", [(torch.bfloat16, torch.bfloat16),
                                          (torch.float16, torch.float32),
                                          (torch.float32, torch.float32)])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_saved_stats(dtype, pdtype, training):
    torch.manual_seed(7)
    x = torch.randn(3, 2, 4).to(dtype)
    w, b, rm, rv = torch.randn(2), torch.randn(2), torch.zeros(2), torch.ones(2)
    params = [t.to(pdtype) for t in (w, b, rm, rv)]
    check(lambda t, *p: torch.ops.aten.native_batch_norm(t, *p, training, 0.1, 1e-5), x, *params,
          atol=1e-2, rtol=1e-2)
    check(lambda t, *p: torch.ops.aten._native_batch_norm_legit_no_training(t, *p, 0.1, 1e-5)[1:],
          x, *params)


@pytest.mark.parametrize("dtype,pdtype", [(torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32)])
def test_layer_and_group_norm_saved_stats(dtype, pdtype):
    torch.manual_seed(8)
    x, w = torch.randn(3, 2, 4).to(dtype), torch.randn(4).to(pdtype)
    check(lambda t, p: torch.ops.aten.native_layer_norm(t, [4], p, p, 1e-5), x, w, atol=1e-2, rtol=1e-2)
    check(lambda t, p: torch.ops.aten.native_group_norm(t, p, p, 3, 2, 4, 1, 1e-5), x, w[:2],
          atol=1e-2, rtol=1e-2)
