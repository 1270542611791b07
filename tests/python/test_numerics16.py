"""bfloat16/float16 results match CPU PyTorch's numerics: ops CPU computes in
f32 and rounds once (opmath: addcmul, lerp, add with alpha, the _foreach_
family, convolution accumulation) and ops CPU computes as a chain of 16-bit
steps, each rounded (addr, mse_loss, soft_margin_loss, bce_with_logits).

Comparisons count units in the last place of the 16-bit dtype: every element
within one ulp (CPU's fused multiply-adds round a few elements differently)
and nearly all exact. Inputs are chosen so that a sum cancels, where one
extra 16-bit rounding inside the computation costs many ulps."""
import pytest
import torch
import torch.nn.functional as F

DTYPES = [torch.bfloat16, torch.float16]


def _ordered(t):
    """16-bit floats as integers in the order of their values."""
    k = t.contiguous().view(torch.int16).to(torch.int32)
    return torch.where(k < 0, -(k & 0x7FFF), k)


def assert_ulp_close(actual, expected, max_inexact=0.01):
    assert actual.device.type == "tpu" and actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    a, e = actual.cpu(), expected
    nan = e.isnan()
    assert torch.equal(a.isnan(), nan)
    a, e = a[~nan], e[~nan]
    ulps = (_ordered(a) - _ordered(e)).abs()
    assert ulps.max().item() <= 1, f"{ulps.max().item()} ulps apart"
    assert (ulps > 0).float().mean().item() <= max_inexact, "too many 1-ulp differences"


def _cancelling(dtype, n=512, seed=0):
    """(self, t1, t2) with self close to -(t1 * t2)."""
    g = torch.Generator().manual_seed(seed)
    t1 = torch.randn(n, generator=g).to(dtype)
    t2 = torch.randn(n, generator=g).to(dtype)
    s = (-(t1.float() * t2.float()) * (1 + 0.01 * torch.randn(n, generator=g))).to(dtype)
    return s, t1, t2


def _run(fn, *args):
    return fn(*args), fn(*[a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["addcmul", "addcdiv", "lerp", "add_alpha", "sub_alpha", "mul"])
def test_pointwise_computes_in_f32_and_rounds_once(op, dtype):
    s, t1, t2 = _cancelling(dtype)
    fn = {
        "addcmul": lambda s, a, b: torch.addcmul(s, a, b, value=0.7),
        "addcdiv": lambda s, a, b: torch.addcdiv(s, a, b.abs() + 0.5, value=0.7),
        "lerp": lambda s, a, b: torch.lerp(s, a, 0.3),
        "add_alpha": lambda s, a, b: torch.add(s, a * b, alpha=0.9),
        "sub_alpha": lambda s, a, b: torch.sub(s, a, alpha=0.3),
        "mul": lambda s, a, b: s * 0.3,
    }[op]
    expected, actual = _run(fn, s, t1, t2)
    assert_ulp_close(actual, expected)


@pytest.mark.parametrize("dtype", DTYPES)
def test_foreach_ops_use_the_per_tensor_numerics(dtype):
    s, t1, t2 = _cancelling(dtype)
    lists = ([s, t1], [t1, t2], [t2, s])

    def fn(a, b, c):
        return (torch._foreach_addcmul(a, b, c, value=0.7)
                + torch._foreach_add(a, b, alpha=0.3)
                + torch._foreach_lerp(a, b, 0.6))

    expected = fn(*lists)
    actual = fn(*[[t.to("tpu") for t in l] for l in lists])
    for a, e in zip(actual, expected):
        assert_ulp_close(a, e)


def test_float16_convolution_accumulates_in_f32():
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(2, 4, 9, 9, generator=g) * 3).half()
    w = (torch.randn(5, 4, 3, 3, generator=g) * 3).half()
    b = torch.randn(5, generator=g).half()
    expected, actual = _run(lambda x, w, b: F.conv2d(x, w, b, padding=1), x, w, b)
    assert_ulp_close(actual, expected)


# CPU's slow transposed convolution (f16 unless the CPU has AVX512-FP16 or
# AMX-FP16; any 16-bit type where an output_padding reaches the stride) rounds
# each kernel tap's products and adds the taps one by one in the 16-bit dtype;
# oneDNN rounds once. tpu follows whichever kernel CPU takes on this host.
@pytest.mark.parametrize("dtype,kwargs", [
    (torch.float16, {"stride": 2}),
    (torch.float16, {"stride": (2, 1), "padding": 1, "groups": 2, "dilation": 2}),
    (torch.bfloat16, {"stride": (3, 2), "output_padding": (2, 3), "dilation": 4}),
    (torch.bfloat16, {"stride": 2, "output_padding": 1}),
])
def test_16_bit_transposed_convolution_sums_taps_like_cpu(dtype, kwargs):
    g = torch.Generator().manual_seed(6)
    x = (torch.randn(2, 4, 5, 5, generator=g) * 3).to(dtype)
    w = (torch.randn(4, 2, 3, 3, generator=g) * 3).to(dtype)
    b = torch.randn(2 * kwargs.get("groups", 1), generator=g).to(dtype)
    expected, actual = _run(lambda x, w, b: F.conv_transpose2d(x, w, b, **kwargs), x, w, b)
    assert_ulp_close(actual, expected, max_inexact=0.01)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scales", [{}, {"beta": 0.6, "alpha": 0.2}, {"beta": 0}])
def test_addr_rounds_each_step_like_cpu(dtype, scales):
    g = torch.Generator().manual_seed(2)
    s = torch.randn(24, 20, generator=g).to(dtype)
    v1, v2 = torch.randn(24, generator=g).to(dtype), torch.randn(20, generator=g).to(dtype)
    expected, actual = _run(lambda s, a, b: torch.addr(s, a, b, **scales), s, v1, v2)
    assert_ulp_close(actual, expected, max_inexact=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["none", "mean"])
@pytest.mark.parametrize("loss", ["mse", "soft_margin", "bce_logits", "bce_logits_weighted"])
def test_losses_round_like_cpus_16_bit_steps(loss, reduction, dtype):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(64, generator=g) * 3).to(dtype)
    p = torch.rand(64, generator=g).to(dtype)
    w = torch.rand(64, generator=g).to(dtype)
    fn = {
        "mse": lambda x, p, w: F.mse_loss(x, p * 4, reduction=reduction),
        "soft_margin": lambda x, p, w: F.soft_margin_loss(x, (p - 0.5).sign(), reduction=reduction),
        "bce_logits": lambda x, p, w: F.binary_cross_entropy_with_logits(x, p, reduction=reduction),
        "bce_logits_weighted": lambda x, p, w: F.binary_cross_entropy_with_logits(
            x, p, weight=w, pos_weight=w * 2, reduction=reduction),
    }[loss]
    expected, actual = _run(fn, x, p, w)
    assert_ulp_close(actual.reshape(-1), expected.reshape(-1), max_inexact=0.02)


def test_float32_results_are_unchanged_by_the_16_bit_rules():
    s, t1, t2 = _cancelling(torch.float32)
    expected, actual = _run(lambda s, a, b: torch.addcmul(s, a, b, value=0.7), s, t1, t2)
    torch.testing.assert_close(actual.cpu(), expected, atol=0, rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scales", [{}, {"beta": 0.6, "alpha": 0.2}])
def test_addbmm_rounds_after_each_batch_like_cpu(dtype, scales):
    g = torch.Generator().manual_seed(4)
    m = torch.randn(5, 6, generator=g).to(dtype)
    b1, b2 = torch.randn(4, 5, 7, generator=g).to(dtype), torch.randn(4, 7, 6, generator=g).to(dtype)
    expected, actual = _run(lambda m, x, y: torch.addbmm(m, x, y, **scales), m, b1, b2)
    assert_ulp_close(actual, expected, max_inexact=0.05)


@pytest.mark.parametrize("dtype", DTYPES + [torch.int64])
def test_logspace_of_one_step_uses_the_unrounded_start(dtype):
    expected = torch.logspace(4.3, 5, 1, base=5.0, dtype=dtype)
    actual = torch.logspace(4.3, 5, 1, base=5.0, dtype=dtype, device="tpu")
    assert torch.equal(actual.cpu(), expected)


@pytest.mark.parametrize("dtype", DTYPES + [torch.float32])
def test_histc_bins_by_cpus_linear_interpolation(dtype):
    # Values next to bin edges, where interpolating in the 16-bit dtype and
    # comparing against linspace edges disagree.
    x = torch.linspace(-10, 10, 401).to(dtype)
    expected, actual = _run(lambda x: torch.histc(x, 100, -10, 10), x)
    assert torch.equal(actual.cpu(), expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce,initial", [("sum", 1.0), ("sum", None), ("mean", 2.0), ("prod", 1.5)])
def test_segment_reduce_accumulates_in_order_like_cpu(dtype, reduce, initial):
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(12, 3, generator=g) * 10).to(dtype)
    lengths = torch.tensor([1, 5, 0, 6])
    expected = torch.segment_reduce(x, reduce, lengths=lengths, initial=initial, unsafe=True)
    actual = torch.segment_reduce(x.to("tpu"), reduce, lengths=lengths.to("tpu"), initial=initial,
                                  unsafe=True)
    assert_ulp_close(actual, expected, max_inexact=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode,shape,size", [("linear", (16, 3, 4), (11,)),
                                             ("trilinear", (2, 3, 4, 5, 3), (7, 9, 5)),
                                             ("bicubic", (2, 3, 5, 4), (9, 7))])
def test_interpolation_rounds_weights_like_cpu(dtype, mode, shape, size):
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(*shape, generator=g) * 3).to(dtype)
    expected, actual = _run(lambda x: F.interpolate(x, size=size, mode=mode), x)
    assert_ulp_close(actual, expected, max_inexact=0)


@pytest.mark.parametrize("affine", [False, True])
def test_float16_batch_statistics_round_like_cpu(affine):
    g = torch.Generator().manual_seed(8)
    x = (torch.randn(4, 6, 9, 10, generator=g) * 3 + 1).half()
    w = torch.randn(6, generator=g).half() if affine else None
    b = torch.randn(6, generator=g).half() if affine else None

    def fn(x, w, b):
        return F.instance_norm(x, weight=w, bias=b), F.batch_norm(x, None, None, w, b, training=True)

    expected = fn(x, w, b)
    actual = fn(*[t.to("tpu") if t is not None else None for t in (x, w, b)])
    for a, e in zip(actual, expected):
        assert_ulp_close(a, e, max_inexact=0.005)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scalar", [torch.tensor(1.1), torch.tensor(3.3, dtype=torch.float64),
                                    torch.tensor(1000001), torch.tensor(0.7)])
def test_a_0_dim_second_operand_of_mul_and_div_is_read_unrounded(dtype, scalar):
    """CPU's mul and div read a scalar `other` at its own precision (a 16-bit
    tensor times a 0-dim f32 tensor multiplies by the f32 value), but cast a
    scalar first operand, and add/sub read it rounded: exactly, on CPU or tpu
    0-dim tensors, and in place."""
    x = (torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 0.01).to(dtype)
    t = x.to("tpu")
    for s in (scalar, scalar.to("tpu")):
        for op in (torch.mul, torch.div, torch.add, torch.sub):
            assert torch.equal(op(t, s).cpu(), op(x, scalar)), op
            assert torch.equal(op(s, t).cpu(), op(scalar, x)), op
        assert torch.equal(t.clone().mul_(s).cpu(), x.clone().mul_(scalar))
