"""LU, QR, eigh and SVD lowerings (hand-written loops) against CPU PyTorch."""
import pytest
import torch

from conftest import assert_same, check, check_grad, to_tpu


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


@pytest.mark.parametrize("shape, dtype", [((2, 4, 4), torch.float32), ((3, 5), torch.float64),
                                          ((5, 3), torch.float64)])
def test_lu_factor_ex_matches_lapack_pivots(shape, dtype):
    check(torch.linalg.lu_factor_ex, rand(*shape, dtype=dtype))


def test_lu_factor_ex_info_is_first_zero_pivot():
    a = torch.tensor([[[1.0, 2.0], [2.0, 4.0]], [[0.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 4.0]]])
    check(torch.linalg.lu_factor_ex, a)


@pytest.mark.parametrize("shape", [(2, 4, 4), (3, 5), (5, 3)])
def test_linalg_lu_and_lu_unpack(shape):
    a = rand(*shape, dtype=torch.float64)
    check(torch.linalg.lu, a)
    lu, piv = torch.linalg.lu_factor(a)
    check(torch.lu_unpack, lu, piv)
    check(lambda x, p: torch.lu_unpack(x, p, unpack_data=False)[0], lu, piv)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve_left_and_adjoint(left, adjoint):
    a, b = rand(2, 4, 4, dtype=torch.float64), rand(2, 4, 3, dtype=torch.float64, seed=1)
    lu, piv = torch.linalg.lu_factor(a)
    rhs = b if left else b.mT
    check(lambda x, p, y: torch.linalg.lu_solve(x, p, y, left=left, adjoint=adjoint), lu, piv, rhs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inv_det_slogdet(dtype):
    a = rand(3, 4, 4, dtype=dtype)
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else {}
    check(torch.linalg.inv_ex, a, **tol)
    check(torch.linalg.det, a, **tol)
    check(torch.linalg.slogdet, a, **tol)


def test_singular_det_slogdet_and_inv_info():
    a = torch.tensor([[1.0, 2.0], [2.0, 4.0]])
    check(torch.linalg.det, a)
    check(torch.linalg.slogdet, a)
    assert torch.linalg.inv_ex(to_tpu(a)).info.item() == torch.linalg.inv_ex(a).info.item() == 2
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.inv(to_tpu(a))


def test_solve_matrix_vector_and_right():
    a = rand(2, 4, 4, dtype=torch.float64)
    check(torch.linalg.solve, a, rand(2, 4, 3, dtype=torch.float64, seed=1))
    check(torch.linalg.solve, a, rand(4, dtype=torch.float64, seed=2))
    check(lambda x, y: torch.linalg.solve(x, y, left=False), a, rand(3, 4, dtype=torch.float64, seed=3))


def test_empty_matrices():
    check(torch.linalg.inv, rand(0, 3, 3))
    check(torch.linalg.det, rand(2, 0, 0))
    check(torch.linalg.qr, rand(3, 0))


@pytest.mark.parametrize("mode, shape", [("reduced", (2, 5, 3)), ("complete", (2, 5, 3)),
                                         ("r", (2, 5, 3)), ("reduced", (3, 5))])
def test_qr_modes(mode, shape):
    check(lambda x: torch.linalg.qr(x, mode=mode), rand(*shape, dtype=torch.float64))


def test_householder_product_and_ormqr():
    a, tau = torch.geqrf(rand(2, 5, 3, dtype=torch.float64))
    c = rand(2, 5, 2, dtype=torch.float64, seed=1)
    check(torch.linalg.householder_product, a, tau)
    for left, trans in [(True, False), (True, True)]:
        check(lambda x, t, y: torch.ormqr(x, t, y, left=left, transpose=trans), a, tau, c)
    check(lambda x, t, y: torch.ormqr(x, t, y, left=False, transpose=True), a, tau, c.mT)


@pytest.mark.parametrize("uplo, dtype", [("L", torch.float32), ("U", torch.float64)])
def test_eigh_decomposes(uplo, dtype):
    a = rand(2, 5, 5, dtype=dtype)
    w_cpu = torch.linalg.eigvalsh(a, UPLO=uplo)
    w, v = torch.linalg.eigh(to_tpu(a), UPLO=uplo)
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    assert_same(w, w_cpu, atol=tol, rtol=tol)
    sym = torch.linalg.eigh(a, UPLO=uplo)[1] @ torch.diag_embed(w_cpu) @ torch.linalg.eigh(a, UPLO=uplo)[1].mT
    v, w = v.cpu(), w.cpu()
    torch.testing.assert_close(v @ torch.diag_embed(w) @ v.mT, sym, atol=tol, rtol=tol)
    torch.testing.assert_close(v.mT @ v, torch.eye(5, dtype=dtype).expand(2, 5, 5), atol=tol, rtol=tol)


@pytest.mark.parametrize("shape, full", [((2, 5, 3), False), ((2, 5, 3), True), ((3, 5), True)])
def test_svd_decomposes(shape, full):
    a = rand(*shape, dtype=torch.float64)
    u, s, vh = torch.linalg.svd(to_tpu(a), full_matrices=full)
    u_cpu, s_cpu, vh_cpu = torch.linalg.svd(a, full_matrices=full)
    assert u.shape == u_cpu.shape and vh.shape == vh_cpu.shape
    assert_same(s, s_cpu)
    u, s, vh = u.cpu(), s.cpu(), vh.cpu()
    k = s.shape[-1]
    torch.testing.assert_close(u[..., :k] @ torch.diag_embed(s) @ vh[..., :k, :], a)
    eye = torch.eye(u.shape[-1], dtype=a.dtype)
    torch.testing.assert_close(u.mT @ u, eye.expand_as(u.mT @ u))


def test_svdvals_of_rank_deficient_matrix():
    a = rand(4, 2, dtype=torch.float64) @ rand(2, 5, dtype=torch.float64, seed=1)
    check(torch.linalg.svdvals, a, atol=1e-10, rtol=1e-10)
    u = torch.linalg.svd(to_tpu(a)).U.cpu()
    torch.testing.assert_close(u.mT @ u, torch.eye(4, dtype=a.dtype))


def test_grads_through_composite_formulas(highest_precision):
    a = rand(3, 3) + 3 * torch.eye(3)
    check_grad(torch.linalg.det, a, grad=torch.tensor(1.0), atol=1e-4, rtol=1e-4)
    check_grad(torch.linalg.inv, a, grad=rand(3, 3, seed=1), atol=1e-4, rtol=1e-4)
    check_grad(lambda x: torch.linalg.svdvals(x).sum(), rand(4, 3), grad=torch.tensor(1.0),
               atol=1e-4, rtol=1e-4)
    check_grad(lambda x: torch.linalg.eigvalsh(x).sum(), rand(3, 3), grad=torch.tensor(1.0),
               atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("scale, dtype", [(0.1, torch.float32), (10.0, torch.float64)])
def test_matrix_exp_scaling_and_squaring(scale, dtype):
    a = rand(2, 4, 4, dtype=dtype) * scale
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else {}
    check(torch.linalg.matrix_exp, a, **tol)
    check(torch.linalg.matrix_exp, torch.zeros(3, 3, dtype=dtype))
