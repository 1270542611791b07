"""Runs TorchTitan's training entry point (`torchtitan.train.main`, what
`python -m torchtitan.train` runs) in this process, with TorchTitan's own
command line, for tests/python/test_torchtitan.py:

    torchrun --nproc-per-node=2 tests/python/torchtitan_launch.py [--cpu-reference] \
        --module llama3 --config llama3_debugmodel_varlen_attn ...

What it adds before calling TorchTitan, none of it about tpu:
- f32 matmuls at "highest" precision (tpu's default rounds their operands to
  bf16, as a TPU does; CPU computes them in f32), so the two runs compare at
  f32 precision.
- `torch.distributed.set_timeout`, which TorchTitan 0.3.0 calls after the
  first step and torch 2.13 only has as `distributed_c10d._set_pg_timeout`.
- `--cpu-reference`: the same run on CPU with Gloo, which TorchTitan itself
  cannot do: it picks `cuda` when no accelerator is loaded (so its device is
  set to `cpu` here, with the device-module calls it makes), its flex
  attention refuses backward on CPU, and CPU has no kernel for the varlen
  attention ops (`aten::_flash_attention_forward`/`_backward`), so CPU kernels
  for them are registered here, written with plain PyTorch ops in f32, one
  sequence at a time. TorchTitan turns FSDP's gradient division off, which
  reduces with `PREMUL_SUM(1.0)`; Gloo has no PREMUL_SUM, so FSDP is told to
  reduce with SUM (and divide by 1.0), the same sum.
"""
import os
import sys
import types


def _reference_attention_kernels():
    """CPU kernels for FlashAttention's varlen ops, as FlashAttention defines
    them: per sequence, scores scaled and masked to the window (bottom-right
    aligned: key j pairs with query i + len_k - len_q), softmax, and the
    logsumexp per (head, token) (+inf where a row sees no key)."""
    import torch

    def window(lq, lk, is_causal, left, right):
        off = (torch.arange(lk)[None, :] - torch.arange(lq)[:, None]) - (lk - lq)
        ok = torch.ones(lq, lk, dtype=torch.bool)
        right = 0 if is_causal else (-1 if right is None else right)
        if right >= 0:
            ok &= off <= right
        if left is not None and left >= 0:
            ok &= off >= -left
        return ok

    def as_operand(x, dtype):
        # FlashAttention multiplies probabilities and score gradients in the
        # input's (16-bit) type, accumulating in f32.
        return x.to(dtype).float()

    def per_sequence(q, k, v, cu_q, cu_k, scale, mask_args):
        groups = q.shape[1] // k.shape[1]
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        for b in range(cu_q.numel() - 1):
            q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
            qs = q[q0:q1].float().transpose(0, 1)                       # (Nq, Lq, H)
            ks = k[k0:k1].float().transpose(0, 1).repeat_interleave(groups, 0)
            vs = v[k0:k1].float().transpose(0, 1).repeat_interleave(groups, 0)
            s = (qs @ ks.transpose(1, 2) * scale).masked_fill(
                ~window(q1 - q0, k1 - k0, *mask_args), float("-inf"))
            lse = torch.logsumexp(s, -1)
            lse = torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse)
            yield (q0, q1, k0, k1), qs, ks, vs, torch.exp(s - lse[..., None]), lse, scale

    def forward(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, is_causal, return_debug_mask,
                *, scale=None, window_size_left=None, window_size_right=None, seqused_k=None,
                alibi_slopes=None, block_table=None, num_splits=None):
        assert dropout_p == 0 and not return_debug_mask and cu_q is not None
        out = torch.zeros(q.shape[:2] + v.shape[2:], dtype=q.dtype)
        lse_all = torch.full((q.shape[1], q.shape[0]), float("inf"))
        for (q0, q1, _, _), _, _, vs, p, lse, _ in per_sequence(
                q, k, v, cu_q, cu_k, scale, (is_causal, window_size_left, window_size_right)):
            out[q0:q1] = (as_operand(p, q.dtype) @ vs).transpose(0, 1).to(q.dtype)
            lse_all[:, q0:q1] = lse
        return (out, lse_all, torch.zeros(2, dtype=torch.uint64),
                torch.zeros((), dtype=torch.uint64), torch.empty(0, dtype=q.dtype))

    def backward(grad_out, q, k, v, out, logsumexp, cu_q, cu_k, max_q, max_k, dropout_p,
                 is_causal, rng_state, unused, *, scale=None, window_size_left=None,
                 window_size_right=None):
        groups = q.shape[1] // k.shape[1]
        dq, dk, dv = (torch.zeros(t.shape) for t in (q, k, v))
        for (q0, q1, k0, k1), qs, ks, vs, p, _, sc in per_sequence(
                q, k, v, cu_q, cu_k, scale, (is_causal, window_size_left, window_size_right)):
            do = grad_out[q0:q1].float().transpose(0, 1)
            o = out[q0:q1].float().transpose(0, 1)
            ds = as_operand(p * (do @ vs.transpose(1, 2) - (do * o).sum(-1, keepdim=True)) * sc,
                            q.dtype)
            dq[q0:q1] = (ds @ ks).transpose(0, 1)
            n, lk = k.shape[1], k1 - k0
            dk[k0:k1] = (ds.transpose(1, 2) @ qs).view(n, groups, lk, -1).sum(1).transpose(0, 1)
            dv_seq = as_operand(p, q.dtype).transpose(1, 2) @ do
            dv[k0:k1] = dv_seq.view(n, groups, lk, -1).sum(1).transpose(0, 1)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_flash_attention_forward", forward, "CPU")
    lib.impl("_flash_attention_backward", backward, "CPU")
    return lib


def _use_cpu():
    """Makes TorchTitan run on `cpu` (it reads its device from
    torchtitan.tools.utils at import, and calls these device-module functions)."""
    import torch
    import torchtitan.tools.utils as utils

    props = types.SimpleNamespace(name="cpu", total_memory=os.sysconf("SC_PAGE_SIZE") *
                                  os.sysconf("SC_PHYS_PAGES"))
    utils.device_type = "cpu"
    utils.device_module = types.SimpleNamespace(
        is_available=lambda: True, device_count=lambda: 1, current_device=lambda: 0,
        set_device=lambda device: None, synchronize=lambda device=None: None,
        get_device_name=lambda device=None: "cpu", get_device_properties=lambda device=None: props,
        memory_stats=lambda device=None: {}, reset_peak_memory_stats=lambda device=None: None,
        empty_cache=lambda: None, manual_seed=torch.manual_seed, manual_seed_all=torch.manual_seed)


def _fsdp_sums_for_gloo():
    from torch.distributed.fsdp import FSDPModule

    set_factor = FSDPModule.set_gradient_divide_factor

    def set_factor_and_sum(self, factor):
        set_factor(self, factor)
        self.set_force_sum_reduction_for_comms(True)

    FSDPModule.set_gradient_divide_factor = set_factor_and_sum


def main(argv):
    import torch
    import torch.distributed as dist

    reference = "--cpu-reference" in argv
    argv = [a for a in argv if a != "--cpu-reference"]
    torch.set_float32_matmul_precision("highest")
    if not hasattr(dist, "set_timeout"):
        from torch.distributed.distributed_c10d import _set_pg_timeout

        dist.set_timeout = _set_pg_timeout
    if reference:
        _use_cpu()
        _fsdp_sums_for_gloo()
        keep = _reference_attention_kernels()  # noqa: F841 (registered while alive)
    from torchtitan.train import main as train

    sys.argv = [sys.argv[0]] + argv
    train()


if __name__ == "__main__":
    main(sys.argv[1:])
