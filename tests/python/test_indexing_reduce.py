"""index_reduce, max_unpool, segment_reduce and embedding_renorm on tpu
against CPU, forward and backward."""
import pytest
import torch
import torch.nn.functional as F

from conftest import check, check_grad


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(reduce, include_self):
    x, src = torch.randn(5, 3), torch.randn(6, 3)
    index = torch.tensor([0, 2, 2, 4, 1, 0])
    check(lambda x, i, s: x.index_reduce(0, i, s, reduce, include_self=include_self),
          x, index, src)


def test_index_reduce_integer_mean_rounds_down():
    x, src = torch.randint(-9, 9, (4, 2)), torch.randint(-9, 9, (5, 2))
    index = torch.tensor([3, 1, 3, 3, 0])
    check(lambda x, i, s: x.index_reduce(0, i, s, "mean"), x, index, src)


def test_index_reduce_int64_amin_without_self_starts_from_the_largest_int64():
    x = torch.full((3,), 2**62)
    src = torch.tensor([2**62 + 5, 7])
    check(lambda x, i, s: x.index_reduce(0, i, s, "amin", include_self=False), x,
          torch.tensor([0, 0]), src)


def test_max_unpool_2d_and_3d_with_grad():
    x = torch.randn(2, 3, 6, 6)
    y, idx = F.max_pool2d(x, 2, return_indices=True)
    check(lambda y, i: F.max_unpool2d(y, i, 2), y, idx)
    check_grad(lambda y: F.max_unpool2d(y, idx.to(y.device), 2), y, grad=torch.randn(2, 3, 6, 6))
    x3 = torch.randn(1, 2, 4, 4, 4)
    y3, idx3 = F.max_pool3d(x3, 2, return_indices=True)
    check(lambda y, i: F.max_unpool3d(y, i, 2), y3, idx3)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
def test_segment_reduce_lengths_and_offsets(reduce):
    data = torch.randn(6, 3)
    data[2, 1] = 0.0  # a zero inside a segment: prod's gradient takes the other factors
    lengths = torch.tensor([2, 0, 3, 1])
    offsets = torch.tensor([0, 2, 2, 5, 6])
    check(lambda d, l: torch.segment_reduce(d, reduce, lengths=l, initial=1.5), data, lengths)
    check(lambda d, o: torch.segment_reduce(d, reduce, offsets=o), data, offsets)
    check_grad(lambda d: torch.segment_reduce(d, reduce, lengths=lengths.to(d.device), initial=2.0),
               data, grad=torch.randn(4, 3))


def test_segment_reduce_batched_along_axis_1():
    data = torch.randn(3, 5)
    lengths = torch.tensor([[2, 0, 3], [1, 1, 3], [0, 4, 1]])
    check(lambda d, l: torch.segment_reduce(d, "mean", lengths=l, axis=1), data, lengths)


def test_embedding_renorm_scales_referenced_rows_only():
    w = torch.randn(6, 4) * 3
    idx = torch.tensor([0, 2, 2, 5])
    check(lambda w, i: torch.embedding_renorm_(w.clone(), i, 1.0, 2.0), w, idx)
    check(lambda w, i: torch.embedding_renorm_(w.clone(), i, 2.0, 1.0), w, idx)
