"""CPU's own arithmetic, matched bit for bit: the grid sampler's summation
order and 16-bit steps, adaptive average pooling's divisions, nll_loss's
16-bit cascade, bf16 batch statistics, embedding renorm's scale, f16
subnormals in round_like, _foreach_pow's scalar dtype and pow by small
integers (CPU multiplies). Every comparison is
exact against CPU PyTorch."""
import pytest
import torch
import torch.nn.functional as F

from conftest import to_tpu

HALF = [torch.float16, torch.bfloat16]


def assert_exact(actual, expected):
    assert actual.device.type == "tpu" and actual.dtype == expected.dtype
    a = actual.cpu()
    same = (a == expected) | (a.isnan() & expected.isnan())
    assert bool(same.all()), f"{int((~same).sum())} of {a.numel()} elements differ"


def _gen(seed):
    return torch.Generator().manual_seed(seed)


# -- grid sampler ------------------------------------------------------------------

@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_3d_grid_grad_sums_like_cpu(padding, align):
    # 21 channels x 8 corners: a tree sum over channels differs from CPU's
    # running sum by more than OpInfo's f32 tolerance on some elements.
    g = _gen(0)
    x = torch.randn(2, 21, 6, 7, 8, generator=g)
    grid = torch.rand(2, 5, 4, 3, 3, generator=g) * 6 - 3  # reflection needs |g| > 1
    cot = torch.randn(2, 21, 5, 4, 3, generator=g)

    def grads(device):
        xi = x.to(device).requires_grad_()
        gi = grid.to(device).requires_grad_()
        out = F.grid_sample(xi, gi, padding_mode=padding, align_corners=align)
        return out, *torch.autograd.grad(out, [xi, gi], cot.to(device))

    want, got = grads("cpu"), grads("tpu")
    assert_exact(got[0], want[0])
    assert_exact(got[2], want[2])  # the grid gradient: bit for bit
    torch.testing.assert_close(got[1].cpu(), want[1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_2d_16bit_rounds_every_step(dtype, padding, mode):
    g = _gen(1)
    x = (torch.randn(2, 3, 9, 11, generator=g) * 4).to(dtype)
    grid = (torch.rand(2, 7, 6, 2, generator=g) * 5 - 2.5).to(dtype)
    for align in (False, True):
        want = F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)
        got = F.grid_sample(*to_tpu((x, grid)), mode=mode, padding_mode=padding,
                            align_corners=align)
        assert_exact(got, want)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_3d_16bit_rounds_every_step(dtype, padding):
    # Reflection in f16 rounds d / span before its floor: without that a tap
    # lands on the other side of a flip (errors of order 1, not ulps).
    g = _gen(2)
    x = (torch.randn(2, 3, 5, 20, 20, generator=g) * 4).to(dtype)
    grid = (torch.rand(2, 6, 5, 4, 3, generator=g) * 6 - 3).to(dtype)
    for align in (False, True):
        for mode in ("bilinear", "nearest"):
            want = F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)
            got = F.grid_sample(*to_tpu((x, grid)), mode=mode, padding_mode=padding,
                                align_corners=align)
            assert_exact(got, want)


# -- adaptive average pooling ----------------------------------------------------------

@pytest.mark.parametrize("dtype", HALF)
def test_adaptive_avg_pool3d_16bit_sums_in_its_type(dtype):
    x = (torch.randn(2, 3, 8, 8, 6, generator=_gen(3)) * 3).to(dtype)
    for size in [(5, 7, 4), (3, 2, 5), (8, 3, 1)]:
        assert_exact(F.adaptive_avg_pool3d(to_tpu(x), size), F.adaptive_avg_pool3d(x, size))
    want = F.interpolate(x, size=(5, 5, 5), mode="area")
    assert_exact(F.interpolate(to_tpu(x), size=(5, 5, 5), mode="area"), want)


@pytest.mark.parametrize("dtype", HALF)
def test_adaptive_avg_pool2d_divides_by_each_extent(dtype):
    # 2-d sums in f32 (exact for a few 16-bit values), then / kh / kw.
    x = (torch.randn(4, 3, 13, 11, generator=_gen(4)) * 3).to(dtype)
    for size in [(5, 7), (4, 3)]:
        assert_exact(F.adaptive_avg_pool2d(to_tpu(x), size), F.adaptive_avg_pool2d(x, size))


# -- nll_loss ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_16bit_cascade(dtype, reduction, weighted):
    # 300 samples: level 0 is flushed every 16, level 1 at 256.
    g = _gen(5)
    x = (torch.randn(300, 5, generator=g) * 3).to(dtype)
    target = torch.randint(0, 5, (300,), generator=g)
    target[::7] = -100
    w = (torch.rand(5, generator=g) * 2).to(dtype) if weighted else None
    want = F.nll_loss(x, target, weight=w, reduction=reduction)
    assert_exact(F.nll_loss(*to_tpu((x, target)), weight=to_tpu(w), reduction=reduction), want)
    x4 = (torch.randn(3, 4, 5, 6, generator=g) * 3).to(dtype)
    t4 = torch.randint(0, 4, (3, 5, 6), generator=g)
    w4 = w[:4] if weighted else None
    want = F.nll_loss(x4, t4, weight=w4, reduction=reduction)
    assert_exact(F.nll_loss(*to_tpu((x4, t4)), weight=to_tpu(w4), reduction=reduction), want)


# -- bf16 batch statistics -----------------------------------------------------------

def test_instance_norm_bf16_statistics():
    g = _gen(6)
    x = (torch.randn(3, 4, 5, 6, generator=g) * 5 + 2).bfloat16()
    w, b = (torch.randn(4, generator=g) * 3).bfloat16(), torch.randn(4, generator=g).bfloat16()
    for eps in (1e-5, 0.5):
        want = F.instance_norm(x, weight=w, bias=b, eps=eps)
        assert_exact(F.instance_norm(*to_tpu((x,)), weight=to_tpu(w), bias=to_tpu(b), eps=eps),
                     want)


def test_batch_norm_bf16_training_outputs_and_stats():
    g = _gen(7)
    x = (torch.randn(6, 3, 7, generator=g) * 4 - 1).bfloat16()
    w, b = torch.randn(3, generator=g).bfloat16(), torch.randn(3, generator=g).bfloat16()
    rm, rv = torch.zeros(3).bfloat16(), torch.ones(3).bfloat16()
    want = torch.native_batch_norm(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    got = torch.native_batch_norm(*to_tpu((x, w, b, rm.clone(), rv.clone())), True, 0.1, 1e-5)
    for a, e in zip(got, want):
        assert_exact(a, e)


# -- embedding renorm --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", HALF)
def test_embedding_renorm_scales_in_row_type(dtype):
    g = _gen(8)
    weight = (torch.randn(10, 6, generator=g) * 4).to(dtype)
    idx = torch.tensor([[1, 3, 3], [7, 0, 9]])
    want = weight.clone()
    torch.embedding_renorm_(want, idx, 1.0, 2.0)
    got = to_tpu(weight.clone())
    torch.embedding_renorm_(got, to_tpu(idx), 1.0, 2.0)
    assert_exact(got, want)
    psw = torch.randn(2, 3, generator=g).to(dtype)
    want = F.embedding_bag(idx, weight.clone(), max_norm=1.0, mode="sum", per_sample_weights=psw)
    got = F.embedding_bag(to_tpu(idx), to_tpu(weight.clone()), max_norm=1.0, mode="sum",
                          per_sample_weights=to_tpu(psw))
    assert_exact(got, want)


# -- f16 subnormals ------------------------------------------------------------------------

def test_f16_steps_keep_subnormals():
    # The inputs and products are below f16's smallest normal (2^-14), where
    # XLA:CPU's reduce_precision would flush them to zero.
    g = _gen(9)
    x = (torch.rand(1, 1, 4, 4, 4, generator=g) * 4e-5).half()
    grid = (torch.rand(1, 3, 3, 3, 3, generator=g) * 2 - 1).half()
    want = F.grid_sample(x, grid, align_corners=False)
    assert bool(((want.abs() < 2 ** -14) & (want != 0)).sum() > 20)
    assert_exact(F.grid_sample(*to_tpu((x, grid)), align_corners=False), want)


@pytest.mark.parametrize("exponent", [True, False, 2, 0.5])
def test_foreach_pow_scalar_dtype_and_values_match_cpu(exponent):
    # PyTorch's meta function types bool ** True as int64; CPU returns bool.
    cpu = [torch.tensor([True, False, True]), torch.tensor([1, 2, 3]), torch.rand(4)]
    want = torch._foreach_pow(cpu, exponent)
    got = torch._foreach_pow([t.to("tpu") for t in cpu], exponent)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("exponent", [2, 3, -1, -2, 2.0, 3.0])
def test_pow_by_a_small_integer_multiplies_like_cpu(dtype, exponent):
    # CPU computes x ** 2, 3, -1, -2 by multiplying (x*x*x, 1/(x*x)), each
    # step rounded in bf16, f16 in f32 rounded once; pow() differs in the
    # last bit (x ** 3 in f32 differed on a quarter of these values).
    x = (torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
    x[:5] = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan")]).to(dtype)
    assert_exact(x.to("tpu").pow(exponent), x.pow(exponent))
    assert_exact(torch.pow(x.to("tpu"), exponent), torch.pow(x, exponent))
    inplace = x.to("tpu")
    inplace.pow_(exponent)
    assert_exact(inplace, x.pow(exponent))
    out = torch.empty_like(x).to("tpu")
    torch.pow(x.to("tpu"), exponent, out=out)
    assert_exact(out, x.pow(exponent))
