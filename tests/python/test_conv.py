"""Convolution, pooling, interpolation and attention on tpu against CPU,
forward and backward (input and weight gradients)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu
from conftest import assert_same, to_tpu

BF16_TOL = dict(atol=2e-2, rtol=2e-2)


def check_grad(fn, *args, atol=None, rtol=None, params=()):
    """fn's output and the gradients of its float args (and of `params`, pairs
    of CPU/tpu parameter lists) on tpu match CPU for a random grad_output."""
    cpu = [a.detach().requires_grad_(a.is_floating_point()) for a in args]
    tpu = [a.detach().to("tpu").requires_grad_(a.is_floating_point()) for a in args]
    cpu_params, tpu_params = params if params else ([], [])
    expected = fn(*cpu)
    actual = fn(*tpu)
    assert_same(actual, expected, atol=atol, rtol=rtol)
    grad = torch.randn_like(expected)
    wrt_cpu = [a for a in cpu if a.requires_grad] + list(cpu_params)
    wrt_tpu = [a for a in tpu if a.requires_grad] + list(tpu_params)
    expected_grads = torch.autograd.grad(expected, wrt_cpu, grad)
    actual_grads = torch.autograd.grad(actual, wrt_tpu, grad.to("tpu"))
    assert_same(list(actual_grads), list(expected_grads), atol=atol, rtol=rtol)


# ---- convolution -------------------------------------------------------------

CONV_CASES = [
    # (input shape, weight shape, kwargs)
    ((2, 4, 9, 8), (6, 2, 3, 3), dict(stride=2, padding=1, groups=2)),
    ((2, 4, 9, 8), (6, 4, 3, 2), dict(stride=(2, 1), padding=(2, 0), dilation=(2, 3))),
    ((1, 3, 5, 5), (4, 3, 1, 1), dict()),
    ((2, 3, 10), (4, 3, 3), dict(stride=3, padding=2)),
    ((1, 4, 4, 5, 3), (4, 1, 2, 3, 1), dict(padding=1, groups=4)),
]


@pytest.mark.parametrize("x_shape,w_shape,kwargs", CONV_CASES)
def test_conv_forward_and_backward(highest_precision, x_shape, w_shape, kwargs):
    conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(x_shape)]
    x, w, b = torch.randn(x_shape), torch.randn(w_shape), torch.randn(w_shape[0])
    check_grad(lambda x, w, b: conv(x, w, b, **kwargs), x, w, b, atol=1e-5, rtol=1e-5)


TRANSPOSED_CASES = [
    ((2, 4, 5, 6), (4, 3, 3, 2), dict(stride=2, padding=(1, 2), output_padding=1, groups=2,
                                      dilation=(1, 2))),
    ((2, 3, 7), (3, 2, 4), dict(stride=3, padding=4, output_padding=2)),
    ((1, 2, 3, 4, 2), (2, 2, 2, 3, 1), dict(stride=2)),
]


@pytest.mark.parametrize("x_shape,w_shape,kwargs", TRANSPOSED_CASES)
def test_conv_transpose_forward_and_backward(highest_precision, x_shape, w_shape, kwargs):
    conv = {3: F.conv_transpose1d, 4: F.conv_transpose2d, 5: F.conv_transpose3d}[len(x_shape)]
    groups = kwargs.get("groups", 1)
    x, w, b = torch.randn(x_shape), torch.randn(w_shape), torch.randn(w_shape[1] * groups)
    check_grad(lambda x, w, b: conv(x, w, b, **kwargs), x, w, b, atol=1e-5, rtol=1e-5)


# Depthwise convolutions (one input channel per group) are a sum over kernel
# taps on XLA:CPU (lowering/conv.cc, depthwise_as_taps): channel multipliers,
# strides, dilations, asymmetric padding, 1-D/3-D, transposed, 16-bit.
DEPTHWISE_CASES = [
    ((2, 6, 13, 11), (6, 1, 7, 7), dict(padding=3, groups=6)),
    ((2, 4, 12, 9), (8, 1, 3, 2), dict(stride=(2, 3), padding=(2, 1), dilation=(2, 1), groups=4)),
    ((3, 5, 17), (5, 1, 4), dict(stride=3, padding=1, groups=5)),
    ((1, 4, 5, 6, 7), (8, 1, 3, 3, 2), dict(stride=(1, 2, 1), padding=1, groups=4)),
    ((2, 3, 6, 6), (3, 1, 2, 4), dict(padding="same", groups=3)),
]


@pytest.mark.parametrize("x_shape,w_shape,kwargs", DEPTHWISE_CASES)
def test_depthwise_conv_forward_and_backward(highest_precision, x_shape, w_shape, kwargs):
    conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(x_shape)]
    x, w, b = torch.randn(x_shape), torch.randn(w_shape), torch.randn(w_shape[0])
    check_grad(lambda x, w, b: conv(x, w, b, **kwargs), x, w, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("x_shape,w_shape,kwargs", [
    ((2, 4, 5, 6), (4, 2, 3, 3), dict(stride=2, padding=1, output_padding=1, groups=4)),
    ((1, 3, 7), (3, 1, 5), dict(stride=3, padding=2, dilation=2, groups=3)),
])
def test_depthwise_conv_transpose_forward_and_backward(highest_precision, x_shape, w_shape, kwargs):
    conv = {3: F.conv_transpose1d, 4: F.conv_transpose2d}[len(x_shape)]
    x, w, b = torch.randn(x_shape), torch.randn(w_shape), torch.randn(w_shape[1] * kwargs["groups"])
    check_grad(lambda x, w, b: conv(x, w, b, **kwargs), x, w, b, atol=1e-5, rtol=1e-5)


# Grouped convolutions with up to 16 groups run as one dense convolution per
# group on XLA:CPU (lowering/conv.cc, groups_as_dense_convs); more groups
# stay one grouped convolution.
@pytest.mark.parametrize("conv,x_shape,w_shape,kwargs", [
    (F.conv2d, (2, 8, 9, 7), (12, 2, 3, 2), dict(stride=(2, 1), padding=1, dilation=(1, 2), groups=4)),
    (F.conv1d, (2, 6, 11), (9, 2, 3), dict(stride=2, padding=2, groups=3)),
    (F.conv3d, (1, 4, 4, 5, 3), (6, 2, 2, 3, 1), dict(padding=1, groups=2)),
    (F.conv2d, (1, 34, 5, 5), (34, 2, 3, 3), dict(padding=1, groups=17)),
    (F.conv_transpose2d, (2, 6, 5, 4), (6, 3, 3, 3), dict(stride=2, padding=1, output_padding=1,
                                                          groups=3)),
])
def test_grouped_conv_forward_and_backward(highest_precision, conv, x_shape, w_shape, kwargs):
    transposed = conv is F.conv_transpose2d
    out = w_shape[1] * kwargs["groups"] if transposed else w_shape[0]
    x, w, b = torch.randn(x_shape), torch.randn(w_shape), torch.randn(out)
    check_grad(lambda x, w, b: conv(x, w, b, **kwargs), x, w, b, atol=1e-5, rtol=1e-5)


# 3-D convolutions are 2-D ones per depth tap on XLA:CPU (lowering/conv.cc,
# depth_taps_as_2d); the transposed ones and the input gradient dilate depth.
@pytest.mark.parametrize("conv,x_shape,w_shape,kwargs", [
    (F.conv3d, (2, 3, 7, 6, 5), (4, 3, 3, 2, 3), dict(stride=(2, 1, 2), padding=(1, 0, 2),
                                                      dilation=(2, 1, 1))),
    (F.conv3d, (1, 2, 5, 4, 4), (3, 2, 3, 3, 3), dict(padding="same")),
    (F.conv3d, (1, 2, 2, 4, 4), (3, 2, 3, 1, 1), dict()),  # no output depth
    (F.conv_transpose3d, (1, 4, 3, 4, 3), (4, 2, 3, 2, 2), dict(stride=(2, 1, 2), padding=1,
                                                                output_padding=(1, 0, 0))),
])
def test_conv3d_forward_and_backward(highest_precision, conv, x_shape, w_shape, kwargs):
    out = w_shape[1] if conv is F.conv_transpose3d else w_shape[0]
    x, w, b = torch.randn(x_shape), torch.randn(w_shape), torch.randn(out)
    if x_shape[2] < w_shape[2]:  # an error on CPU and on tpu alike
        with pytest.raises(RuntimeError):
            conv(x, w, b, **kwargs)
        with pytest.raises(RuntimeError):
            conv(x.to("tpu"), w.to("tpu"), b.to("tpu"), **kwargs)
        return
    check_grad(lambda x, w, b: conv(x, w, b, **kwargs), x, w, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_depthwise_conv_16bit(dtype):
    x, w, b = (torch.randn(2, 4, 9, 9).to(dtype), torch.randn(8, 1, 3, 3).to(dtype),
               torch.randn(8).to(dtype))
    check_grad(lambda x, w, b: F.conv2d(x, w, b, padding=1, stride=2, groups=4), x, w, b,
               **BF16_TOL)


def test_depthwise_conv_default_precision_rounds_operands_to_bf16():
    x, w = torch.randn(2, 4, 8, 8), torch.randn(4, 1, 3, 3)
    expected = F.conv2d(x.bfloat16().float(), w.bfloat16().float(), padding=1, groups=4)
    actual = F.conv2d(x.to("tpu"), w.to("tpu"), padding=1, groups=4)
    assert_same(actual, expected, atol=1e-5, rtol=1e-5)
    assert (actual.cpu() - F.conv2d(x, w, padding=1, groups=4)).abs().max() > 1e-4


def test_conv_default_precision_rounds_operands_to_bf16():
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    expected = F.conv2d(x.bfloat16().float(), w.bfloat16().float(), padding=1)
    actual = F.conv2d(x.to("tpu"), w.to("tpu"), padding=1)
    assert_same(actual, expected, atol=1e-5, rtol=1e-5)
    assert (actual.cpu() - F.conv2d(x, w, padding=1)).abs().max() > 1e-4


# On XLA:CPU a weight gradient is one dot per kernel tap (lowering/conv.cc,
# weight_grad_taps); at the default precision each dot takes the operands
# rounded to bf16 and accumulates in f32, as the convolution form does.
@pytest.mark.parametrize("conv,x_shape,w_shape,kwargs", [
    (F.conv2d, (2, 4, 12, 11), (6, 4, 7, 7), dict(padding=3)),
    (F.conv2d, (2, 8, 13, 9), (12, 2, 3, 2), dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2),
                                                  groups=4)),
    (F.conv1d, (3, 4, 17), (5, 4, 4), dict(stride=3, padding=1)),
    (F.conv3d, (1, 3, 6, 5, 4), (4, 3, 3, 3, 2), dict(padding=1)),
    (F.conv_transpose2d, (2, 6, 5, 4), (6, 2, 3, 3), dict(stride=2, padding=1, output_padding=1,
                                                          groups=3)),
])
def test_conv_weight_grad_default_precision_rounds_operands_to_bf16(conv, x_shape, w_shape, kwargs):
    x, w = torch.randn(x_shape), torch.randn(w_shape)
    gy = torch.randn_like(conv(x, w, **kwargs))

    def weight_grad(x, w, gy):
        w = w.detach().requires_grad_()
        (grad,) = torch.autograd.grad(conv(x, w, **kwargs), w, gy)
        return grad

    rounded = [t.bfloat16().float() for t in (x, w, gy)]
    actual = weight_grad(x.to("tpu"), w.to("tpu"), gy.to("tpu"))
    assert_same(actual, weight_grad(*rounded), atol=1e-4, rtol=1e-5)
    assert (actual.cpu() - weight_grad(x, w, gy)).abs().max() > 1e-4


def test_conv_bf16():
    x, w, b = (torch.randn(2, 3, 6, 6).bfloat16(), torch.randn(4, 3, 3, 3).bfloat16(),
               torch.randn(4).bfloat16())
    check_grad(lambda x, w, b: F.conv2d(x, w, b, padding=1, stride=2), x, w, b, **BF16_TOL)


def test_conv_unbatched_input(highest_precision):
    check_grad(lambda x, w: F.conv2d(x, w, padding=1), torch.randn(3, 5, 5),
               torch.randn(2, 3, 3, 3), atol=1e-5, rtol=1e-5)


def module_check(module, x, atol=1e-5, rtol=1e-5):
    """A module on tpu (a copy of the CPU one) matches in output, input grad
    and parameter grads."""
    tpu_module = module_copy(module)
    params = (list(module.parameters()), list(tpu_module.parameters()))
    calls = iter([module, tpu_module])
    check_grad(lambda x: next(calls)(x), x, params=params, atol=atol, rtol=rtol)


def module_copy(module):
    import copy
    return copy.deepcopy(module).to("tpu")


@pytest.mark.parametrize("module", [
    nn.Conv2d(3, 4, 3, stride=2, padding=1),
    nn.Conv2d(4, 4, 3, padding="same", groups=2, bias=False),
    nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1),
], ids=["conv", "conv_same_grouped", "conv_transpose"])
def test_conv_modules(highest_precision, module):
    module_check(module, torch.randn(2, module.in_channels, 7, 6))


# ---- pooling -----------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(2, 3), stride=(2, 1), padding=(1, 0), dilation=(2, 1), ceil_mode=True),
])
def test_max_pool2d_values_indices_and_grad(kwargs):
    x = torch.randn(2, 3, 9, 8)
    x[0, 0, :3, :3] = 1.0  # ties: the first maximum wins
    x[1, 2, 4, 4] = float("nan")
    check_grad(lambda x: F.max_pool2d(x, **kwargs), x)
    expected = F.max_pool2d(x, return_indices=True, **kwargs)[1]
    assert_same(F.max_pool2d(x.to("tpu"), return_indices=True, **kwargs)[1], expected)


def test_max_pool1d_and_3d():
    check_grad(lambda x: F.max_pool1d(x, 3, 2, 1), torch.randn(2, 3, 10))
    x = torch.randn(1, 2, 5, 6, 4)
    check_grad(lambda x: F.max_pool3d(x, 2, (2, 1, 2), 1), x)
    assert_same(F.max_pool3d(x.to("tpu"), 2, return_indices=True)[1],
                F.max_pool3d(x, 2, return_indices=True)[1])


def test_max_pool_all_negative_infinity_picks_real_element():
    x = torch.full((1, 1, 3, 3), float("-inf"))
    values, indices = F.max_pool2d(x.to("tpu"), 2, 2, 1, return_indices=True)
    assert_same((values, indices), F.max_pool2d(x, 2, 2, 1, return_indices=True))


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 1), divisor_override=5),
])
def test_avg_pool2d(kwargs):
    check_grad(lambda x: F.avg_pool2d(x, **kwargs), torch.randn(2, 3, 9, 8))


def test_avg_pool1d_and_3d():
    check_grad(lambda x: F.avg_pool1d(x, 3, 2, 1, count_include_pad=False), torch.randn(2, 3, 10))
    check_grad(lambda x: F.avg_pool3d(x, 2, 2, 1, ceil_mode=True), torch.randn(1, 2, 5, 6, 4))


@pytest.mark.parametrize("size", [(4, 3), (9, 8), (1, 2)])
def test_adaptive_avg_pool2d(size):
    check_grad(lambda x: F.adaptive_avg_pool2d(x, size), torch.randn(2, 3, 9, 8))


def test_adaptive_avg_pool3d():
    check_grad(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 3)), torch.randn(1, 2, 5, 6, 4))


@pytest.mark.parametrize("size", [(4, 3), (5, 5)])
def test_adaptive_max_pool2d(size):
    x = torch.randn(2, 3, 9, 8)
    check_grad(lambda x: F.adaptive_max_pool2d(x, size), x)
    assert_same(F.adaptive_max_pool2d(x.to("tpu"), size, return_indices=True)[1],
                F.adaptive_max_pool2d(x, size, return_indices=True)[1])


def test_pooling_bf16():
    x = torch.randn(2, 3, 8, 8).bfloat16()
    check_grad(lambda x: F.max_pool2d(x, 2), x, **BF16_TOL)
    check_grad(lambda x: F.avg_pool2d(x, 3, 2, 1), x, **BF16_TOL)


@pytest.mark.parametrize("module", [
    nn.MaxPool2d(3, 2, 1), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d((3, 2)),
], ids=["max", "avg", "adaptive_avg"])
def test_pool_modules(module):
    module_check(module, torch.randn(2, 3, 7, 6))


# ---- interpolation -----------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    dict(scale_factor=2),
    dict(size=(7, 9)),
    dict(scale_factor=(1.7, 2.3)),
    dict(size=(7, 3), mode="nearest-exact"),
    dict(size=(7, 9), mode="bilinear"),
    dict(size=(7, 9), mode="bilinear", align_corners=True),
    dict(scale_factor=(1.7, 2.5), mode="bilinear"),
    dict(size=(3, 3), mode="bilinear"),
])
def test_interpolate_2d(kwargs):
    check_grad(lambda x: F.interpolate(x, **kwargs), torch.randn(2, 3, 5, 4))


@pytest.mark.parametrize("kwargs", [
    dict(size=11), dict(size=11, mode="linear"), dict(size=3, mode="linear", align_corners=True),
])
def test_interpolate_1d(kwargs):
    check_grad(lambda x: F.interpolate(x, **kwargs), torch.randn(2, 3, 5))


def test_interpolate_3d():
    x = torch.randn(1, 2, 3, 4, 2)
    check_grad(lambda x: F.interpolate(x, size=(4, 7, 5), mode="trilinear"), x)
    check_grad(lambda x: F.interpolate(x, scale_factor=2), x)


def test_interpolate_bf16():
    x = torch.randn(2, 3, 5, 4).bfloat16()
    check_grad(lambda x: F.interpolate(x, size=(7, 9), mode="bilinear"), x, **BF16_TOL)


@pytest.mark.parametrize("module", [
    nn.Upsample(scale_factor=2), nn.Upsample(scale_factor=2, mode="bilinear"),
], ids=["nearest", "bilinear"])
def test_upsample_modules(module):
    module_check(module, torch.randn(2, 3, 4, 5))


# ---- attention -----------------------------------------------------------------

# What scaled_dot_product_attention decomposes into on tpu (no fused kernel
# reaches the backend); these ops are lowered in other families.
SDPA_OPS = ["bmm", "_softmax", "_softmax_backward_data", "isneginf", "all", "fill_", "tril"]


def lowered(name):
    return any(op == "aten::" + name or op.startswith("aten::" + name + ".")
               for op in torch_tpu.native_ops())


needs_matmul = pytest.mark.skipif(
    not all(lowered(op) for op in SDPA_OPS),
    reason="scaled_dot_product_attention needs " + ", ".join(SDPA_OPS))


@needs_matmul
@pytest.mark.parametrize("kwargs", [dict(), dict(is_causal=True)])
def test_scaled_dot_product_attention(highest_precision, kwargs):
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4)
    check_grad(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs), q, k, v,
               atol=1e-5, rtol=1e-5)


@needs_matmul
def test_scaled_dot_product_attention_with_mask(highest_precision):
    q, k, v = torch.randn(2, 5, 4), torch.randn(2, 6, 4), torch.randn(2, 6, 4)
    mask = torch.randn(5, 6) > 0
    mask[:, 0] = True
    check_grad(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
               q, k, v, mask, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("input_cl,weight_cl", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("transposed", [False, True])
def test_channels_last_convolution_output_layout_is_cpus(input_cl, weight_cl, transposed,
                                                          highest_precision):
    """A channels-last input or weight gives a channels-last output, as on CPU
    (tpu returned a contiguous one: code that views the NHWC permutation of
    the output failed on tpu only); values and gradients unchanged."""
    torch.manual_seed(0)
    layer = (nn.ConvTranspose2d if transposed else nn.Conv2d)(3, 4, 3)
    if weight_cl:
        layer = layer.to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 6, 6)
    if input_cl:
        x = x.to(memory_format=torch.channels_last)
    tpu_layer = copy.deepcopy(layer).to("tpu")
    expected = layer(x)
    actual = tpu_layer(x.to("tpu"))
    assert actual.stride() == expected.stride()
    assert actual.is_contiguous(memory_format=torch.channels_last)
    assert_same(actual, expected, atol=1e-5, rtol=1e-4)
    nhwc = actual.permute(0, 2, 3, 1).view(-1, 4)  # needs the channels-last strides
    assert_same(nhwc, expected.permute(0, 2, 3, 1).reshape(-1, 4), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("case", [
    ("2d", (2, 3, 9, 11), 2, (4, 5)), ("2d", (2, 3, 9, 11), 3, (6, 3)),
    ("2d", (3, 8, 8), (2, 3), (4, 1)), ("3d", (2, 3, 6, 7, 8), 2, (3, 4, 5)),
    ("3d", (3, 5, 5, 5), 2, (2, 2, 2))])
def test_fractional_max_pool_equals_cpu(case):
    """Windows from the same random samples as CPU: values, indices (flat
    positions in the plane) and the input gradient are exact."""
    kind, shape, kernel, out = case
    torch.manual_seed(0)
    n = 2 if kind == "2d" else 3
    batch = shape[0] if len(shape) == n + 2 else 1
    samples = torch.rand(batch, shape[-n - 1], n)
    x = torch.randn(shape)
    x.view(-1)[5] = float("nan")  # NaN wins its window, as on CPU
    pool = getattr(F, f"fractional_max_pool{kind}")

    def run(t):
        t = t.detach().clone().requires_grad_()
        y, idx = pool(t, kernel, output_size=out, return_indices=True,
                      _random_samples=samples.to(t.device))
        y.backward(torch.arange(y.numel(), dtype=y.dtype, device=t.device).view(y.shape))
        return y, idx, t.grad

    for actual, expected in zip(run(x.to("tpu")), run(x)):
        assert_same(actual, expected, atol=0, rtol=0)
