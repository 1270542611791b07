"""F.scaled_dot_product_attention on tpu: the fused ("overrideable") kernel
pair _scaled_dot_product_fused_attention_overrideable / _backward, chosen by
tpu's _fused_sdp_choice, against CPU's SDPA — outputs and the gradients of
query, key, value and a float mask, in every mode — and the calls that keep
the math path (dropout, other dtypes, the backend disabled)."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

import torch_tpu
from conftest import assert_same, strict_programs

aten = torch.ops.aten


class Ops(TorchDispatchMode):
    """The ATen ops a block of code dispatches."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def attention(device, q, k, v, grad, mask=None, **kw):
    """Output and input gradients of SDPA on `device` (float inputs and a
    float mask get gradients)."""
    xs = [t.detach().to(device).requires_grad_() for t in (q, k, v)]
    m = None
    if mask is not None:
        m = mask.detach().to(device).requires_grad_(mask.is_floating_point())
    out = F.scaled_dot_product_attention(*xs, attn_mask=m, **kw)
    out.backward(grad.to(device))
    grads = [x.grad for x in xs] + ([m.grad] if m is not None and m.requires_grad else [])
    return [out.detach()] + grads


CASES = {
    # name: (query shape, key/value shape, mask shape or None, mask dtype, kwargs)
    "plain": ((2, 4, 8, 16), (2, 4, 8, 16), None, None, {}),
    "causal_longer_keys": ((2, 4, 6, 16), (2, 4, 10, 16), None, None, {"is_causal": True}),
    "causal_square": ((1, 2, 9, 8), (1, 2, 9, 8), None, None, {"is_causal": True}),
    "gqa": ((2, 8, 5, 16), (2, 2, 7, 16), None, None, {"enable_gqa": True}),
    "unbatched_scaled": ((4, 8, 16), (4, 11, 16), None, None, {"scale": 0.3}),
    "bool_mask_2d": ((2, 4, 8, 16), (2, 4, 8, 16), (8, 8), torch.bool, {}),
    "bool_padding_mask": ((2, 4, 8, 16), (2, 4, 8, 16), (2, 1, 1, 8), torch.bool, {}),
    "float_bias_broadcast": ((2, 4, 8, 16), (2, 4, 6, 16), (4, 8, 6), torch.float32, {}),
    "float_bias_full": ((2, 4, 8, 16), (2, 4, 8, 16), (2, 4, 8, 8), torch.float32, {}),
    "value_head_differs": ((2, 4, 8, 16), (2, 4, 8, 16), None, None, {"v_head": 24}),
}


def make(case, dtype):
    qs, ks, ms, mdtype, kw = CASES[case]
    kw = dict(kw)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(qs, generator=g).to(dtype)
    k = torch.randn(ks, generator=g).to(dtype)
    vs = ks[:-1] + (kw.pop("v_head", ks[-1]),)
    v = torch.randn(vs, generator=g).to(dtype)
    grad = torch.randn(qs[:-1] + vs[-1:], generator=g).to(dtype)
    mask = None
    if ms is not None:
        if mdtype == torch.bool:
            mask = torch.rand(ms, generator=g) > 0.3
            mask[..., 0] = True  # every row sees a key
        else:
            mask = torch.randn(ms, generator=g).to(dtype)
    return q, k, v, grad, mask, kw


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", CASES)
def test_fused_attention_matches_cpu(case, dtype, highest_precision):
    q, k, v, grad, mask, kw = make(case, dtype)
    with Ops() as ops:
        actual = attention("tpu", q, k, v, grad, mask, **kw)
    assert "_scaled_dot_product_fused_attention_overrideable" in ops.names
    assert "_scaled_dot_product_fused_attention_overrideable_backward" in ops.names
    assert "_safe_softmax" not in ops.names and "bmm" not in ops.names
    expected = attention("cpu", q, k, v, grad, mask, **kw)
    tol = dict(atol=2e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    assert_same(actual, expected, **tol)


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE", "DEFER_NEVER_AND_LAUNCH_BLOCKING"])
def test_fused_attention_in_every_eager_mode(mode, highest_precision):
    q, k, v, grad, mask, kw = make("float_bias_broadcast", torch.float32)
    with torch_tpu.eager_mode(mode):
        actual = attention("tpu", q, k, v, grad, mask, **kw)
        actual = [t.cpu() for t in actual]
    expected = attention("cpu", q, k, v, grad, mask, **kw)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, atol=2e-5, rtol=1e-4)


def test_fully_masked_row_is_zero_as_on_cpu(highest_precision):
    q, k, v, grad, _, _ = make("plain", torch.float32)
    mask = torch.ones(8, 8, dtype=torch.bool)
    mask[3] = False  # query 3 sees no key: _safe_softmax gives zeros
    assert_same(attention("tpu", q, k, v, grad, mask), attention("cpu", q, k, v, grad, mask),
                atol=2e-5, rtol=1e-4)


def test_compiled_attention_uses_the_fused_kernel(highest_precision):
    q, k, v, grad, _, _ = make("causal_square", torch.float32)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).sin()

    compiled = torch.compile(f, backend="tpu", dynamic=False)
    xs = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    out = compiled(*xs)
    out.backward(grad.to("tpu"))
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = f(*ref)
    expected.backward(grad)
    assert_same([out] + [x.grad for x in xs], [expected] + [x.grad for x in ref],
                atol=2e-5, rtol=1e-4)


def test_calls_the_kernel_does_not_take_keep_the_math_path():
    q, k, v, grad, _, _ = make("plain", torch.float32)
    t = [x.to("tpu") for x in (q, k, v)]
    math = int(SDPBackend.MATH)
    overrideable = int(SDPBackend.OVERRIDEABLE)
    assert torch._fused_sdp_choice(*t) == overrideable
    assert torch._fused_sdp_choice(*t, dropout_p=0.1) == math
    assert torch._fused_sdp_choice(t[0].double(), t[1].double(), t[2].double()) == math
    # heads differ without enable_gqa: math, which raises as on CPU
    k2 = t[1][:, :2]
    assert torch._fused_sdp_choice(t[0], k2, k2) == math
    assert torch._fused_sdp_choice(t[0], k2, k2, enable_gqa=True) == overrideable
    with sdpa_kernel([SDPBackend.MATH]):
        assert torch._fused_sdp_choice(*t) == math
        with Ops() as ops:
            F.scaled_dot_product_attention(*t).cpu()
        assert "_scaled_dot_product_fused_attention_overrideable" not in ops.names


def test_mask_with_is_causal_applies_both_as_on_cpu(highest_precision):
    """CPU's kernel takes a mask and is_causal together (the math path raises)."""
    q, k, v, grad, mask, _ = make("bool_mask_2d", torch.float32)
    assert_same(attention("tpu", q, k, v, grad, mask, is_causal=True),
                attention("cpu", q, k, v, grad, mask, is_causal=True), atol=2e-5, rtol=1e-4)


def test_dropout_keeps_the_math_path_and_trains():
    q, k, v, grad, _, _ = make("plain", torch.float32)
    xs = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    with Ops() as ops:
        out = F.scaled_dot_product_attention(*xs, dropout_p=0.5)
        out.backward(grad.to("tpu"))
    assert "_scaled_dot_product_fused_attention_overrideable" not in ops.names
    assert all(torch.isfinite(x.grad.cpu()).all() for x in xs)


def test_strict_attention_is_one_program_each_way(highest_precision):
    q, k, v, grad, _, _ = make("causal_square", torch.float32)
    xs = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    forward, backward = strict_programs(
        lambda: F.scaled_dot_product_attention(*xs, is_causal=True), grad.to("tpu"))
    assert forward == 1
    assert backward == 1
