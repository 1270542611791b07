"""Causal flash attention written in Pallas, used as a PyTorch op on tpu tensors.

    python examples/pallas_flash_attention.py

The forward is a Pallas kernel: one grid step per (batch x head, block of
queries), a loop over the blocks of keys up to the diagonal with the online
softmax (running max and sum), so the [T, T] scores never exist whole. The
backward is another jax_op: jax.vjp of the same attention in jax.numpy.
Off-TPU (no Mosaic) the kernel runs in Pallas's interpret mode. Needs JAX to
author: `pip install torch_tpu[pallas]`.
"""
import functools

import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl

import torch_tpu  # noqa: F401  (registers the tpu device)

BLOCK = 16


def _flash_block(q_ref, k_ref, v_ref, o_ref, *, block, scale):
    q = q_ref[0] * scale  # [block, d]
    qi = pl.program_id(1)
    rows = qi * block + jnp.arange(block)[:, None]

    def body(kj, carry):
        acc, running_max, running_sum = carry
        k = k_ref[0, pl.ds(kj * block, block), :]
        v = v_ref[0, pl.ds(kj * block, block), :]
        s = q @ k.T
        cols = kj * block + jnp.arange(block)[None, :]
        s = jnp.where(cols <= rows, s, -jnp.inf)
        new_max = jnp.maximum(running_max, s.max(axis=-1, keepdims=True))
        p = jnp.exp(s - new_max)
        correction = jnp.exp(running_max - new_max)
        return (acc * correction + p @ v, new_max,
                running_sum * correction + p.sum(axis=-1, keepdims=True))

    d = q.shape[-1]
    init = (jnp.zeros((block, d), jnp.float32), jnp.full((block, 1), -jnp.inf, jnp.float32),
            jnp.zeros((block, 1), jnp.float32))
    acc, _, total = jax.lax.fori_loop(0, qi + 1, body, init)
    o_ref[0] = (acc / total).astype(o_ref.dtype)


def flash_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """Causal softmax(q k^T / sqrt(d)) v; q, k, v [batch, heads, T, d],
    T a multiple of BLOCK."""
    b, h, t, d = q.shape
    block = min(BLOCK, t)
    flat = [a.reshape(b * h, t, d) for a in (q, k, v)]
    out = pl.pallas_call(
        functools.partial(_flash_block, block=block, scale=d ** -0.5),
        grid=(b * h, t // block),
        in_specs=[pl.BlockSpec((1, block, d), lambda i, j: (i, j, 0)),
                  pl.BlockSpec((1, t, d), lambda i, j: (i, 0, 0)),
                  pl.BlockSpec((1, t, d), lambda i, j: (i, 0, 0))],
        out_specs=pl.BlockSpec((1, block, d), lambda i, j: (i, j, 0)),
        out_shape=jax.ShapeDtypeStruct(flat[0].shape, q.dtype),
    )(*flat)
    return out.reshape(b, h, t, d)


def attention_jnp(q, k, v):
    t, d = q.shape[-2], q.shape[-1]
    s = (q @ jnp.swapaxes(k, -1, -2)) * d ** -0.5
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -jnp.inf)
    return jax.nn.softmax(s, axis=-1) @ v


def flash_attention_backward(q: jax.Array, k: jax.Array, v: jax.Array,
                             grad: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The gradients of q, k and v (jax.vjp of the jax.numpy attention)."""
    _, pullback = jax.vjp(attention_jnp, q, k, v)
    return pullback(grad)


def register(namespace: str = "examples"):
    """The operator `<namespace>::flash_attention`, its backward the jax.numpy one."""
    return torch.tpu.pallas.jax_op(f"{namespace}::flash_attention", flash_attention,
                                   backward=flash_attention_backward)


def attention_reference(q, k, v):
    """The same attention in PyTorch (what the kernel is checked against)."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


if __name__ == "__main__":
    attention = register()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 32, generator=g) for _ in range(3))
    out = attention(q.to("tpu"), k.to("tpu"), v.to("tpu"))
    print("max difference from PyTorch's attention:",
          float((out.cpu() - attention_reference(q, k, v)).abs().max()))
