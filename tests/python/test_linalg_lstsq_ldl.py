"""Operators that filled gaps of the OpInfo sweep: the unique family (host
sync), geqrf, linalg_lstsq, hash_tensor, and normalization/scan numerics."""
import pytest
import torch

from conftest import assert_same, check, check_grad


def _with_nan():
    return torch.tensor([3.0, float("nan"), 1.0, 3.0, -0.0, 0.0, float("nan"), 1.0])


# -- the unique family ------------------------------------------------------------

@pytest.mark.parametrize("sorted_", [True, False])
def test_unique_flat(sorted_):
    x = torch.tensor([[4, 1, 4], [2, 1, 7]])
    check(lambda t: torch.unique(t, sorted=sorted_, return_inverse=True, return_counts=True), x)
    check(lambda t: torch._unique(t, sorted=sorted_, return_inverse=True), x)


def test_unique_float_nan_and_bool():
    check(lambda t: torch.unique(t, return_inverse=True, return_counts=True), _with_nan())
    check(lambda t: torch.unique(t), torch.tensor([True, False, True]))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_dim(dim):
    x = torch.tensor([[1, 2, 1, 2], [3, 0, 3, 0], [1, 2, 1, 2]])
    check(lambda t: torch.unique(t, dim=dim, return_inverse=True, return_counts=True), x)


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_unique_consecutive(dim):
    x = torch.tensor([[1, 1, 2], [1, 1, 2], [3, 1, 1], [3, 1, 1]])
    check(lambda t: torch.unique_consecutive(t, return_inverse=True, return_counts=True, dim=dim), x)
    check(lambda t: torch.unique_consecutive(t), x.float())


def test_unique_empty_and_out():
    check(lambda t: torch.unique(t, return_inverse=True, return_counts=True), torch.empty(0))
    x = torch.tensor([2, 2, 5, 1])
    out = [torch.empty(0, dtype=torch.long, device="tpu") for _ in range(3)]
    torch.ops.aten._unique2.out(x.to("tpu"), True, True, True, out0=out[0], out1=out[1], out2=out[2])
    assert_same(out, list(torch._unique2(x, True, True, True)))


def test_index_fill_backward_uses_unique():
    x = torch.randn(3, 4)
    index = torch.tensor([1, 1, 3])
    check_grad(lambda t: t.index_fill(1, index.to(t.device), 2.0), x, grad=torch.randn(3, 4))


# -- geqrf and linalg_lstsq ---------------------------------------------------------

@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (2, 3, 3)])
def test_geqrf(shape, highest_precision):
    torch.manual_seed(0)
    check(torch.geqrf, torch.randn(shape), atol=1e-5, rtol=1e-4)


def test_geqrf_errors():
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.geqrf(torch.randn(3, device="tpu"))


def _well_conditioned(*shape):
    a = torch.randn(*shape)
    u, _, vh = torch.linalg.svd(a, full_matrices=False)
    s = torch.linspace(1.0, 2.0, min(shape[-2:]))
    return u @ torch.diag_embed(s) @ vh


@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd", "gelss", None])
@pytest.mark.parametrize("m", [2, 4])
def test_lstsq_drivers(driver, m, highest_precision):
    torch.manual_seed(m)
    a, b = _well_conditioned(2, m, 3), torch.randn(2, m, 2)
    check(lambda x, y: tuple(torch.linalg.lstsq(x, y, driver=driver)), a, b, atol=1e-4, rtol=1e-4)


def test_lstsq_vector_and_broadcast(highest_precision):
    torch.manual_seed(1)
    a = _well_conditioned(1, 5, 3)
    check(lambda x, y: tuple(torch.linalg.lstsq(x, y, driver="gelsd")), a, torch.randn(4, 5, 2),
          atol=1e-4, rtol=1e-4)
    check(lambda x, y: tuple(torch.linalg.lstsq(x, y, driver="gels")), a[0], torch.randn(5),
          atol=1e-4, rtol=1e-4)


def test_lstsq_backward(highest_precision):
    torch.manual_seed(2)
    a, b = _well_conditioned(4, 3), torch.randn(4, 2)
    check_grad(lambda x, y: torch.linalg.lstsq(x, y).solution, a, b, grad=torch.randn(3, 2),
               atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("driver", ["gels", "gelsd"])
def test_lstsq_empty(driver):
    torch.manual_seed(11)
    check(lambda x, y: tuple(torch.linalg.lstsq(x, y, driver=driver)), torch.randn(3, 0), torch.randn(3, 2))
    check(lambda x, y: tuple(torch.linalg.lstsq(x, y, driver=driver)), torch.randn(0, 4, 3), torch.randn(0, 4, 2))


def test_lstsq_errors():
    a = torch.randn(4, 3, device="tpu")
    with pytest.raises(RuntimeError, match="driver"):
        torch.linalg.lstsq(a, a, driver="nope")
    with pytest.raises(RuntimeError, match="should match"):
        torch.linalg.lstsq(a, torch.randn(3, 2, device="tpu"))


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


# -- LDL (Bunch–Kaufman, as LAPACK's sytrf/sytrs) ---------------------------------

def _symmetric(*shape):
    a = torch.randn(*shape)
    return a + a.mT


def test_ldl_factor_pivots_match_cpu():
    torch.manual_seed(9)
    a = _symmetric(4, 5, 5)  # indefinite: 1x1 swaps and 2x2 blocks occur
    expected = torch.linalg.ldl_factor_ex(a)
    assert (expected.pivots < 0).any() and (expected.pivots != torch.arange(1, 6, dtype=torch.int32)).any()
    check(lambda t: tuple(torch.linalg.ldl_factor_ex(t)), a, atol=1e-5, rtol=1e-4)


def test_ldl_factor_edge_cases():
    check(lambda t: tuple(torch.linalg.ldl_factor_ex(t)), torch.zeros(3, 3))  # info = 1
    check(lambda t: tuple(torch.linalg.ldl_factor_ex(t)), torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    check(lambda t: tuple(torch.linalg.ldl_factor_ex(t)), torch.zeros(0, 2, 2))


def test_ldl_solve(highest_precision):
    torch.manual_seed(10)
    ld, piv, _ = torch.linalg.ldl_factor_ex(_symmetric(3, 5, 5))
    check(torch.linalg.ldl_solve, ld, piv, torch.randn(3, 5, 2), atol=1e-4, rtol=1e-4)
    check(torch.linalg.ldl_solve, ld[0], piv[0], torch.randn(2, 5, 3), atol=1e-4, rtol=1e-4)
