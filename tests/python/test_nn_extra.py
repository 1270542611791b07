"""index_reduce, max_unpool, segment_reduce, embedding_renorm, margin losses,
grid sampling (2-d bicubic, 3-d), antialiased bilinear upsampling, histograms,
bincount and unfold of a 0-dim tensor: tpu against CPU, forward and backward."""
import pytest
import torch
import torch.nn.functional as F

from conftest import assert_same, check, check_grad


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


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_bicubic(padding):
    x, grid = torch.randn(1, 2, 5, 4), torch.rand(1, 3, 4, 2) * 2.6 - 1.3
    check_grad(lambda x, g: F.grid_sample(x, g, mode="bicubic", padding_mode=padding,
                                          align_corners=False),
               x, grid, grad=torch.randn(1, 2, 3, 4), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_3d(mode, align):
    x, grid = torch.randn(1, 2, 3, 4, 5), torch.rand(1, 2, 3, 2, 3) * 2.6 - 1.3
    check_grad(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode="reflection",
                                          align_corners=align),
               x, grid, grad=torch.randn(1, 2, 2, 3, 2), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("size,align", [((3, 4), False), ((7, 2), True)])
def test_upsample_bilinear_antialias(size, align):
    x = torch.randn(1, 2, 8, 5)
    fn = lambda x: F.interpolate(x, size=size, mode="bilinear", antialias=True,
                                 align_corners=align)
    check(fn, x, atol=1e-6, rtol=1e-5)
    check_grad(fn, x, grad=torch.randn(1, 2, *size), atol=1e-6, rtol=1e-5)


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


def test_unfold_of_a_0_dim_tensor_backward():
    check_grad(lambda x: x.unfold(0, 1, 1), torch.tensor(3.0), grad=torch.tensor([2.0]))


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


def test_index_reduce_int64_amin_without_self_starts_from_the_largest_int64():
    x = torch.full((3,), 2**62)
    src = torch.tensor([2**62 + 5, 7])
    check(lambda x, i, s: x.index_reduce(0, i, s, "amin", include_self=False), x,
          torch.tensor([0, 0]), src)
