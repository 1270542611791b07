"""Complex linear algebra against CPU PyTorch: Cholesky and triangular solves
(conjugate transposes), LU with LAPACK's |re| + |im| pivots, Householder QR
with a real R diagonal, Hermitian eigh and SVD by phased Jacobi rotations,
matrix_exp, least squares, and their gradients. Decompositions unique only up
to a phase are compared through phase-free quantities (|U|, U Vᴴ, Q R)."""
import pytest
import torch

from conftest import check, to_tpu

C64, C128 = torch.complex64, torch.complex128


def crand(*shape, dtype=C64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def hermitian_pd(n, dtype=C64, batch=()):
    a = crand(*batch, n, n, dtype=dtype, seed=3)
    return a @ a.mH + n * torch.eye(n, dtype=dtype)


def grads(fn, *args):
    """Gradients of Σ|fn(args)|² (complex outputs) or Σ fn(args) (real ones)."""
    def run(*xs):
        xs = [x.clone().requires_grad_() for x in xs]
        outs = fn(*xs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        total = sum((o.abs() ** 2).sum() if o.is_complex() else o.sum() for o in outs)
        return torch.autograd.grad(total, xs)
    return run


@pytest.mark.parametrize("dtype", [C64, C128])
def test_cholesky_family_is_hermitian(dtype):
    h = hermitian_pd(4, dtype, batch=(2,))
    check(torch.linalg.cholesky, h)
    check(lambda x: torch.linalg.cholesky(x, upper=True), h)
    check(torch.linalg.cholesky_ex, h)
    l = torch.linalg.cholesky(h)
    b = crand(2, 4, 3, dtype=dtype, seed=1)
    check(torch.cholesky_solve, b, l)
    check(lambda y, u: torch.cholesky_solve(y, u, upper=True), b, l.mH.contiguous())
    check(torch.cholesky_inverse, l)
    check(lambda u: torch.cholesky_inverse(u, upper=True), l.mH.contiguous())


def test_cholesky_ignores_the_imaginary_diagonal_and_reports_failure():
    h = hermitian_pd(3)
    h.diagonal().imag.fill_(0.25)  # LAPACK reads only the real part
    check(torch.linalg.cholesky, h)
    bad = hermitian_pd(3)
    bad[1, 1] = -5
    l, info = torch.linalg.cholesky_ex(bad.to("tpu"))
    assert int(info.cpu()) > 0


def test_triangular_solves_transpose_versus_adjoint():
    """linalg.solve_triangular, and triangular_solve's `transpose`, which is
    Aᵀ (not conjugated) for complex A, as on CPU."""
    l = torch.linalg.cholesky(hermitian_pd(4))
    b = crand(4, 3, seed=1)
    for upper in (False, True):
        a = l.mH.contiguous() if upper else l
        check(lambda x, y: torch.linalg.solve_triangular(x, y, upper=upper), a, b)
        check(lambda x, y: torch.linalg.solve_triangular(x, y.mT, upper=upper, left=False), a, b)
        for transpose in (False, True):
            for unit in (False, True):
                check(lambda y, x: torch.triangular_solve(y, x, upper=upper, transpose=transpose,
                                                          unitriangular=unit), b, a)


def test_lu_pivots_like_lapack():
    """zgetrf picks the pivot of largest |re| + |im|, not of largest modulus:
    here column 0 has |3+0i| = 3 > |2+2i| = 2.83 but 2 + 2 = 4 > 3."""
    a = torch.tensor([[3 + 0j, 1], [2 + 2j, 1j]], dtype=C64)
    lu, piv = check(torch.linalg.lu_factor, a)
    assert piv.cpu().tolist() == [2, 2]
    for shape in ((2, 4, 4), (3, 5), (5, 3)):
        x = crand(*shape)
        check(torch.linalg.lu_factor_ex, x)
        check(torch.linalg.lu, x)
        lu, piv = torch.linalg.lu_factor(x)
        check(torch.lu_unpack, lu, piv)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve_left_and_adjoint(left, adjoint):
    a, b = crand(2, 4, 4, dtype=C128), crand(2, 4, 3, dtype=C128, seed=1)
    lu, piv = torch.linalg.lu_factor(a)
    rhs = b if left else b.mT
    check(lambda x, p, y: torch.linalg.lu_solve(x, p, y, left=left, adjoint=adjoint), lu, piv, rhs)


def test_solve_inv_det_slogdet():
    a, b = crand(2, 5, 5), crand(2, 5, 2, seed=1)
    check(torch.linalg.solve, a, b)
    check(lambda x, y: torch.linalg.solve(x, y, left=False), a, b.mT)
    check(torch.linalg.solve, a, b[..., 0])
    check(torch.linalg.inv, a, atol=1e-5, rtol=1e-4)
    check(torch.linalg.inv_ex, a, atol=1e-5, rtol=1e-4)
    check(torch.linalg.det, a, atol=1e-4, rtol=1e-5)
    check(torch.linalg.slogdet, a)
    check(torch.logdet, hermitian_pd(4))
    check(lambda x: torch.linalg.matrix_power(x, -2), a, atol=1e-5, rtol=1e-4)
    check(lambda x: torch.linalg.tensorinv(x, ind=1), a[0], atol=1e-5, rtol=1e-4)


def test_singular_complex_matrix_reports_info():
    a = torch.tensor([[1 + 1j, 2 + 2j], [1 + 1j, 2 + 2j]], dtype=C64)
    check(torch.linalg.lu_factor_ex, a)
    check(torch.linalg.det, a)


@pytest.mark.parametrize("scale", [0.1, 0.5, 3.0])
def test_matrix_exp(scale):
    check(torch.linalg.matrix_exp, crand(2, 4, 4) * scale, atol=1e-5, rtol=1e-4)
    check(torch.linalg.matrix_exp, crand(3, 3, dtype=C128) * scale)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_qr_family(shape):
    x = crand(*shape)
    check(torch.geqrf, x)
    check(lambda a: torch.linalg.qr(a, mode="r")[1], x)
    for mode in ("reduced", "complete"):
        q, r = torch.linalg.qr(x.to("tpu"), mode=mode)
        q, r = q.cpu(), r.cpu()
        torch.testing.assert_close(q @ r, x, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(q.mH @ q, torch.eye(q.shape[-1], dtype=C64).expand_as(q.mH @ q),
                                   atol=1e-5, rtol=1e-5)
        assert (r.diagonal(dim1=-2, dim2=-1).imag == 0).all()  # geqrf's beta is real
        check(lambda a: torch.linalg.qr(a, mode=mode), x)
    g, tau = torch.geqrf(x)
    check(torch.linalg.householder_product, g[..., :min(shape[-2:])], tau)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_ormqr_is_conjugate_transposed(left, transpose):
    g, tau = torch.geqrf(crand(5, 3))
    c = crand(5, 2, seed=1) if left else crand(2, 5, seed=1)
    check(lambda a, t, y: torch.ormqr(a, t, y, left=left, transpose=transpose), g, tau, c)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_hermitian(uplo):
    h = hermitian_pd(5, batch=(2,))
    h[..., 1, 3] += 0.5j  # only the named triangle is read
    check(lambda a: torch.linalg.eigvalsh(a, UPLO=uplo), h, atol=1e-4, rtol=1e-5)
    w, v = (t.cpu() for t in torch.linalg.eigh(h.to("tpu"), UPLO=uplo))
    wc, vc = torch.linalg.eigh(h, UPLO=uplo)
    torch.testing.assert_close(w, wc, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(v.abs(), vc.abs(), atol=1e-4, rtol=1e-4)
    herm = vc @ torch.diag_embed(wc).to(C64) @ vc.mH
    torch.testing.assert_close(v @ torch.diag_embed(w).to(C64) @ v.mH, herm, atol=1e-4, rtol=1e-4)
    assert w.dtype == torch.float32 and v.dtype == C64


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4), (4, 4)])
@pytest.mark.parametrize("full", [False, True])
def test_svd_phase_free_parts(shape, full):
    x = crand(*shape)
    u, s, vh = (t.cpu() for t in torch.linalg.svd(x.to("tpu"), full_matrices=full))
    uc, sc, vhc = torch.linalg.svd(x, full_matrices=full)
    k = s.shape[-1]
    torch.testing.assert_close(s, sc, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(u[..., :k].abs(), uc[..., :k].abs(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(u[..., :k] @ vh[..., :k, :], uc[..., :k] @ vhc[..., :k, :],
                               atol=1e-4, rtol=1e-4)
    eye = lambda n: torch.eye(n, dtype=C64)
    torch.testing.assert_close(u.mH @ u, eye(u.shape[-1]).expand_as(u.mH @ u), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(vh @ vh.mH, eye(vh.shape[-2]).expand_as(vh @ vh.mH), atol=1e-5, rtol=1e-5)


def test_svd_users():
    x = crand(5, 3)
    check(torch.linalg.svdvals, x)
    check(torch.linalg.pinv, x, atol=1e-5, rtol=1e-4)
    check(torch.linalg.matrix_rank, x)
    check(lambda a: torch.linalg.matrix_norm(a, "nuc"), x)
    check(lambda a: torch.linalg.matrix_norm(a, 2), x)
    check(torch.linalg.cond, crand(4, 4), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5)])
@pytest.mark.parametrize("driver", [None, "gelsd"])
def test_lstsq(shape, driver):
    a, b = crand(*shape), crand(shape[0], 2, seed=1)
    want = torch.linalg.lstsq(a, b, driver=driver)
    got = torch.linalg.lstsq(a.to("tpu"), b.to("tpu"), driver=driver)
    torch.testing.assert_close(got.solution.cpu(), want.solution, atol=1e-5, rtol=1e-4)
    if shape[0] > shape[1]:
        torch.testing.assert_close(got.residuals.cpu(), want.residuals, atol=1e-4, rtol=1e-4)
    assert got.residuals.dtype == want.residuals.dtype == torch.float32


@pytest.mark.parametrize("name, fn, make", [
    ("cholesky", torch.linalg.cholesky, lambda: (hermitian_pd(4),)),
    ("solve", torch.linalg.solve, lambda: (crand(4, 4), crand(4, 2, seed=1))),
    ("inv", torch.linalg.inv, lambda: (crand(4, 4),)),
    ("det", torch.linalg.det, lambda: (crand(4, 4),)),
    ("slogdet", lambda a: torch.linalg.slogdet(a)[1], lambda: (crand(4, 4),)),
    ("qr", lambda a: torch.linalg.qr(a)[1].abs(), lambda: (crand(5, 3),)),
    ("eigvalsh", torch.linalg.eigvalsh, lambda: (hermitian_pd(4),)),
    ("svdvals", torch.linalg.svdvals, lambda: (crand(5, 3),)),
    ("svd U Vh", lambda a: (lambda u, s, vh: u @ vh)(*torch.linalg.svd(a, full_matrices=False)),
     lambda: (crand(5, 3),)),
    ("matrix_exp", torch.linalg.matrix_exp, lambda: (crand(4, 4) * 0.3,)),
    ("lu_factor", lambda a: torch.linalg.lu_factor(a)[0], lambda: (crand(4, 4),)),
    ("solve_triangular", lambda a, b: torch.linalg.solve_triangular(a, b, upper=False),
     lambda: (torch.linalg.cholesky(hermitian_pd(4)), crand(4, 2, seed=1))),
])
def test_gradients(name, fn, make):
    args = make()
    run = grads(fn)
    want = run(*args)
    got = run(*to_tpu(args))
    for g, w in zip(got, want):
        assert g.device.type == "tpu"
        torch.testing.assert_close(g.cpu(), w, atol=1e-4, rtol=1e-3)
