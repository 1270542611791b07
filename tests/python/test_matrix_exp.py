"""linalg.matrix_exp against CPU PyTorch: the degree CPU picks from the 1-norm,
its evaluation scheme, and its scaling-and-squaring count.

Matrices up to 7x7 are products CPU computes with its plain bmm loop, which
the lowering repeats, so there the results are compared bit for bit.
"""
import pytest
import torch

from conftest import assert_same, check, check_grad

# A 1-norm inside each of CPU's degree intervals (1, 2, 4, 8, 12, 18 and 18
# with 4 squarings), per dtype.
NORMS = {
    torch.float32: [5e-8, 3e-4, 0.02, 0.3, 1.0, 2.5, 40.0],
    torch.float64: [1e-16, 1e-8, 2e-4, 0.03, 0.2, 0.8, 40.0],
}
EXACT = dict(atol=0, rtol=0)


def with_norm(norms, n, dtype, seed=0):
    """Random [len(norms), n, n] matrices whose 1-norms are `norms`."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(len(norms), n, n, generator=g, dtype=torch.float64)
    a = a / torch.linalg.matrix_norm(a, ord=1)[:, None, None]
    return (a * torch.tensor(norms, dtype=torch.float64)[:, None, None]).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("degree", range(7))
@pytest.mark.parametrize("n", [2, 5])
def test_single_matrix_uses_cpus_degree_for_its_norm(dtype, degree, n):
    a = with_norm([NORMS[dtype][degree]], n, dtype, seed=degree)[0]
    check(torch.linalg.matrix_exp, a, **EXACT)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batch_with_mixed_norms_scales_and_squares_each(dtype):
    a = with_norm(NORMS[dtype] + [7.0, 0.0], 5, dtype, seed=1)
    check(torch.linalg.matrix_exp, a, **EXACT)
    check(torch.linalg.matrix_exp, a.reshape(3, 3, 5, 5), **EXACT)


def test_large_norm_entries_with_cancellation():
    # exp of a norm-27 matrix reaches 1e5 while some entries stay near 1: the
    # absolute tolerance there needs CPU's rounding, not just its accuracy.
    g = torch.Generator().manual_seed(2)
    a = torch.randn(5, 5, 5, generator=g) * 2.5
    check(torch.linalg.matrix_exp, a, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("batch", [(), (3,)])
def test_larger_matrices_match_to_rounding(batch, highest_precision):
    g = torch.Generator().manual_seed(3)
    a = torch.randn(*batch, 12, 12, generator=g) * 0.2
    check(torch.linalg.matrix_exp, a, atol=1e-5, rtol=1e-5)


def test_non_finite_matrices_follow_cpu():
    a = with_norm([0.5, 0.5, 80.0, 2.0], 3, torch.float32, seed=4)
    a[0, 1, 2] = float("nan")
    a[1, 0, 0] = float("inf")
    check(torch.linalg.matrix_exp, a, **EXACT)
    check(torch.linalg.matrix_exp, a[0], **EXACT)
    check(torch.linalg.matrix_exp, a[1], **EXACT)


@pytest.mark.parametrize("shape", [(4, 1, 1), (1, 1), (0, 3, 3), (2, 0, 0)])
def test_trivial_sizes(shape):
    # 1x1 is the elementwise exp on CPU too (compared at exp's tolerance).
    g = torch.Generator().manual_seed(5)
    check(torch.linalg.matrix_exp, torch.randn(*shape, generator=g))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_compute_in_float32(dtype):
    # CPU's own 16-bit matrix_exp overflows; the reference is its f32 result.
    a = with_norm([0.3, 2.0, 9.0], 4, torch.float32, seed=6).to(dtype)
    actual = torch.linalg.matrix_exp(a.to("tpu"))
    assert actual.dtype == dtype
    tol = 1e-3 if dtype == torch.float16 else 1.6e-2
    assert_same(actual.float(), torch.linalg.matrix_exp(a.float()).to(dtype).float(),
                atol=tol, rtol=tol)


@pytest.mark.parametrize("norm", [0.02, 1.0, 40.0])
def test_backward_runs_matrix_exp_on_the_block_matrix(norm):
    a = with_norm([norm, norm / 3], 3, torch.float32, seed=7)
    grad = with_norm([1.0, 1.0], 3, torch.float32, seed=8)
    check_grad(torch.linalg.matrix_exp, a, grad=grad, **EXACT)
    check_grad(torch.linalg.matrix_exp, a[0], grad=grad[0], **EXACT)
