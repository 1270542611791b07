"""Reductions, scans, sorting and softmax on tpu against CPU PyTorch."""
import math

import pytest
import torch
import torch_tpu

from conftest import assert_same, check

NAN, INF = float("nan"), float("inf")


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def ints(*shape):
    return torch.randint(-5, 6, shape)


# ---- sums, means, products -------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_sum_dtypes(dtype):
    x = randn(3, 5) if dtype.is_floating_point else ints(3, 5)
    if dtype == torch.bool:
        x = x > 0
    x = x.to(dtype)
    tol = dict(atol=1e-2, rtol=1e-2) if dtype == torch.bfloat16 else {}
    check(lambda t: t.sum(), x, **tol)
    check(lambda t: t.sum(dim=1, keepdim=True), x, **tol)
    check(lambda t: t.sum((0, -1)), x, **tol)


def test_sum_dtype_argument_and_dims():
    x = randn(2, 3, 4)
    check(lambda t: t.sum(-1, dtype=torch.float64), x)
    check(lambda t: torch.sum(t, dim=[], keepdim=True), x)
    check(lambda t: torch.sum(t.to(torch.int32), 1, dtype=torch.int16), ints(2, 3, 4))


def test_sum_of_empty_and_scalar():
    check(lambda t: t.sum(0), torch.zeros(0, 3))
    check(lambda t: t.sum(), torch.zeros(0))
    check(lambda t: t.sum(0, keepdim=True), torch.tensor(2.5))


def test_nansum_and_mean():
    x = torch.tensor([[1.0, NAN, 3.0], [NAN, NAN, 2.0]])
    check(lambda t: torch.nansum(t, 1), x)
    check(lambda t: torch.nansum(t), x)
    check(lambda t: t.mean(), randn(4, 5))
    check(lambda t: t.mean((0, 2), keepdim=True), randn(2, 3, 4))
    check(lambda t: t.mean(1), randn(3, 4, dtype=torch.bfloat16), atol=1e-2, rtol=1e-2)
    check(lambda t: t.mean(0), torch.zeros(0, 2))  # 0 / 0 = nan
    check(lambda t: t.mean(dtype=torch.float32), ints(3, 3))


def test_integer_mean_and_var_error_like_cpu():
    with pytest.raises(RuntimeError, match="mean"):
        ints(3).to("tpu").mean()
    with pytest.raises(RuntimeError, match="floating point"):
        ints(3).to("tpu").var()


def test_prod():
    x = torch.rand(3, 4) + 0.5
    check(lambda t: t.prod(), x)
    check(lambda t: t.prod(1, keepdim=True), x)
    check(lambda t: t.prod(0), ints(3, 4))
    check(lambda t: t.prod(), torch.tensor([True, False]))


def test_count_nonzero_any_all():
    x = torch.tensor([[0.0, 1.0, NAN], [0.0, 0.0, 0.0]])
    check(lambda t: torch.count_nonzero(t), x)
    check(lambda t: torch.count_nonzero(t, dim=1), x)
    check(lambda t: torch.count_nonzero(t, dim=(0, 1)), x)
    check(lambda t: t.any(), x)
    check(lambda t: t.all(1), x)
    check(lambda t: t.any(1, keepdim=True), x)
    check(lambda t: torch.any(t, dim=(0, 1)), x)
    check(lambda t: torch.all(t, dim=()), x)  # an empty dim list reduces nothing
    check(lambda t: t.all(), torch.zeros(0))
    check(lambda t: t.any(0), torch.tensor([[1, 0], [0, 0]], dtype=torch.uint8))


# ---- extrema -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_amax_amin_max_min(dtype):
    x = randn(3, 4).to(dtype) if dtype.is_floating_point else ints(3, 4)
    check(lambda t: t.amax(), x)
    check(lambda t: t.amin((0, 1), keepdim=True), x)
    check(lambda t: t.max(), x)
    check(lambda t: t.min(), x)
    check(lambda t: tuple(t.max(1)), x)
    check(lambda t: tuple(t.min(0, keepdim=True)), x)
    check(lambda t: t.argmax(), x)
    check(lambda t: t.argmin(1, keepdim=True), x)
    check(lambda t: tuple(torch.aminmax(t, dim=0)), x)
    check(lambda t: tuple(torch.aminmax(t)), x)


def test_extrema_propagate_nan_and_take_first_index():
    x = torch.tensor([[1.0, 3.0, NAN, 3.0, NAN], [2.0, 7.0, 7.0, -1.0, -1.0]])
    check(lambda t: t.amax(1), x)
    check(lambda t: t.amin(1), x)
    check(lambda t: tuple(t.max(1)), x)
    check(lambda t: tuple(t.min(1)), x)
    check(lambda t: t.argmax(1), x)
    check(lambda t: t.argmin(1), x)
    check(lambda t: t.argmax(), x)
    check(lambda t: tuple(torch.aminmax(t, dim=1)), x)


def test_extrema_of_bool_and_scalar():
    b = torch.tensor([[True, False], [False, False]])
    check(lambda t: tuple(t.max(1)), b)
    check(lambda t: t.amin(), b)
    check(lambda t: tuple(t.max(0)), torch.tensor(4.0))
    check(lambda t: t.argmax(0), torch.tensor(4.0))


@pytest.mark.parametrize("fn", [
    lambda t: t.max(), lambda t: t.min(), lambda t: t.max(0), lambda t: t.median(0),
    lambda t: t.mode(0), lambda t: t.amax(0), lambda t: t.argmax(),
])
def test_extrema_of_empty_error_like_cpu(fn):
    x = torch.zeros(0, 3)
    with pytest.raises((RuntimeError, IndexError)):
        fn(x)
    with pytest.raises((RuntimeError, IndexError), match="zero-size|non-zero size|numel"):
        fn(x.to("tpu"))


# ---- moments, logsumexp, norms -------------------------------------------------------


@pytest.mark.filterwarnings(r"ignore:var\(\)")
def test_var_std():
    x = randn(4, 6)
    check(lambda t: t.var(), x)
    check(lambda t: t.std(1), x)
    check(lambda t: t.var(0, correction=0, keepdim=True), x)
    check(lambda t: t.std((0, 1), correction=2), x)
    check(lambda t: tuple(torch.var_mean(t, 1)), x)
    check(lambda t: tuple(torch.std_mean(t, dim=0, unbiased=False)), x)
    check(lambda t: t.var(1), randn(3, 5, dtype=torch.bfloat16), atol=2e-2, rtol=2e-2)
    check(lambda t: t.var(0), torch.ones(1, 3))  # N - 1 = 0: nan


def test_logsumexp():
    x = randn(3, 5) * 10
    check(lambda t: torch.logsumexp(t, 1), x)
    check(lambda t: torch.logsumexp(t, (0, 1), keepdim=True), x)
    y = torch.tensor([[INF, 1.0], [-INF, -INF], [NAN, 0.0]])
    check(lambda t: torch.logsumexp(t, 1), y)
    check(lambda t: torch.logsumexp(t, 0), torch.zeros(0, 2))
    check(lambda t: torch.logsumexp(t, 1), ints(2, 3))


@pytest.mark.parametrize("ord", [2, 1, 3.5, 0, INF, -INF, -1])
def test_vector_norm_orders(ord):
    x = torch.tensor([[0.0, -2.0, 3.0], [1.5, 0.0, -0.5]])
    check(lambda t: torch.linalg.vector_norm(t, ord, dim=1), x)


def test_vector_norm_dims_dtype_and_norm():
    x = randn(2, 3, 4)
    check(lambda t: torch.linalg.vector_norm(t), x)
    check(lambda t: torch.linalg.vector_norm(t, 2, (0, 2), keepdim=True), x)
    check(lambda t: torch.linalg.vector_norm(t, dtype=torch.float64), x)
    check(lambda t: torch.norm(t), x)
    check(lambda t: torch.norm(t, p=1, dim=1), x)
    check(lambda t: t.norm(3, dim=-1, keepdim=True), x)
    check(lambda t: torch.linalg.vector_norm(t, dim=1), randn(3, 8, dtype=torch.bfloat16),
          atol=2e-2, rtol=2e-2)


# ---- softmax ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_log_softmax(dtype):
    x = randn(3, 7, dtype=dtype) * 4
    tol = dict(atol=1e-2, rtol=1e-2) if dtype == torch.bfloat16 else {}
    check(lambda t: torch.softmax(t, -1), x, **tol)
    check(lambda t: torch.log_softmax(t, 0), x, **tol)
    check(lambda t: torch.softmax(t, 1, dtype=torch.float32), x, **tol)


def test_softmax_edge_cases():
    check(lambda t: torch.softmax(t, 0), torch.tensor(3.0))
    check(lambda t: torch.log_softmax(t, 1), torch.tensor([[-INF, 0.0, 1.0], [-INF, -INF, -INF]]))
    check(lambda t: torch.softmax(t, 1), torch.zeros(2, 0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_safe_softmax_zeroes_fully_masked_rows(dtype):
    # SDPA's math path: a row of only -inf gives 0s; NaN and +inf rows as softmax.
    x = randn(3, 4, 5) * 3
    x[0, 1] = -INF
    x[1, 2, :3] = -INF
    x[1, 0, 0] = INF
    x[2, 0, 1] = float("nan")
    x[2, 3] = -INF
    x[2, 3, 2] = float("nan")
    tol = dict(atol=1e-2, rtol=1e-2) if dtype == torch.bfloat16 else {}
    for dim in (-1, 1, 0):
        check(lambda t: torch.ops.aten._safe_softmax(t, dim), x.to(dtype), **tol)
    check(lambda t: torch.ops.aten._safe_softmax(t, 2, torch.float32), x.to(dtype), **tol)
    check(lambda t: torch.ops.aten._safe_softmax(t, 1), torch.zeros(2, 0))


# ---- cumulative ops ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_cumsum_cumprod(dtype):
    x = randn(3, 9).to(dtype) if dtype.is_floating_point else ints(3, 9)
    tol = dict(atol=5e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    check(lambda t: torch.cumsum(t, 1), x, **tol)
    check(lambda t: torch.cumsum(t, 0), x, **tol)
    check(lambda t: torch.cumprod(t, 1), x, **tol)


def test_cumulative_dtypes_and_edges():
    check(lambda t: torch.cumsum(t, 0), torch.tensor([True, False, True]))
    check(lambda t: torch.cumsum(t, 0, dtype=torch.float64), randn(5))
    check(lambda t: torch.cumsum(t, 0), torch.tensor(2.0))
    check(lambda t: torch.cumsum(t, 1), torch.zeros(2, 0))
    check(lambda t: torch.logcumsumexp(t, 1), randn(2, 6) * 5)
    check(lambda t: torch.logcumsumexp(t, 0), torch.tensor([-INF, -INF, 1.0, INF, 0.0]))


def test_cummax_cummin():
    x = torch.tensor([1.0, 3.0, 3.0, NAN, 2.0, NAN, 5.0])
    check(lambda t: tuple(torch.cummax(t, 0)), x)
    check(lambda t: tuple(torch.cummin(t, 0)), x)
    y = ints(3, 7)
    check(lambda t: tuple(torch.cummax(t, 1)), y)
    check(lambda t: tuple(torch.cummin(t, -1)), y)


# ---- sorting and order statistics ------------------------------------------------------


def test_sort_is_stable_with_nan_last():
    x = torch.tensor([[1.0, 3.0, 3.0, NAN, 2.0, 3.0, -1.0, NAN],
                      [0.0, 0.0, 5.0, -2.0, 5.0, 1.0, 1.0, 0.0]])
    check(lambda t: tuple(torch.sort(t, 1)), x)
    check(lambda t: tuple(torch.sort(t, 1, descending=True)), x)
    check(lambda t: tuple(torch.sort(t, dim=0, stable=True)), x)
    check(lambda t: tuple(torch.sort(t, stable=True, descending=True)), ints(4, 6))
    check(lambda t: tuple(torch.sort(t)), torch.tensor([True, False, True]))
    check(lambda t: tuple(torch.sort(t)), torch.tensor(1.0))


def test_topk():
    x = torch.randperm(24).float().reshape(4, 6)
    check(lambda t: tuple(torch.topk(t, 3)), x)
    check(lambda t: tuple(torch.topk(t, 2, dim=0, largest=False)), x)
    check(lambda t: tuple(torch.topk(t, 0)), x)
    y = torch.tensor([1.0, NAN, 4.0, -2.0])
    check(lambda t: tuple(torch.topk(t, 2)), y)
    check(lambda t: tuple(torch.topk(t, 2, largest=False)), y)
    check(lambda t: tuple(torch.topk(t, 2)), torch.tensor([5, 1, 7, 3]))


def test_topk_ties_take_first_occurrence():
    v, i = torch.topk(torch.tensor([1.0, 3.0, 3.0, 2.0, 3.0]).to("tpu"), 2)
    assert v.cpu().tolist() == [3.0, 3.0] and i.cpu().tolist() == [1, 2]


def test_median_nanmedian_kthvalue():
    x = torch.randperm(20).float().reshape(4, 5)
    check(lambda t: t.median(), x)
    check(lambda t: tuple(t.median(1)), x)
    check(lambda t: tuple(t.median(0, keepdim=True)), x)
    check(lambda t: tuple(torch.kthvalue(t, 2, 1)), x)
    check(lambda t: tuple(torch.kthvalue(t, 4, 0, keepdim=True)), x)
    y = torch.tensor([[1.0, NAN, 3.0, NAN, 2.0], [3.0, 0.0, 2.0, 4.0, -1.0]])
    check(lambda t: tuple(t.median(1)), y)
    check(lambda t: tuple(t.nanmedian(1)), y)
    check(lambda t: t.median(), y)
    check(lambda t: t.nanmedian(), y)
    check(lambda t: t.median(), torch.tensor([4, 1, 3, 2]))


def test_mode():
    x = torch.tensor([[1.0, 2.0, 2.0, 1.0, 3.0, 3.0, 0.0], [5.0, 5.0, 5.0, 1.0, 1.0, 1.0, 1.0]])
    check(lambda t: tuple(torch.mode(t, 1)), x)
    check(lambda t: tuple(torch.mode(t, 0, keepdim=True)), torch.tensor([[2, 1], [2, 1], [3, 0]]))


# ---- out= and in-place variants come from the functional lowering ---------------------


def test_out_variants():
    x = randn(3, 4)
    out = torch.empty(0).to("tpu")
    torch.sum(x.to("tpu"), 1, out=out)
    assert_same(out, x.sum(1))
    vals, idx = torch.empty(0).to("tpu"), torch.empty(0, dtype=torch.long).to("tpu")
    torch.max(x.to("tpu"), 1, out=(vals, idx))
    assert_same((vals, idx), tuple(x.max(1)))
    t = x.to("tpu")
    t.cumsum_(0)
    assert_same(t, x.cumsum(0))


# ---- backward ------------------------------------------------------------------------


def needs_native(*ops):
    """Skips a backward test whose formula uses ops of another family until they are lowered."""
    missing = [op for op in ops if op not in torch_tpu.native_ops()]
    return pytest.mark.skipif(bool(missing), reason=f"backward needs {missing} (other families)")


def check_grad(fn, x, atol=None, rtol=None):
    """x.grad for a random output gradient w on tpu equals CPU."""
    xc = x.detach().clone().requires_grad_()
    yc = fn(xc)
    w = torch.randn(yc.shape)
    yc.backward(w)
    xt = x.detach().to("tpu").requires_grad_()
    fn(xt).backward(w.to("tpu"))
    assert_same(xt.grad, xc.grad, atol=atol, rtol=rtol)


@pytest.mark.parametrize("name,fn", [
    ("sum", lambda t: t.sum(1)),
    ("mean", lambda t: t.mean(0, keepdim=True)),
    ("amax", lambda t: t.amax(1)),
    ("var", lambda t: t.var(1)),
    ("logsumexp", lambda t: torch.logsumexp(t, 1)),
    ("softmax", lambda t: torch.softmax(t, 1)),
    ("log_softmax", lambda t: torch.log_softmax(t, 0)),
    pytest.param("cumsum", lambda t: torch.cumsum(t, 1), marks=needs_native("aten::flip")),
    ("norm", lambda t: torch.linalg.vector_norm(t, dim=1)),
])
def test_backward(name, fn):
    check_grad(fn, randn(3, 5), atol=1e-5, rtol=1e-4)


def test_backward_full_sum():
    check_grad(lambda t: t.sum(), randn(2, 3))


@needs_native("aten::zero_", "aten::scatter.src")
def test_backward_max_dim():
    check_grad(lambda t: t.max(1)[0], torch.randperm(12).float().reshape(3, 4))
