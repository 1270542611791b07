"""The matmul family and native linear algebra on tpu, against CPU."""
import pytest
import torch

from conftest import assert_same, check


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g, dtype=dtype)


# ---- matmul family (f32 at HIGHEST: tight against CPU) -----------------------

def test_mm_bmm_mv_dot(highest_precision):
    check(torch.mm, randn(3, 5), randn(5, 4))
    check(torch.bmm, randn(2, 3, 5), randn(2, 5, 4))
    check(torch.mv, randn(3, 5), randn(5))
    check(torch.dot, randn(5), randn(5, seed=1))
    check(torch.vdot, randn(6), randn(6, seed=1))


def test_addmm_family_with_scalars(highest_precision):
    check(lambda s, a, b: torch.addmm(s, a, b, beta=0.5, alpha=-2), randn(4), randn(3, 5), randn(5, 4))
    check(lambda s, a, b: torch.baddbmm(s, a, b, beta=2, alpha=0.25),
          randn(2, 3, 4), randn(2, 3, 5), randn(2, 5, 4))
    check(lambda s, a, b: torch.addbmm(s, a, b, alpha=3), randn(3, 4), randn(2, 3, 5), randn(2, 5, 4))
    check(lambda s, a, b: torch.addmv(s, a, b, beta=-1), randn(3), randn(3, 5), randn(5))
    check(lambda s, a, b: torch.addr(s, a, b, beta=2, alpha=3), randn(3, 4), randn(3), randn(4))


def test_addmm_beta_zero_ignores_nan_self(highest_precision):
    s = torch.full((3, 4), float("nan"))
    check(lambda s, a, b: torch.addmm(s, a, b, beta=0), s, randn(3, 5), randn(5, 4))
    check(lambda s, a, b: torch.addr(s, a, b, beta=0), s, randn(3), randn(4))


def test_addmm_activation(highest_precision):
    for gelu in (False, True):
        check(lambda s, a, b: torch._addmm_activation(s, a, b, use_gelu=gelu),
              randn(4), randn(3, 5), randn(5, 4))


def test_composites_reach_lowered_ops(highest_precision):
    check(torch.matmul, randn(2, 3, 5), randn(5, 4))
    check(torch.nn.functional.linear, randn(2, 3, 5), randn(4, 5), randn(4))
    check(lambda a, b: torch.einsum("bij,bjk->bik", a, b), randn(2, 3, 5), randn(2, 5, 4))


def test_inplace_and_out(highest_precision):
    check(lambda s, a, b: s.clone().addmm_(a, b, alpha=2), randn(3, 4), randn(3, 5), randn(5, 4))
    a, b = randn(3, 5), randn(5, 4)
    out = torch.empty(3, 4).to("tpu")
    torch.mm(a.to("tpu"), b.to("tpu"), out=out)
    assert_same(out, a @ b)


def test_empty_contraction_gives_zeros():
    check(torch.mm, torch.empty(3, 0), torch.empty(0, 4))
    check(lambda s, a, b: torch.addmm(s, a, b, beta=2), randn(3, 4), torch.empty(3, 0), torch.empty(0, 4))


def test_integer_and_half_dtypes():
    check(torch.mm, torch.arange(12).reshape(3, 4), torch.arange(8).reshape(4, 2))
    a, b = randn(8, 16, dtype=torch.bfloat16), randn(16, 8, dtype=torch.bfloat16)
    check(torch.mm, a, b, atol=2e-2, rtol=2e-2)
    check(torch.bmm, randn(2, 4, 8, dtype=torch.float16), randn(2, 8, 4, dtype=torch.float16),
          atol=2e-3, rtol=2e-3)
    check(lambda s, a, b: torch.addmm(s, a, b, beta=0.5), randn(8, dtype=torch.bfloat16), a, b,
          atol=2e-2, rtol=2e-2)


def test_int_mm():
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 127, (16, 32), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 127, (32, 8), generator=g, dtype=torch.int8)
    check(torch._int_mm, a, b)


def test_mm_backward(highest_precision):
    a, b, g = randn(3, 5), randn(5, 4), randn(3, 4)
    a.requires_grad_(), b.requires_grad_()
    torch.mm(a, b).backward(g)
    ta = a.detach().to("tpu").requires_grad_()
    tb = b.detach().to("tpu").requires_grad_()
    torch.mm(ta, tb).backward(g.to("tpu"))
    assert_same(ta.grad, a.grad)
    assert_same(tb.grad, b.grad)


def test_mode_does_not_change_f64_or_integers():
    a, b = randn(4, 6, dtype=torch.float64), randn(6, 3, dtype=torch.float64)
    check(torch.mm, a, b, atol=1e-12, rtol=1e-12)


# ---- Cholesky and triangular solves ------------------------------------------

def spd(n, batch=(), seed=0):
    a = randn(*batch, n, n, seed=seed)
    return a @ a.mT + n * torch.eye(n)


def test_cholesky(highest_precision):
    a = spd(4, (2,))
    check(lambda x: torch.linalg.cholesky_ex(x), a, atol=1e-5, rtol=1e-5)
    check(lambda x: torch.linalg.cholesky_ex(x, upper=True), a, atol=1e-5, rtol=1e-5)
    check(lambda x: torch.cholesky(x), a[0], atol=1e-5, rtol=1e-5)


def test_cholesky_info_flags_failure():
    a = torch.eye(4).repeat(2, 1, 1)
    a[1, 2, 2] = -1.0
    _, info = torch.linalg.cholesky_ex(a.to("tpu"))
    info = info.cpu()
    assert info[0] == 0 and 1 <= info[1] <= torch.linalg.cholesky_ex(a)[1][1]  # value: a lower bound


@pytest.mark.parametrize("upper,left,unit", [(False, True, False), (True, False, True)])
def test_solve_triangular(highest_precision, upper, left, unit):
    a = spd(4, (2,)).tril() if not upper else spd(4, (2,)).triu()
    b = randn(2, 4, 3) if left else randn(3, 4)  # batch broadcasts for the right side
    check(lambda x, y: torch.linalg.solve_triangular(x, y, upper=upper, left=left,
                                                     unitriangular=unit),
          a, b, atol=1e-5, rtol=1e-5)


def test_triangular_solve(highest_precision):
    a, b = spd(4).triu(), randn(2, 4, 3)
    check(lambda y, x: torch.triangular_solve(y, x), b, a, atol=1e-5, rtol=1e-5)
    check(lambda y, x: torch.triangular_solve(y, x.mT, upper=False, transpose=True), b, a,
          atol=1e-5, rtol=1e-5)


def test_cholesky_solve_and_inverse(highest_precision):
    l = torch.linalg.cholesky(spd(4))
    check(lambda b, f: torch.cholesky_solve(b, f), randn(4, 2), l, atol=1e-5, rtol=1e-5)
    check(lambda f: torch.cholesky_inverse(f), l, atol=1e-5, rtol=1e-5)
    check(lambda f: torch.cholesky_inverse(f, upper=True), l.mT.contiguous(), atol=1e-5, rtol=1e-5)


def test_out_dtype_overloads_accumulate_in_f32():
    # mm.dtype/bmm.dtype have no CPU kernel: the reference is the f32 product.
    a, b = randn(4, 8, dtype=torch.bfloat16), randn(8, 3, dtype=torch.bfloat16)
    y = torch.mm(a.to("tpu"), b.to("tpu"), out_dtype=torch.float32)
    assert_same(y, a.float() @ b.float(), atol=1e-5, rtol=1e-5)
    s = randn(2, 4, 8, dtype=torch.bfloat16)
    y = torch.bmm(s.to("tpu"), s.mT.to("tpu"), out_dtype=torch.float32)
    assert_same(y, s.float() @ s.mT.float(), atol=1e-5, rtol=1e-5)


def test_addr_bool():
    m = torch.tensor([[True, False, False], [False, True, False]])
    v1, v2 = torch.tensor([True, False]), torch.tensor([True, True, False])
    check(torch.addr, m, v1, v2)
    check(lambda *a: torch.addr(*a, beta=False), m, v1, v2)
    check(lambda *a: torch.addr(*a, alpha=False), m, v1, v2)
