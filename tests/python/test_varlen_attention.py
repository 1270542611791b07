"""Variable-length attention on tpu (aten::_flash_attention_forward/_backward,
reached through torch.nn.attention.varlen, TorchTitan's `varlen` attention)
against CPU's scaled_dot_product_attention run one sequence at a time, and
torch._assert_async's device-side check."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.varlen import varlen_attn


def window_mask(lq, lk, left, right):
    """Key j may be seen from query i (bottom-right aligned, as FlashAttention)."""
    off = torch.arange(lk)[None, :] - torch.arange(lq)[:, None] - (lk - lq)
    ok = torch.ones(lq, lk, dtype=torch.bool)
    if right >= 0:
        ok &= off <= right
    if left >= 0:
        ok &= off >= -left
    return ok


def reference(q, k, v, cu_q, cu_k, window):
    """f32 SDPA per sequence; rows outside every sequence stay 0."""
    groups = q.shape[1] // k.shape[1]
    out = torch.zeros(q.shape[:2] + v.shape[2:])
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        qs = q[q0:q1].float().transpose(0, 1)
        ks = k[k0:k1].float().transpose(0, 1).repeat_interleave(groups, 0)
        vs = v[k0:k1].float().transpose(0, 1).repeat_interleave(groups, 0)
        mask = window_mask(q1 - q0, k1 - k0, *window)
        o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask)
        out[q0:q1] = o.transpose(0, 1)
    return out


CASES = {
    # name: (query lengths, key lengths, query heads, kv heads, window, padding tokens)
    "causal": ([5, 3, 8], [5, 3, 8], 4, 4, (-1, 0), 0),
    "gqa_padded": ([6, 10], [6, 10], 4, 2, (-1, 0), 3),
    "sliding_window": ([12, 7], [12, 7], 2, 2, (3, 0), 0),
    "bidirectional_cross": ([4, 6], [9, 5], 2, 1, (-1, -1), 0),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("case", CASES)
def test_varlen_attention_matches_sdpa_per_sequence(case, dtype):
    lens_q, lens_k, nq, nk, window, pad = CASES[case]
    torch.manual_seed(0)
    cu_q = [0] + torch.tensor(lens_q).cumsum(0).tolist()
    cu_k = [0] + torch.tensor(lens_k).cumsum(0).tolist()
    tq, tk, head = cu_q[-1] + pad, cu_k[-1] + pad, 8
    q = torch.randn(tq, nq, head).to(dtype)
    k = torch.randn(tk, nk, head).to(dtype)
    v = torch.randn(tk, nk, head).to(dtype)
    grad = torch.randn(tq, nq, head).to(dtype)
    grad[cu_q[-1]:] = 0  # padding rows: no output to differentiate

    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = reference(*cpu, cu_q, cu_k, window)
    expected.backward(grad.float())

    dev = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    cu = [torch.tensor(c, dtype=torch.int32, device="tpu") for c in (cu_q, cu_k)]
    with torch.tpu.precision("highest"):
        out = varlen_attn(*dev, cu[0], cu[1], max(lens_q), max(lens_k), window_size=window,
                          enable_gqa=nq != nk)
        out.backward(grad.to("tpu"))
    # bf16: the output and the probabilities are rounded to bf16 (2^-8
    # relative), as FlashAttention rounds them; f32: summation order only.
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
    assert out.dtype == dtype and out.device.type == "tpu"
    torch.testing.assert_close(out.cpu().float()[:cu_q[-1]], expected[:cu_q[-1]].detach(), **tol)
    for d, c in zip(dev, cpu):
        torch.testing.assert_close(d.grad.cpu().float(), c.grad.float(), **tol)


def test_varlen_attention_returns_logsumexp():
    torch.manual_seed(1)
    q, k, v = (torch.randn(7, 2, 4) for _ in range(3))
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    with torch.tpu.precision("highest"):
        _, lse = torch.ops.aten._flash_attention_forward(
            q.to("tpu"), k.to("tpu"), v.to("tpu"), cu.to("tpu"), cu.to("tpu"), 4, 4, 0.0, True,
            False)[:2]
    expected = torch.full((2, 7), float("inf"))
    for q0, q1 in ((0, 3), (3, 7)):
        s = q[q0:q1].transpose(0, 1) @ k[q0:q1].transpose(0, 1).transpose(1, 2) / 2
        s = s.masked_fill(~window_mask(q1 - q0, q1 - q0, -1, 0), float("-inf"))
        expected[:, q0:q1] = torch.logsumexp(s, -1)
    torch.testing.assert_close(lse.cpu(), expected, atol=1e-5, rtol=1e-5)


def test_varlen_attention_refuses_what_it_does_not_lower():
    q = torch.randn(4, 2, 8, device="tpu")
    cu = torch.tensor([0, 4], dtype=torch.int32, device="tpu")
    with pytest.raises(NotImplementedError, match="dropout_p"):
        torch.ops.aten._flash_attention_forward(q, q, q, cu, cu, 4, 4, 0.5, True, False)
    with pytest.raises(NotImplementedError, match="variable-length"):
        torch.ops.aten._flash_attention_forward(q[None], q[None], q[None], None, None, 4, 4,
                                                0.0, True, False)


def test_assert_async_is_checked_on_the_device():
    torch._assert_async(torch.tensor(1.0, device="tpu"))
    torch._assert_async(torch.tensor(True, device="tpu"), "never raised")
    torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="positions out of range"):
        torch._assert_async(torch.tensor(0, device="tpu"), "positions out of range")
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="single nonzero value, but got zero"):
        torch._assert_async(torch.tensor(0.0, device="tpu"))
        torch.tpu.synchronize()
    for n, words in ((2, "more than one value"), (0, "no values")):
        with pytest.raises(RuntimeError, match=words):
            torch._assert_async(torch.ones(n, device="tpu"))
