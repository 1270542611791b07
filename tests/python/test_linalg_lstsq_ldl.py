"""geqrf, linalg_lstsq (every driver) and LDL factorization and solve on tpu,
against CPU."""
import pytest
import torch

from conftest import check, check_grad


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


def _self_adjoint(n, dtype, hermitian, seed):
    torch.manual_seed(seed)
    a = torch.randn(3, n, n, dtype=dtype)
    return a + (a.mH if hermitian else a.mT)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("hermitian", [False, True])
def test_complex_ldl_factor_and_solve_match_cpu(dtype, hermitian):
    """zsytf2/zsytrs (complex symmetric) and zhetf2/zhetrs (Hermitian: a real
    diagonal, pivots by |re| + |im| and a diagonal's |real part|): pivots
    equal CPU's, and 1x1 swaps and 2x2 blocks both occur."""
    tol = 1e-4 if dtype == torch.complex64 else 1e-10
    pivots = []
    for seed, n in [(1, 5), (2, 8), (3, 6)]:
        a = _self_adjoint(n, dtype, hermitian, seed)
        a[1, 0, 0] = 0  # a 2x2 block first
        ld, piv, info = torch.linalg.ldl_factor_ex(a, hermitian=hermitian)
        pivots.append(piv)
        got = torch.linalg.ldl_factor_ex(a.to("tpu"), hermitian=hermitian)
        assert torch.equal(got.pivots.cpu(), piv) and torch.equal(got.info.cpu(), info)
        torch.testing.assert_close(got.LD.cpu(), ld, atol=tol, rtol=tol)
        if hermitian:
            assert torch.equal(got.LD.cpu().diagonal(dim1=-2, dim2=-1).imag, torch.zeros(3, n, dtype=ld.real.dtype))
        rhs = torch.randn(3, n, 2, dtype=dtype)
        x = torch.linalg.ldl_solve(ld, piv, rhs, hermitian=hermitian)
        got_x = torch.linalg.ldl_solve(got.LD, got.pivots, rhs.to("tpu"), hermitian=hermitian)
        torch.testing.assert_close(got_x.cpu(), x, atol=tol * 10, rtol=tol * 10)
    blocks = any((p < 0).any() for p in pivots)
    swaps = any(((p > 0) & (p != torch.arange(1, p.shape[-1] + 1, dtype=p.dtype))).any() for p in pivots)
    assert blocks and swaps


def test_complex_ldl_solve_of_a_hermitian_factor_is_the_hermitian_solve():
    """ldl_solve(hermitian=True) solves A x = b for the Hermitian A the factor
    came from; the symmetric solve of the same factor does not."""
    a = _self_adjoint(6, torch.complex128, True, 4)
    b = torch.randn(3, 6, 1, dtype=torch.complex128)
    f = torch.linalg.ldl_factor_ex(a.to("tpu"), hermitian=True)
    x = torch.linalg.ldl_solve(f.LD, f.pivots, b.to("tpu"), hermitian=True).cpu()
    torch.testing.assert_close(a @ x, b, atol=1e-10, rtol=1e-10)
    wrong = torch.linalg.ldl_solve(f.LD, f.pivots, b.to("tpu"), hermitian=False).cpu()
    assert (a @ wrong - b).abs().max() > 1e-3
