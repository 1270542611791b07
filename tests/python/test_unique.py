"""The unique family on tpu (host-synced: the result's size depends on the
data), against CPU."""
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
