"""Special functions, extra pointwise ops and the _foreach_* family vs CPU."""
import math

import pytest
import torch

from conftest import assert_same, check, to_tpu

INF, NAN = math.inf, math.nan
EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-3, 100.0, INF, -INF, NAN]


def edges(dtype=torch.float32):
    return torch.tensor(EDGES, dtype=dtype)


def grid(lo, hi, n=41, dtype=torch.float32):
    return torch.linspace(lo, hi, n, dtype=dtype)


# ---- classification and cleanup ------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn", [torch.isinf, torch.isposinf, torch.isneginf, torch.signbit])
def test_classification_on_floats(fn, dtype):
    check(fn, edges(dtype))


@pytest.mark.parametrize("fn", [torch.isinf, torch.isposinf, torch.isneginf, torch.signbit])
def test_classification_on_ints(fn):
    check(fn, torch.tensor([-3, 0, 5], dtype=torch.int32))
    check(fn, torch.tensor([0, 200], dtype=torch.uint8))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_nan_to_num_defaults_use_dtype_extremes(dtype):
    check(torch.nan_to_num, edges(dtype))


def test_nan_to_num_with_values_and_inplace():
    check(lambda x: torch.nan_to_num(x, nan=7.0, posinf=1e3, neginf=-2.0), edges())
    check(lambda x: x.clone().nan_to_num_(nan=-1.0), edges())
    check(torch.nan_to_num, torch.tensor([1, 2], dtype=torch.int64))


# ---- logit ---------------------------------------------------------------------

@pytest.mark.parametrize("eps", [None, 0.1])
def test_logit_and_backward(eps):
    x = torch.tensor([0.0, 1.0, 0.05, 0.3, 0.5, 0.97, -0.2, 1.5, NAN])
    check(lambda t: torch.logit(t, eps), x, atol=1e-6, rtol=1e-6)
    g = torch.linspace(-1, 1, x.numel())
    check(lambda gg, t: torch.ops.aten.logit_backward(gg, t, eps), g, x, atol=1e-5, rtol=1e-6)


def test_logit_bf16_and_autograd():
    check(torch.logit, torch.tensor([0.1, 0.5, 0.9], dtype=torch.bfloat16))
    x = torch.tensor([0.2, 0.6, 0.9], requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    torch.logit(x).sum().backward()
    torch.logit(xt).sum().backward()
    assert_same(xt.grad, x.grad)


# ---- binary pointwise ------------------------------------------------------------

def test_heaviside():
    check(torch.heaviside, edges(), torch.full((len(EDGES),), 0.5))
    check(torch.heaviside, torch.tensor([-2, 0, 3]), torch.tensor([7]))


def test_nextafter():
    x = torch.tensor([0.0, 1.0, 1.0, -1.0, 5.0, INF, NAN, 2.0])
    y = torch.tensor([1.0, 2.0, 0.0, -INF, 5.0, 0.0, 1.0, NAN])
    check(torch.nextafter, x, y)
    check(torch.nextafter, x.double(), y.double())


@pytest.mark.parametrize("fn", [torch.gcd, torch.lcm])
def test_gcd_lcm(fn):
    a = torch.tensor([0, 0, 12, -12, 17, 100, 7, -36], dtype=torch.int64)
    b = torch.tensor([0, 5, 18, 8, 5, -75, 0, -48], dtype=torch.int64)
    check(fn, a, b)
    check(fn, a.int(), torch.tensor(6, dtype=torch.int32))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.int8])
def test_bit_shifts(dtype):
    a = torch.tensor([1, 3, 100, 7, 64, 0], dtype=dtype)
    n = torch.tensor([0, 1, 2, 9, 70, 3], dtype=dtype)
    check(torch.bitwise_left_shift, a, n)
    check(torch.bitwise_right_shift, a, n)
    check(lambda t: t << 2, a)
    check(lambda t: t >> 1, a)
    check(lambda t: torch.bitwise_left_shift(3, t.clamp(max=5)), n)


def test_right_shift_keeps_sign():
    a = torch.tensor([-8, -1, 8, -128], dtype=torch.int32)
    n = torch.tensor([1, 3, 40, -1], dtype=torch.int32)
    check(torch.bitwise_right_shift, a, n)
    check(torch.bitwise_left_shift, a, n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logaddexp2(dtype):
    x = torch.tensor([0.0, 1.0, -3.0, 50.0, INF, -INF, INF, NAN], dtype=dtype)
    y = torch.tensor([0.0, 2.0, 4.0, -50.0, INF, -INF, -INF, 1.0], dtype=dtype)
    check(torch.logaddexp2, x, y)


def test_ldexp_and_frexp():
    check(torch.ldexp, torch.tensor([1.0, -2.5, 0.0, 3.0]), torch.tensor([2, -3, 5, 0]))
    x = torch.tensor([0.0, -0.0, 1.0, -3.5, 1e-30, 6e20, 0.3, INF, -INF])
    check(torch.frexp, x)
    check(torch.frexp, x.double())
    check(torch.frexp, torch.tensor([0.75, -12.0, 0.0], dtype=torch.bfloat16))


@pytest.mark.parametrize("decimals", [0, 2, -1])
def test_round_decimals(decimals):
    x = torch.tensor([1.2345, -2.675, 15.5, 250.0, -0.5, 0.0, NAN, INF])
    check(lambda t: torch.round(t, decimals=decimals), x)


def test_xlog1py_and_entr():
    x = torch.tensor([0.0, 0.0, 1.0, 2.0, -1.0, 3.0])
    y = torch.tensor([NAN, -1.0, 0.5, INF, 2.0, -0.5])
    check(torch.special.xlog1py, x, y)
    check(lambda t: torch.special.xlog1py(2.0, t), y)
    check(lambda t: torch.special.xlog1py(t, 3), x)
    check(torch.special.entr, edges())
    check(torch.special.entr, torch.tensor([0.5, 2.0, 0.0], dtype=torch.bfloat16))


# ---- complex -----------------------------------------------------------------------

def test_angle_real_and_complex():
    check(torch.angle, edges())
    check(torch.angle, torch.tensor([-2, 0, 3]))
    z = torch.complex(torch.tensor([1.0, -1.0, 0.0, -2.0]), torch.tensor([1.0, 0.5, -3.0, 0.0]))
    check(torch.angle, z)


def test_complex_and_polar_build_complex_tensors():
    re, im = torch.tensor([1.0, -2.0, 0.0]), torch.tensor([0.5, 3.0, -1.0])
    check(torch.complex, re, im)
    check(torch.polar, torch.tensor([1.0, 2.0, 0.5]), torch.tensor([0.0, 1.0, -2.5]), atol=1e-6, rtol=1e-6)
    check(torch.complex, re.double(), im.double())


# ---- special functions -----------------------------------------------------------

BESSEL_X = torch.tensor([0.0, -0.0, 0.1, -0.7, 1.0, 2.5, -5.0, 9.9, 15.0, -19.9, 20.1, 35.0,
                         -60.0, 88.0, 89.5, 200.0, INF, -INF, NAN])


@pytest.mark.parametrize("fn", [torch.i0, torch.special.i0e, torch.special.i1, torch.special.i1e,
                                torch.special.modified_bessel_i0, torch.special.modified_bessel_i1])
def test_modified_bessel_first_kind(fn):
    check(fn, BESSEL_X, rtol=1e-5, atol=1e-6)
    check(fn, BESSEL_X.double(), rtol=1e-12, atol=1e-14)
    if fn in (torch.special.modified_bessel_i0, torch.special.modified_bessel_i1):
        with pytest.raises(NotImplementedError):  # CPU has no 16-bit kernel either
            fn(BESSEL_X.bfloat16().to("tpu"))
    else:
        check(fn, BESSEL_X[:12].bfloat16())


def test_erfcx_log_ndtr():
    x = torch.tensor([-30.0, -9.0, -3.0, -1.0, -0.3, 0.0, 0.2, 1.0, 1.49, 1.51, 3.0, 10.0, 1e4, 1e30,
                      INF, -INF, NAN])
    check(torch.special.erfcx, x, rtol=2e-6, atol=0)
    check(torch.special.erfcx, x.double(), rtol=1e-13, atol=0)
    check(torch.special.log_ndtr, x, rtol=2e-6, atol=1e-7)
    check(torch.special.log_ndtr, x.double(), rtol=1e-13, atol=1e-15)


def test_ndtri():
    p = torch.tensor([0.0, 1.0, 0.5, 1e-30, 1e-10, 1e-4, 0.01, 0.1, 0.3, 0.7, 0.9, 0.999, 1 - 1e-7,
                      -0.1, 1.5, NAN])
    check(torch.special.ndtri, p, rtol=2e-6, atol=1e-6)
    check(torch.special.ndtri, p.double(), rtol=1e-12, atol=1e-12)


def test_zeta_and_polygamma():
    x = torch.tensor([2.0, 3.0, 4.5, 1.0, 0.5, 10.0])
    q = torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0, 20.0])
    check(torch.special.zeta, x, q, rtol=1e-5, atol=1e-7)
    check(lambda t: torch.special.zeta(t, 2.0), x, rtol=1e-5, atol=1e-7)
    check(lambda t: torch.special.zeta(3.0, t), q, rtol=1e-5, atol=1e-7)
    y = torch.tensor([0.5, 1.0, 2.5, 7.0, -1.5])
    for n in (0, 1, 2, 3):
        check(lambda t: torch.polygamma(n, t), y, rtol=2e-5, atol=1e-5)


def test_mvlgamma():
    x = torch.tensor([2.0, 3.5, 10.0])
    for p in (1, 3):
        check(lambda t: torch.mvlgamma(t, p), x, rtol=1e-5, atol=1e-5)


# ---- orthogonal polynomials -----------------------------------------------------------

POLYS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
         "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
         "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
         "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
         "laguerre_polynomial_l", "legendre_polynomial_p"]


@pytest.mark.parametrize("name", POLYS)
def test_orthogonal_polynomials(name):
    fn = getattr(torch.special, name)
    # (NaN x is left out: CPU returns an uninitialized value for some n.)
    x = torch.tensor([-1.0, 1.0, 0.0, 0.3, -0.45, 0.9, 1.7, -2.2, 0.5, 0.25, 0.6, 0.8])
    n = torch.tensor([3.0, 4.0, 5.0, 0.0, 1.0, 2.0, 7.0, 6.0, 10.0, 9.0, 2.0, -1.0])
    check(fn, x, n, rtol=1e-4, atol=1e-4)
    check(lambda t: fn(t, 5), x, rtol=1e-4, atol=1e-4)
    check(lambda t: fn(0.4, t), n, rtol=1e-4, atol=1e-4)
    check(fn, x.double(), n.double(), rtol=1e-9, atol=1e-9)


def test_hermite_past_limit_is_nan():
    check(torch.special.hermite_polynomial_he, torch.tensor([0.5, 0.5]), torch.tensor([129.0, 3.0]))


# ---- _foreach_* ------------------------------------------------------------------------

def lists(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    shapes = [(3,), (2, 4), ()]
    return [torch.randn(s, generator=g).to(dtype) for s in shapes]


def check_foreach(fn, *args, **kw):
    expected = fn(*args)
    actual = fn(*to_tpu(args))
    assert_same(list(actual), list(expected), **kw)


FOREACH_BINARY = [torch._foreach_add, torch._foreach_sub, torch._foreach_mul, torch._foreach_div,
                  torch._foreach_maximum, torch._foreach_minimum, torch._foreach_pow]


@pytest.mark.parametrize("fn", FOREACH_BINARY)
def test_foreach_binary_overloads(fn):
    a, b = lists(), [t.abs() + 0.5 for t in lists()]
    a = [t.abs() + 0.1 for t in a] if fn is torch._foreach_pow else a
    check_foreach(fn, a, b)
    check_foreach(lambda x: fn(x, 1.5), a)
    check_foreach(lambda x: fn(x, [2.0, -1.0, 0.5]), a)


def test_foreach_tensor_and_alpha_overloads():
    a, b = lists(), lists()
    check_foreach(lambda x, y: torch._foreach_add(x, y, alpha=-2.0), a, b)
    check_foreach(lambda x, y: torch._foreach_sub(x, y, alpha=0.5), a, b)
    check_foreach(lambda x, s: torch._foreach_mul(x, s), a, torch.tensor(3.0))
    check_foreach(lambda x, s: torch._foreach_add(x, s, alpha=2), a, torch.tensor(0.25))


def test_foreach_promotes_like_per_tensor_ops():
    ints = [torch.tensor([1, 2, 3]), torch.tensor([[4]])]
    check_foreach(lambda x: torch._foreach_div(x, 2), ints)
    check_foreach(lambda x: torch._foreach_mul(x, 2.5), ints)
    check_foreach(lambda x: torch._foreach_add(x, [1, 2]), ints)
    check_foreach(lambda x: torch._foreach_add(x, 1.0), lists(torch.bfloat16))


def test_foreach_ternary():
    a, b, c = lists(), lists(), [t.abs() + 1 for t in lists()]
    check_foreach(lambda x, y, z: torch._foreach_addcmul(x, y, z, value=0.5), a, b, c)
    check_foreach(lambda x, y, z: torch._foreach_addcdiv(x, y, z, [1.0, -2.0, 3.0]), a, b, c)
    check_foreach(lambda x, y: torch._foreach_lerp(x, y, 0.3), a, b)
    check_foreach(lambda x, y: torch._foreach_lerp(x, y, [0.1, 0.7, 0.5]), a, b)
    check_foreach(lambda x, y, w: torch._foreach_lerp(x, y, w), a, b, [t.sigmoid() for t in c])


@pytest.mark.parametrize("name", ["sqrt", "neg", "exp", "abs", "sigmoid", "reciprocal", "sign"])
def test_foreach_unary(name):
    check_foreach(getattr(torch, f"_foreach_{name}"), [t.abs() + 0.1 for t in lists()])


def test_foreach_norm_zero_copy():
    a = lists()
    check_foreach(torch._foreach_norm, a, rtol=1e-5, atol=1e-6)
    check_foreach(lambda x: torch._foreach_norm(x, 1), a, rtol=1e-5, atol=1e-6)
    check_foreach(lambda x: torch._foreach_norm(x, INF), a)
    check_foreach(torch.ops.aten._foreach_zero, a)
    check_foreach(torch.ops.aten._foreach_copy, a, [t * 2 for t in lists()])


def test_foreach_inplace_updates_each_tensor():
    a, b = lists(), lists()
    at, bt = to_tpu(a), to_tpu(b)
    for x, y in ((a, b), (at, bt)):
        torch._foreach_add_(x, y, alpha=0.5)
        torch._foreach_mul_(x, [2.0, 3.0, 4.0])
        torch._foreach_lerp_(x, y, 0.25)
        torch._foreach_zero_(x[:1])
        torch._foreach_copy_(y[1:], x[1:])
    assert_same(at, a)
    assert_same(bt, b)


def test_foreach_ops_run_natively(capfd, monkeypatch):
    a = to_tpu(lists())
    torch_tpu = pytest.importorskip("torch_tpu")
    torch_tpu._C._set_log_ops(True)
    try:
        torch._foreach_addcmul_(a, a, a, 0.5)
    finally:
        torch_tpu._C._set_log_ops(False)
    err = capfd.readouterr().err
    assert "_foreach_addcmul_.Scalar" in err and "aten::mul.Tensor" not in err


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.AdamW(p, lr=0.1, weight_decay=0.1, foreach=True),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, foreach=True),
])
def test_foreach_optimizer_steps_match_cpu(make):
    params = [torch.nn.Parameter(t) for t in lists()]
    tparams = [torch.nn.Parameter(p.detach().to("tpu")) for p in params]
    opt, topt = make(params), make(tparams)
    for step in range(3):
        for p, tp in zip(params, tparams):
            g = torch.full_like(p, 0.1 * (step + 1)) + p.detach()
            p.grad, tp.grad = g, g.to("tpu")
        opt.step()
        topt.step()
    assert_same([p.detach() for p in tparams], [p.detach() for p in params], rtol=1e-5, atol=1e-6)
