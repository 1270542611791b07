"""Margin losses (multi_margin, multilabel_margin) and CTC loss on tpu against
CPU, forward and backward."""
import pytest
import torch
import torch.nn.functional as F

from conftest import check, check_grad


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_multi_margin_loss(p, reduction):
    x, target, weight = torch.randn(4, 5), torch.tensor([0, 3, 4, 1]), torch.rand(5)
    fn = lambda x, t, w: F.multi_margin_loss(x, t, p=p, margin=0.7, weight=w, reduction=reduction)
    out = check(fn, x, target, weight, atol=1e-6, rtol=1e-5)
    check_grad(lambda x: fn(x, target.to(x.device), weight.to(x.device)), x,
               grad=torch.randn(out.shape), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("reduction", ["none", "sum"])
def test_multilabel_margin_loss(reduction):
    x = torch.randn(3, 5)
    target = torch.tensor([[3, 0, -1, 1, 2], [0, 0, 1, -1, 4], [1, 2, 3, 4, 0]])
    fn = lambda x, t: F.multilabel_margin_loss(x, t, reduction=reduction)
    out = check(fn, x, target, atol=1e-6, rtol=1e-5)
    check_grad(lambda x: fn(x, target.to(x.device)), x, grad=torch.randn(out.shape),
               atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("reduction", ["none", "mean"])
@pytest.mark.parametrize("concatenated", [False, True])
def test_ctc_loss(reduction, concatenated):
    T, N, C = 10, 3, 5
    log_probs = torch.randn(T, N, C).log_softmax(2)
    target_lengths, input_lengths = [3, 0, 2], [10, 7, 4]
    targets = (torch.tensor([1, 2, 2, 4, 3]) if concatenated
               else torch.tensor([[1, 2, 2], [0, 0, 0], [4, 3, 1]]))
    fn = lambda lp, t: F.ctc_loss(lp, t, input_lengths, target_lengths, reduction=reduction)
    out = check(fn, log_probs, targets, atol=1e-5, rtol=1e-5)
    check_grad(lambda lp: fn(lp, targets.to(lp.device)), log_probs, grad=torch.rand(out.shape),
               atol=1e-5, rtol=1e-5)


def test_ctc_loss_impossible_alignment_is_infinite_or_zeroed():
    log_probs = torch.randn(3, 1, 4).log_softmax(2)
    targets = torch.tensor([[1, 1, 2]])  # needs 4 steps: 1, blank, 1, 2
    for zero_infinity in (False, True):
        fn = lambda lp, t: F.ctc_loss(lp, t, [3], [3], reduction="sum",
                                      zero_infinity=zero_infinity)
        check(fn, log_probs, targets)
    check_grad(lambda lp: F.ctc_loss(lp, targets.to(lp.device), [3], [3], zero_infinity=True),
               log_probs, grad=torch.tensor(1.0))
