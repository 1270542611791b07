"""histogram, histogramdd and bincount on tpu against CPU."""
import pytest
import torch

from conftest import check


def test_histogram_bin_count_and_edges():
    x, w = torch.randn(30), torch.rand(30)
    check(lambda x: torch.histogram(x, 6), x)
    check(lambda x, w: torch.histogram(x, 5, range=(-1.0, 1.0), weight=w, density=True), x, w)
    check(lambda x, b: torch.histogram(x, b), x, torch.tensor([-2.0, -0.5, 0.0, 0.3, 2.0]))
    check(lambda x: torch.histogram(x, 3), torch.ones(4))  # an empty range widens by 0.5
    check(lambda x: torch.histogram(x, 2), torch.ones(0))  # no data: edges over [0, 1]


def test_histogramdd():
    x = torch.randn(20, 2)
    check(lambda x: torch.histogramdd(x, [3, 4]), x)
    check(lambda x, a, b: torch.histogramdd(x, [a, b], density=True), x,
          torch.tensor([-1.0, 0.0, 1.0]), torch.tensor([-2.0, 0.5, 3.0]))


@pytest.mark.parametrize("weights", [None, torch.float32, torch.int64])
def test_bincount(weights):
    x = torch.tensor([4, 1, 1, 0, 7, 4, 4])
    w = None if weights is None else torch.arange(7).to(weights)
    for minlength in (0, 10):
        check(lambda x, w: torch.bincount(x, w, minlength), x, w)
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([1, -1]).to("tpu"))
