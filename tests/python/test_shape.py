"""Data-moving shape ops on tpu against CPU: cat, flip, roll, repeat, padding,
triangles, diagonals, and the backward/scatter forms of views."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_same, check, check_grad


X = torch.randn(3, 4)
Z = torch.randn(2, 3, 4, 5)
DTYPES = [torch.float32, torch.int64, torch.bool]


def sample(dtype, *shape):
    return (torch.randn(*shape) * 5).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cat_and_stack(dtype):
    x = sample(dtype, 3, 4)
    check(lambda a, b: torch.cat([a, b], -1), x, sample(dtype, 3, 2))
    check(lambda a, b: torch.stack([a, b], 1), x, x)


def test_cat_promotes_and_skips_legacy_empty():
    check(lambda a, b, e: torch.cat([a, b, e]), X, torch.arange(4).reshape(1, 4), torch.empty(0))
    check(lambda a, b: torch.cat([a, b]), torch.empty(0, 4), torch.empty(0, 4))
    check(lambda a, b: torch.cat([a, b], 1), X > 0, torch.empty(3, 0, dtype=torch.bool))


@pytest.mark.parametrize("dtype", DTYPES)
def test_flip_roll_repeat(dtype):
    x = sample(dtype, 3, 4)
    check(lambda x: x.flip(0, -1), x)
    check(lambda x: x.roll((1, -5), (0, 1)), x)
    check(lambda x: x.roll(5), x)
    check(lambda x: x.repeat(2, 1, 3), x)


def test_repeat_tile_rot90_empty():
    check(lambda x: x.tile(2), X)
    check(lambda x: torch.rot90(x, 1, (0, 1)), X)
    check(lambda x: x.repeat(0, 2), X)
    check(lambda x: x.roll(2, 0), torch.empty(0, 3))


def test_constant_pad_grows_and_crops():
    check(lambda x: F.pad(x, (1, 2, -1, 1), value=3.5), X)
    check(lambda x: F.pad(x, (2, 0)), torch.arange(6).reshape(2, 3))


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_edge_pads_1d_2d_3d(mode):
    check(lambda z: F.pad(z, (2, 3), mode=mode), Z[0])
    check(lambda z: F.pad(z, (2, 3, 1, 2), mode=mode), Z)
    check(lambda z: F.pad(z, (2, 3, 1, 2, 0, 1), mode=mode), Z)


def test_replicate_pad_negative_crops():
    check(lambda z: F.pad(z, (-1, 2), mode="replicate"), Z[0])


@pytest.mark.parametrize("mode", ["reflect", "replicate", "constant"])
def test_pad_backward(mode):
    check_grad(lambda z: F.pad(z, (2, 3, 1, 2), mode=mode), Z[:1, :2],
               grad=torch.randn(1, 2, 7, 10), atol=1e-5, rtol=1e-5)
    check_grad(lambda z: F.pad(z, (1, 2), mode=mode), Z[0, :2],
               grad=torch.randn(2, 4, 8), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tril_triu(dtype):
    x = sample(dtype, 2, 3, 4)
    check(lambda x: x.tril(1), x)
    check(lambda x: x.triu(-1), x)


def test_diag_embed_and_diag():
    check(lambda x: torch.diag_embed(x), X)
    check(lambda x: torch.diag_embed(x, 1, 0, 2), X)
    check(lambda x: torch.diag_embed(x, -2, 2, 0), X)
    check(lambda x: torch.diag(x, -1), X[0])


def test_view_scatters():
    check(lambda x, s: x.diagonal_scatter(s, 1), X, torch.randn(3))
    check(lambda x, s: x.diagonal_scatter(s, -1, 1, 0), X, torch.randn(3))
    check(lambda x, s: x.select_scatter(s, 0, -1), X, torch.randn(4))
    check(lambda x, s: x.slice_scatter(s, 1, 1, None, 2), X, torch.randn(3, 2))
    check(lambda x, s: x.slice_scatter(s, 0, -2), X, torch.randn(2, 4))
    check(lambda x, s: x.as_strided_scatter(s, (2, 2), (4, 1), 1), X, torch.randn(2, 2))


def test_view_backward_ops():
    ops = torch.ops.aten
    check(lambda g: ops.select_backward(g, [3, 4], 0, -1), torch.randn(4))
    check(lambda g: ops.slice_backward(g, [3, 7], 1, 1, 7, 3), torch.randn(3, 2))
    check(lambda g: ops.diagonal_backward(g, [2, 3, 4], -1, 2, 1), torch.randn(2, 3))
    check(lambda g: ops.unfold_backward(g, [3, 5], 1, 2, 1), torch.randn(3, 4, 2))
    check(lambda g: ops.unfold_backward(g, [3, 7], 1, 2, 3), torch.randn(3, 2, 2))


def test_view_grads_through_autograd():
    check_grad(lambda x: x[1], X, grad=torch.randn(4))
    check_grad(lambda x: x[:, 1::2], X, grad=torch.randn(3, 2))
    check_grad(lambda x: x.diagonal(1), X, grad=torch.randn(3))
    check_grad(lambda x: x.unfold(1, 2, 1), X, grad=torch.randn(3, 3, 2))


def test_cat_flip_roll_backward():
    check_grad(lambda a, b: torch.cat([a, b], 1), X, torch.randn(3, 2), grad=torch.randn(3, 6))
    check_grad(lambda a: a.flip(0), X, grad=torch.randn(3, 4))
    check_grad(lambda a: a.roll(2, 1), X, grad=torch.randn(3, 4))


@pytest.mark.skipif("aten::sum.dim_IntList" not in torch_tpu.native_ops(),
                    reason="repeat's backward sums (reduction family)")
def test_repeat_backward():
    check_grad(lambda a: a.repeat(2, 1), X, grad=torch.randn(6, 4))


def test_to_dtype_and_clone():
    check(lambda x: x.to(torch.int64), X * 3)
    check(lambda x: x.t().clone(), X)


def test_unfold_of_a_0_dim_tensor_backward():
    check_grad(lambda x: x.unfold(0, 1, 1), torch.tensor(3.0), grad=torch.tensor([2.0]))
