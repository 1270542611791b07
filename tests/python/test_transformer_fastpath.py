"""PyTorch's fused attention inference path on tpu against CPU.

In `eval()` without grad, `nn.MultiheadAttention` and the transformer layers
call `_native_multi_head_attention` and `_transformer_encoder_layer_fwd`
(and `TransformerEncoder` with a padding mask goes through nested tensors);
in training they take the composite path. Both must equal CPU in every eager
mode. Matmuls run at HIGHEST precision so the comparisons are tight; one test
checks the default (bf16) precision with its own tolerance.
"""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu
from conftest import assert_same

pytestmark = pytest.mark.usefixtures("highest_precision")

MODES = ["DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "DEFER_AND_FUSE"]
TOL = dict(atol=2e-5, rtol=1e-4)
E, HEADS, FF, B, L = 16, 4, 32, 3, 5


@pytest.fixture(params=MODES)
def mode(request):
    with torch_tpu.eager_mode(request.param):
        yield request.param


def pair(module):
    """The module in eval() on CPU and a copy on tpu."""
    torch.manual_seed(0)
    module.eval()
    return module, copy.deepcopy(module).to("tpu")


def inputs(batch_first=True):
    torch.manual_seed(1)
    return torch.randn(B, L, E) if batch_first else torch.randn(L, B, E)


def padding_mask():
    """Key padding: batch 0 whole, batch 1 with two padded, batch 2 with four."""
    return torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] + [True] * 4])


def causal_mask():
    return torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)


def both(fn, cpu_module, tpu_module, *args, **kwargs):
    """fn(module, *args) under inference on CPU and on tpu (tensors moved)."""
    move = lambda v: v.to("tpu") if isinstance(v, torch.Tensor) else v  # noqa: E731
    with torch.inference_mode():
        expected = fn(cpu_module, *args, **kwargs)
        actual = fn(tpu_module, *[move(a) for a in args], **{k: move(v) for k, v in kwargs.items()})
    return actual, expected


def compare(actual, expected, **tol):
    if isinstance(expected, tuple):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            if e is None:
                assert a is None
            else:
                assert_same(a, e, **(tol or TOL))
    else:
        assert_same(actual, expected, **(tol or TOL))


# nn.MultiheadAttention ---------------------------------------------------

MASKS = {
    "none": {},
    "attn": {"attn_mask": causal_mask()},
    "padding": {"key_padding_mask": padding_mask()},
    "both": {"attn_mask": causal_mask(), "key_padding_mask": padding_mask()},
    "attn3d": {"attn_mask": causal_mask().expand(B * HEADS, L, L).clone()},
}


@pytest.mark.parametrize("masks", list(MASKS))
@pytest.mark.parametrize("need_weights,average,batch_first",
                         [(False, True, True), (True, True, True), (True, False, True), (True, True, False)])
def test_multihead_attention_inference(mode, masks, need_weights, average, batch_first):
    cpu, tpu = pair(nn.MultiheadAttention(E, HEADS, batch_first=batch_first))
    x = inputs(batch_first)
    kwargs = dict(MASKS[masks])
    actual, expected = both(lambda m, x, **kw: m(x, x, x, need_weights=need_weights,
                                                 average_attn_weights=average, **kw),
                            cpu, tpu, x, **kwargs)
    compare(actual, expected)


def test_multihead_attention_cross_attention(mode):
    cpu, tpu = pair(nn.MultiheadAttention(E, HEADS, batch_first=True))
    torch.manual_seed(2)
    q, kv = torch.randn(B, 3, E), torch.randn(B, L, E)
    actual, expected = both(lambda m, q, kv, **kw: m(q, kv, kv, **kw), cpu, tpu, q, kv,
                            key_padding_mask=padding_mask())
    compare(actual, expected)


def test_multihead_attention_float_mask(mode):
    cpu, tpu = pair(nn.MultiheadAttention(E, HEADS, batch_first=True))
    x = inputs()
    mask = torch.randn(L, L)
    actual, expected = both(lambda m, x, **kw: m(x, x, x, **kw), cpu, tpu, x, attn_mask=mask)
    compare(actual, expected)


def test_multihead_attention_default_precision(mode):
    with torch.tpu.precision("default"):
        cpu, tpu = pair(nn.MultiheadAttention(E, HEADS, batch_first=True))
        x = inputs()
        actual, expected = both(lambda m, x: m(x, x, x), cpu, tpu, x)
        compare(actual, expected, atol=2e-2, rtol=2e-2)


def test_native_multi_head_attention_op(mode):
    """The op itself, for each mask type, need_weights both ways."""
    torch.manual_seed(3)
    x = torch.randn(B, L, E)
    w, b = torch.randn(3 * E, E) / 4, torch.randn(3 * E)
    pw, pb = torch.randn(E, E) / 4, torch.randn(E)
    cases = [(None, None, False, True), (causal_mask(), 0, True, False), (padding_mask(), 1, True, True),
             (causal_mask().expand(B, HEADS, L, L), 2, False, True)]
    for mask, mask_type, need_weights, average in cases:
        def run(dev):
            t = lambda v: None if v is None else v.to(dev)  # noqa: E731
            xd = t(x)
            return torch._native_multi_head_attention(
                xd, xd, xd, E, HEADS, t(w), t(b), t(pw), t(pb), t(mask), need_weights, average, mask_type)
        compare(run("tpu"), run("cpu"))


def test_masked_softmax(mode):
    torch.manual_seed(4)
    x = torch.randn(B, HEADS, L, L)
    cases = [(causal_mask(), 0), (padding_mask(), 1), (torch.rand(B, HEADS, L, L) > 0.5, 2)]
    for mask, mask_type in cases:
        for dim in (None, 3, 2):
            expected = torch._masked_softmax(x, mask, dim, mask_type)
            assert_same(torch._masked_softmax(x.to("tpu"), mask.to("tpu"), dim, mask_type), expected)
    full = padding_mask()
    full[2] = True  # a fully masked row is NaN, as on CPU
    assert_same(torch._masked_softmax(x.to("tpu"), full.to("tpu"), 3, 1),
                torch._masked_softmax(x, full, 3, 1))


def test_transform_bias_rescale_qkv(mode):
    torch.manual_seed(5)
    qkv, bias = torch.randn(B, L, 3 * E), torch.randn(3 * E)
    expected = torch._transform_bias_rescale_qkv(qkv, bias, HEADS)
    actual = torch._transform_bias_rescale_qkv(qkv.to("tpu"), bias.to("tpu"), HEADS)
    compare(actual, expected)
    assert [a.stride() for a in actual] == [e.stride() for e in expected]


def test_fast_paths_taken(monkeypatch):
    """The modules in inference on tpu reach the fused ops (and the nested
    path), so the tests here exercise them."""
    calls = []
    for name in ("_native_multi_head_attention", "_transformer_encoder_layer_fwd", "_nested_tensor_from_mask"):
        op = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *a, _op=op, _name=name, **k: calls.append(_name) or _op(*a, **k))
    _, mha = pair(nn.MultiheadAttention(E, HEADS, batch_first=True))
    _, encoder = pair(nn.TransformerEncoder(encoder_layer(), 2, enable_nested_tensor=True))
    x = inputs().to("tpu")
    with torch.inference_mode():
        mha(x, x, x)
        encoder(x, src_key_padding_mask=padding_mask().to("tpu"))
    assert calls == ["_native_multi_head_attention", "_nested_tensor_from_mask",
                     "_transformer_encoder_layer_fwd", "_transformer_encoder_layer_fwd"]


# nn.TransformerEncoderLayer / TransformerEncoder ------------------------

def encoder_layer(norm_first=False, activation="relu", batch_first=True):
    return nn.TransformerEncoderLayer(E, HEADS, FF, dropout=0.0, activation=activation,
                                      batch_first=batch_first, norm_first=norm_first)


@pytest.mark.parametrize("masks", ["none", "src_mask", "padding", "both", "causal"])
@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_encoder_layer_inference(mode, masks, norm_first, activation):
    cpu, tpu = pair(encoder_layer(norm_first, activation))
    kwargs = {"none": {}, "src_mask": {"src_mask": causal_mask()},
              "padding": {"src_key_padding_mask": padding_mask()},
              "both": {"src_mask": causal_mask(), "src_key_padding_mask": padding_mask()},
              "causal": {"src_mask": causal_mask(), "is_causal": True}}[masks]
    actual, expected = both(lambda m, x, **kw: m(x, **kw), cpu, tpu, inputs(), **kwargs)
    compare(actual, expected)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_encoder_inference(mode, norm_first, masked):
    """enable_nested_tensor (the default): with a padding mask and norm_first
    off, the padded batch runs as a nested tensor and comes back with zeros
    in the padded places."""
    layer = encoder_layer(norm_first)
    cpu, tpu = pair(nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(E), enable_nested_tensor=True))
    kwargs = {"src_key_padding_mask": padding_mask()} if masked else {}
    actual, expected = both(lambda m, x, **kw: m(x, **kw), cpu, tpu, inputs(), **kwargs)
    compare(actual, expected)


def test_encoder_nested_tensor_zeros_padding(mode):
    cpu, tpu = pair(nn.TransformerEncoder(encoder_layer(), 2, enable_nested_tensor=True))
    actual, expected = both(lambda m, x, **kw: m(x, **kw), cpu, tpu, inputs(),
                            src_key_padding_mask=padding_mask())
    compare(actual, expected)
    assert actual.cpu()[padding_mask()].abs().sum() == 0


def test_encoder_mask_not_left_aligned(mode):
    """A mask with gaps skips the nested path, on tpu as on CPU."""
    cpu, tpu = pair(nn.TransformerEncoder(encoder_layer(), 2, enable_nested_tensor=True))
    mask = padding_mask()
    mask[0, 1] = True
    actual, expected = both(lambda m, x, **kw: m(x, **kw), cpu, tpu, inputs(), src_key_padding_mask=mask)
    compare(actual, expected)


def test_nested_tensor_from_mask_ops(mode):
    x, keep = inputs(), padding_mask().logical_not()
    assert torch._nested_tensor_from_mask_left_aligned(x.to("tpu"), keep.to("tpu"))
    gap = keep.clone()
    gap[0, 1] = False
    assert not torch._nested_tensor_from_mask_left_aligned(x.to("tpu"), gap.to("tpu"))
    with torch.inference_mode():
        nested = torch._nested_tensor_from_mask(x.to("tpu"), keep.to("tpu"))
        assert nested.is_nested and nested.device.type == "tpu"
        expected = torch._nested_tensor_from_mask(x, keep).to_padded_tensor(-1.0, (B, L + 1, E + 2))
        assert_same(nested.to_padded_tensor(-1.0, (B, L + 1, E + 2)), expected)
        assert_same(nested.to_padded_tensor(0.0), torch._nested_tensor_from_mask(x, keep).to_padded_tensor(0.0))
    with pytest.raises(RuntimeError, match="left-aligned"):
        torch._nested_tensor_from_mask(x.to("tpu"), gap.to("tpu"))


# nn.TransformerDecoderLayer / nn.Transformer ---------------------------

@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_inference(mode, norm_first):
    cpu, tpu = pair(nn.TransformerDecoderLayer(E, HEADS, FF, dropout=0.0, batch_first=True,
                                               norm_first=norm_first))
    torch.manual_seed(6)
    tgt, memory = torch.randn(B, 4, E), torch.randn(B, L, E)
    tgt_mask = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
    actual, expected = both(lambda m, t, mem, **kw: m(t, mem, **kw), cpu, tpu, tgt, memory,
                            tgt_mask=tgt_mask, memory_key_padding_mask=padding_mask())
    compare(actual, expected)


def test_transformer_inference():
    cpu, tpu = pair(nn.Transformer(E, HEADS, 2, 2, FF, dropout=0.0, batch_first=True))
    torch.manual_seed(7)
    src, tgt = torch.randn(B, L, E), torch.randn(B, 4, E)
    actual, expected = both(lambda m, s, t, **kw: m(s, t, **kw), cpu, tpu, src, tgt,
                            src_key_padding_mask=padding_mask(), memory_key_padding_mask=padding_mask(),
                            tgt_mask=nn.Transformer.generate_square_subsequent_mask(4))
    compare(actual, expected)


def test_scaled_dot_product_attention(mode):
    torch.manual_seed(8)
    q, k, v = (torch.randn(B, HEADS, L, E // HEADS) for _ in range(3))
    for kwargs in ({}, {"is_causal": True}, {"attn_mask": causal_mask().logical_not()},
                   {"attn_mask": torch.randn(L, L)}, {"scale": 0.3}):
        expected = F.scaled_dot_product_attention(q, k, v, **kwargs)
        moved = {n: a.to("tpu") if isinstance(a, torch.Tensor) else a for n, a in kwargs.items()}
        assert_same(F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), **moved),
                    expected, **TOL)


# Training: the composite path, forward and backward ---------------------

@pytest.mark.parametrize("make", [
    lambda: nn.MultiheadAttention(E, HEADS, batch_first=True),
    lambda: nn.TransformerEncoder(encoder_layer(), 2, enable_nested_tensor=True),
    lambda: nn.TransformerDecoderLayer(E, HEADS, FF, dropout=0.0, batch_first=True),
], ids=["mha", "encoder", "decoder_layer"])
def test_training_forward_backward(mode, make):
    torch.manual_seed(0)
    cpu = make().train()
    tpu = copy.deepcopy(cpu).to("tpu")
    x = inputs()

    def step(m, dev):
        xd = x.to(dev).requires_grad_()
        mask = padding_mask().to(dev)
        if isinstance(m, nn.MultiheadAttention):
            out = m(xd, xd, xd, key_padding_mask=mask)[0]
        elif isinstance(m, nn.TransformerEncoder):
            out = m(xd, src_key_padding_mask=mask)
        else:
            out = m(xd, xd, memory_key_padding_mask=mask)
        out.square().sum().backward()
        return [out, xd.grad] + [p.grad for p in m.parameters()]

    compare(tuple(step(tpu, "tpu")), tuple(step(cpu, "cpu")), atol=1e-4, rtol=1e-4)
