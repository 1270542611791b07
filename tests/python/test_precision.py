"""TPU matmul precision modes: the error of each mode against a float64 CPU
reference (matmul, convolution, attention), the API, and that a mode change
emits a different program."""
import os

import pytest
import torch
import torch.nn.functional as F
import torch_tpu

MODES = ("default", "high", "highest", "float32")
F32_EPS = 2.0 ** -24


@pytest.fixture(autouse=True)
def restore_precision():
    previous = torch_tpu._C._get_precision_override()
    yield
    torch_tpu._C._set_precision(previous)


def inputs(kind, shape_a, shape_b, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*shape_a, generator=g)
    b = torch.randn(*shape_b, generator=g)
    if kind == "adversarial":  # bf16 drops the 2^-10 part; wide exponent range
        a = 1 + 2.0 ** -10 * torch.sign(a) + 2.0 ** -18 * a
        b = b * 2.0 ** torch.randint(-12, 12, shape_b, generator=g).float()
    return a, b


def errors(op, a, b):
    """Max error of each mode, in units of the f64 sum of |products|."""
    ref = op(a.double(), b.double())
    scale = op(a.double().abs(), b.double().abs())
    out = {}
    for mode in MODES:
        with torch.tpu.precision(mode):
            y = op(a.to("tpu"), b.to("tpu")).cpu().double()
        out[mode] = ((y - ref).abs() / scale).max().item()
    return out


def conv2d(x, w):
    return torch.nn.functional.conv2d(x.reshape(2, 4, 6, 6), w.reshape(3, 4, 3, 3), padding=1)


def attention(q, k):
    """softmax(q k^T) v with v = k: two matmuls around a softmax."""
    q, k = q.reshape(1, 2, 8, 16), k.reshape(1, 2, 8, 16)
    return torch.nn.functional.scaled_dot_product_attention(q, k, k)


@pytest.mark.parametrize("kind", ["random", "adversarial"])
@pytest.mark.parametrize("op,shapes", [(torch.mm, ((16, 64), (64, 8))),
                                       (torch.bmm, ((2, 8, 64), (2, 64, 4))),
                                       (conv2d, ((2, 144), (3, 36)))])
def test_each_mode_is_clearly_tighter(op, shapes, kind):
    e = errors(op, *inputs(kind, *shapes))
    assert e["default"] > 2.0 ** -12, e               # bf16 operands: ~2^-9
    assert e["high"] < e["default"] / 30, e           # bf16x3: ~2^-17
    assert e["highest"] < e["high"] / 10, e           # bf16x6: f32 rounding
    assert e["highest"] < 8 * F32_EPS, e
    assert e["float32"] < 8 * F32_EPS, e


def test_attention_error_shrinks_with_mode():
    a, b = inputs("random", (16, 16), (16, 16))
    ref = attention(a.double(), b.double())
    err = {}
    for mode in MODES:
        with torch.tpu.precision(mode):
            y = attention(a.to("tpu"), b.to("tpu")).cpu().double()
        err[mode] = (y - ref).abs().max().item()
    assert err["default"] > 4 * err["high"] and err["high"] > 4 * err["highest"], err
    assert err["highest"] < 1e-5, err


def test_default_rounds_operands_to_bf16():
    a, b = inputs("adversarial", (4, 32), (32, 4))
    expected = a.bfloat16().double() @ b.bfloat16().double()
    y = torch.mm(a.to("tpu"), b.to("tpu")).cpu().double()
    torch.testing.assert_close(y, expected, rtol=1e-6, atol=1e-6)


TRANSPOSED = {  # operands read through transposes, as linear layers and attention do
    "x @ w.t()": lambda x, w: x @ w.t(),
    "x.t() @ w": lambda x, w: x.t() @ w,
    "x.t() @ w[:, :16].t()": lambda x, w: x.t() @ w[:, :16].t(),
    "bmm k^T": lambda x, w: torch.bmm(x.reshape(2, 8, 32), w.reshape(2, 8, 32).transpose(1, 2)),
    "bmm q^T": lambda x, w: torch.bmm(x.reshape(2, 8, 32).transpose(1, 2), w.reshape(2, 8, 32)),
    "4-d heads": lambda x, w: x.reshape(2, 4, 2, 32).transpose(1, 2)
    @ w.reshape(2, 4, 2, 32).permute(0, 2, 3, 1),
}


@pytest.mark.parametrize("name", list(TRANSPOSED))
def test_transposed_operands_keep_each_modes_numbers(name):
    op = TRANSPOSED[name]
    a, b = inputs("adversarial", (16, 32), (16, 32))
    ref = op(a.double(), b.double())
    for mode in MODES:
        with torch.tpu.precision(mode):
            y = op(a.to("tpu"), b.to("tpu")).cpu().double()
        if mode == "default":  # exactly the bf16-rounded operands' products,
            # summed in f32: within the f32 summation bound n*u*sum|a*b| (n <= 32
            # terms), whatever order the host's gemm kernel sums them in.
            a16, b16 = a.bfloat16().double(), b.bfloat16().double()
            expected = op(a16, b16)
            bound = op(a16.abs(), b16.abs()) * (32 * 2.0 ** -24)
            assert ((y - expected).abs() <= bound).all(), (y - expected).abs().max()
        elif mode != "high":
            torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)


def test_default_dot_contracts_the_weight_as_stored():
    # A linear layer's weight is read through .t(): the dot contracts the
    # weight as it is stored, its operands the bf16-rounded values.
    f = torch.compile(lambda x, w: x @ w.t(), backend="tpu")
    x, w = torch.randn(8, 16), torch.randn(4, 16)
    y = f(x.to("tpu"), w.to("tpu")).cpu()
    torch.testing.assert_close(y, x.bfloat16().float() @ w.bfloat16().float().t())
    text = torch_tpu.compiler.graphs()[-1][1]
    dot = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
    # the weight as stored ([4, 16]), not its transpose ([16, 4]); the operands
    # are bf16 (exactly the rounded values) in the bf16 split mode (the default
    # on XLA:CPU; TORCH_TPU_BF16_DOTS)
    dt = "bf16" if torch_tpu._C._bf16_split_dots() else "f32"
    assert len(dot) == 1 and f"x{dt}>, tensor<4x16x{dt}>) -> tensor<8x4xf32>" in dot[0], dot


@pytest.mark.parametrize("shape", [(1, 1, 4, 8), (2, 3, 5, 16), (1, 2, 64, 32)])
def test_sdpa_backward_at_small_sizes(shape):
    # XLA:CPU rejected some of these dots when their operands were bf16
    # ("Unsupported element type for DotThunk: BF16 x BF16 = F32").
    q = torch.randn(*shape, requires_grad=True)
    qt = q.detach().to("tpu").requires_grad_()
    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    F.scaled_dot_product_attention(qt, qt, qt, is_causal=True).sum().backward()
    torch.testing.assert_close(qt.grad.cpu(), q.grad, rtol=0.05, atol=0.05)


def test_inf_and_nan_propagate_in_split_modes():
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    a[0, 1], a[2, 0] = float("inf"), float("nan")
    b[1] = b[1].abs() + 1  # row 0 of the result is +inf or -inf, not NaN
    expected = a @ b
    for mode in MODES:
        with torch.tpu.precision(mode):
            y = torch.mm(a.to("tpu"), b.to("tpu")).cpu()
        torch.testing.assert_close(y, expected, equal_nan=True, rtol=0.1, atol=0.1)


def test_precision_api():
    assert torch.tpu.get_precision() == "default"
    torch.tpu.precision("high")  # a call sets it globally
    assert torch.tpu.get_precision() == "high"
    with torch.tpu.precision("highest"):
        assert torch.tpu.get_precision() == "highest"
        with torch.tpu.precision("ieee"):
            assert torch.tpu.get_precision() == "float32"
        assert torch.tpu.get_precision() == "highest"
    assert torch.tpu.get_precision() == "high"
    torch.tpu.set_precision("MEDIUM")
    assert torch.tpu.get_precision() == "default"
    torch.tpu.set_precision(None)
    with pytest.raises(ValueError, match="'default', 'high', 'highest'"):
        torch.tpu.precision("bf16x9")
    with pytest.raises(ValueError):
        torch.tpu.set_precision(3)


def test_set_float32_matmul_precision_maps_onto_modes():
    torch.tpu.set_precision(None)
    try:
        for torch_mode, mode in [("high", "high"), ("medium", "default"),
                                 ("highest", "highest")]:
            torch.set_float32_matmul_precision(torch_mode)
            assert torch.tpu.get_precision() == mode
        with torch.tpu.precision("default"):  # the tpu setting wins
            assert torch.tpu.get_precision() == "default"
    finally:
        torch.backends.cuda.matmul.fp32_precision = "none"
        torch.backends.mkldnn.matmul.fp32_precision = "none"
    assert torch.tpu.get_precision() == "default"


def new_programs():
    """Programs not found in memory (compiled, or read from the disk cache)."""
    m = torch_tpu._C._metrics()
    return m.get("compiles", 0) + m.get("cache_disk_hits", 0)


def test_mode_change_compiles_a_different_program():
    a, b = torch.randn(5, 7).to("tpu"), torch.randn(7, 3).to("tpu")
    results = {}
    for mode in MODES:
        with torch.tpu.precision(mode):
            torch.mm(a, b).cpu()  # warm: this mode's program exists now
            before = new_programs()
            results[mode] = torch.mm(a, b).cpu()
            assert new_programs() == before  # cache hit
    torch_tpu._C._reset_metrics()
    with torch.tpu.precision("high"):
        torch.mm(torch.randn(5, 6).to("tpu"), torch.randn(6, 3).to("tpu")).cpu()
    first = new_programs()
    with torch.tpu.precision("highest"):
        torch.mm(torch.randn(5, 6).to("tpu"), torch.randn(6, 3).to("tpu")).cpu()
    assert new_programs() > first >= 1
    assert not torch.equal(results["default"], results["float32"])


def test_half_dtypes_ignore_mode_and_accumulate_in_f32():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(8, 256, generator=g).bfloat16()
    b = torch.randn(256, 8, generator=g).bfloat16()
    expected = (a.double() @ b.double()).bfloat16()  # one rounding at the end
    for mode in ("default", "highest"):
        with torch.tpu.precision(mode):
            y = torch.mm(a.to("tpu"), b.to("tpu")).cpu()
        torch.testing.assert_close(y, expected, rtol=8e-3, atol=1e-2)
