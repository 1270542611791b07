"""Paged attention for vLLM on `tpu`, written with PyTorch ops that the tpu
lowerings serve (index_copy_, index_select, scaled_dot_product_attention).

Each layer's KV cache is one tensor of shape
`[num_blocks, block_size, num_kv_heads, 2 * head_size]` (keys in the first
half of the last dimension, values in the second), so a slot
`block * block_size + offset` is one row of its `[num_slots, heads, 2 * d]`
view: writing a step's keys and values is one `index_copy_`.

A step's attention runs over the whole batch at once. Its requests are laid
out as a padded batch `[R, Q, ...]` (R requests, Q query tokens each) and
each request's context is gathered from the cache through its block table
(`[R, M * block_size, ...]` for M blocks); a mask made on the device from
each query's position allows it the keys at or before that position. R, Q and M are rounded up to powers of two, and so
is the step's token count (the runner pads its inputs: `padded_tokens`), so
a serving run sees a bounded set of shapes and its programs stay cached.
Padding tokens write their keys to block 0, which vLLM keeps as its null
block and never hands to a request.
"""
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)


def _bucket(n: int) -> int:
    """The smallest power of two >= n (and >= 1)."""
    return 1 << max(0, (int(n) - 1).bit_length())


# The attribute by which a device block table carries its host copy.
HOST_COPY = "_torch_tpu_host"


def padded_tokens(num_tokens: int, max_tokens: int) -> int:
    """How many token rows a step runs: num_tokens rounded up to a power of
    two, at most the runner's buffers (max_num_batched_tokens). The runner
    pads its inputs to this and the attention metadata is built for it."""
    return min(_bucket(num_tokens), max(int(max_tokens), int(num_tokens)))


@dataclass
class TpuAttentionMetadata:
    num_actual_tokens: int
    slot_mapping: torch.Tensor     # [N] int64: the cache row each token is written to
    block_table: torch.Tensor      # [R', M] int64: R' = R rounded up, M blocks per request
    query_index: torch.Tensor      # [R' * Q] int64: token of each padded query (0 for padding)
    output_index: torch.Tensor     # [N] int64: padded-query row of each token
    query_position: torch.Tensor   # [R', 1, Q, 1] int64: each padded query's position


def build_metadata(query_start_loc: np.ndarray, seq_lens: np.ndarray, block_table: torch.Tensor,
                   block_size: int, max_tokens: int, device) -> TpuAttentionMetadata:
    """A step's attention metadata from host data: `query_start_loc` [R + 1]
    (token offsets of the requests), `seq_lens` [R] (context length after
    this step), `block_table` [R, >= blocks needed] (host int tensor)."""
    num_reqs = len(seq_lens)
    starts = np.asarray(query_start_loc[: num_reqs + 1], dtype=np.int64)
    seq_lens = np.asarray(seq_lens, dtype=np.int64)
    query_lens = starts[1:] - starts[:-1]
    tokens = int(starts[-1])

    R = _bucket(num_reqs)
    Q = _bucket(int(query_lens.max(initial=1)))
    M = _bucket(-(-int(seq_lens.max(initial=1)) // block_size))

    # Padded query rows: row r * Q + i is token starts[r] + i, at position
    # seq_len - query_len + i, seeing keys 0..position. Padding rows are
    # token 0 at position 0 (they see key 0 only, so no row is empty).
    i = np.arange(Q)
    valid = np.zeros((R, Q), dtype=bool)
    valid[:num_reqs] = i[None, :] < query_lens[:, None]
    query_index = np.zeros((R, Q), dtype=np.int64)
    query_index[:num_reqs] = starts[:-1, None] + i[None, :]
    query_index = np.where(valid, query_index, 0)
    position = np.zeros((R, Q), dtype=np.int64)
    position[:num_reqs] = (seq_lens - query_lens)[:, None] + i[None, :]
    position = np.where(valid, position, 0)

    table = np.zeros((R, M), dtype=np.int64)
    width = min(M, block_table.shape[1])
    table[:num_reqs, :width] = block_table[:num_reqs, :width].numpy()

    # Token t's result is padded-query row output_index[t]; its key and value
    # go to slot slots[t]. Padding tokens take row 0 and slot 0 (block 0).
    padded = padded_tokens(tokens, max_tokens)
    rows = np.nonzero(valid.reshape(-1))[0]
    output_index = np.zeros(padded, dtype=np.int64)
    output_index[:tokens] = rows
    r, p = rows // Q, position.reshape(-1)[rows]
    slots = np.zeros(padded, dtype=np.int64)
    slots[:tokens] = table[r, p // block_size] * block_size + p % block_size

    def put(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)

    return TpuAttentionMetadata(
        num_actual_tokens=tokens, slot_mapping=put(slots), block_table=put(table),
        query_index=put(query_index.reshape(-1)), output_index=put(output_index),
        query_position=put(position[:, None, :, None]))


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size
        self.max_tokens = vllm_config.scheduler_config.max_num_batched_tokens

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> TpuAttentionMetadata:
        m = common_attn_metadata
        n = m.num_reqs
        seq_lens = m.seq_lens_cpu_upper_bound  # exact without speculative decoding
        seq_lens = (seq_lens if seq_lens is not None else m.seq_lens.cpu())[:n].numpy()
        # The runner's host copy of the block table (worker.py), else a read.
        table = getattr(m.block_table_tensor, HOST_COPY, None)
        table = table if table is not None else m.block_table_tensor.cpu()
        return build_metadata(m.query_start_loc_cpu[: n + 1].numpy(), seq_lens, table[:n],
                              self.block_size, self.max_tokens, self.device)


class TpuAttentionImpl(AttentionImpl):
    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int,
                 alibi_slopes, sliding_window, kv_cache_dtype: str, logits_soft_cap=None,
                 attn_type: str = AttentionType.DECODER, kv_sharing_target_layer_name=None,
                 sinks=None) -> None:
        unsupported = [name for name, bad in (
            ("ALiBi slopes", alibi_slopes is not None),
            ("attention sinks", sinks is not None),
            (f"attention type {attn_type!r}", attn_type != AttentionType.DECODER),
            (f"KV cache dtype {kv_cache_dtype!r}", kv_cache_dtype not in ("auto", None)),
        ) if bad]
        if unsupported:
            raise NotImplementedError(
                "torch_tpu's vLLM attention backend does not support " + ", ".join(unsupported)
                + " yet; models with plain causal decoder attention run.")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        # A query at position p sees the keys at p - sliding_window + 1 .. p.
        self.sliding_window = sliding_window
        # Scores become cap * tanh(score / cap) before the softmax (Gemma 2).
        self.logits_soft_cap = logits_soft_cap or None
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output,
                output_scale=None, output_block_scale=None):
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("fused output quantization is not supported on tpu")
        if attn_metadata is None:  # a profiling run without a cache
            return output
        m = attn_metadata
        N = m.slot_mapping.shape[0]  # the step's padded token count
        if query.shape[0] != N:
            raise RuntimeError(f"torch_tpu vLLM attention: the step runs {query.shape[0]} token "
                               f"rows but its metadata was built for {N}")
        d, h, hkv = self.head_size, self.num_heads, self.num_kv_heads
        blocks, block_size = kv_cache.shape[0], kv_cache.shape[1]

        # Write this step's keys and values into their slots.
        slots = kv_cache.view(blocks * block_size, hkv, 2 * d)
        if self.kv_sharing_target_layer_name is None:
            new = torch.cat([key.view(N, hkv, d), value.view(N, hkv, d)], dim=-1)
            slots.index_copy_(0, m.slot_mapping, new.to(kv_cache.dtype))

        # Each request's context, gathered through its block table.
        R, M = m.block_table.shape
        Q = m.query_index.shape[0] // R
        ctx = kv_cache.index_select(0, m.block_table.reshape(-1))
        ctx = ctx.view(R, M * block_size, hkv, 2 * d).transpose(1, 2)  # [R, hkv, C, 2d]
        k, v = ctx[..., :d], ctx[..., d:]
        q = query.view(N, h, d).index_select(0, m.query_index)
        q = q.view(R, Q, h, d).transpose(1, 2)  # [R, h, Q, d]
        # A query sees the keys at or before its position (within the window).
        key_position = torch.arange(M * block_size, device=query.device)
        mask = key_position <= m.query_position  # [R, 1, Q, C]
        if self.sliding_window is not None:
            mask = mask & (key_position > m.query_position - self.sliding_window)
        k, v = k.to(q.dtype), v.to(q.dtype)
        if self.logits_soft_cap is None:
            out = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=h != hkv)
        else:
            out = _soft_capped_attention(q, k, v, mask, self.scale, self.logits_soft_cap)
        out = out.transpose(1, 2).reshape(R * Q, h * d).index_select(0, m.output_index)
        output.view(N, h * d).copy_(out)
        return output


def _soft_capped_attention(q, k, v, mask, scale, cap):
    """Attention whose scores are soft-capped: softmax(cap * tanh(q k^T * scale
    / cap)) v, over q [R, h, Q, d] and k, v [R, hkv, C, d]."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    scores = torch.tanh(scores / cap) * cap
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


class TpuAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update: bool = True
    accept_output_buffer: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes: ClassVar[list] = ["auto"]

    @staticmethod
    def get_name() -> str:
        return "TPU_TORCH"

    @staticmethod
    def get_impl_cls():
        return TpuAttentionImpl

    @staticmethod
    def get_builder_cls():
        return TpuAttentionMetadataBuilder

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER
