"""An RMSNorm kernel written in Pallas, used as a PyTorch op on tpu tensors.

    python examples/pallas_rms_norm.py

`torch.tpu.pallas.jax_op` exports the JAX function per input shape to
StableHLO (Pallas in interpret mode where the plugin has no Mosaic, e.g.
XLA:CPU) and serves it like any other op: Strict and Fused Eager,
torch.compile(backend="tpu"), autograd through its backward (a jax.numpy
function, exported the same way). `save_kernel` writes the exports, the
backward's too, to a file that a process without JAX runs
(`torch.tpu.pallas.load_kernel`). Needs JAX to author:
`pip install torch_tpu[pallas]`.
"""
import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl

import torch_tpu  # noqa: F401  (registers the tpu device)

EPS = 1e-6


def _rms_norm_block(x_ref, w_ref, out_ref):
    x = x_ref[...]
    out_ref[...] = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS) * w_ref[...]


def rms_norm_pallas(x: jax.Array, w: jax.Array) -> jax.Array:
    """x [rows, features] normalized row by row, scaled by w [features];
    one grid step per block of up to 256 rows. (Off-TPU the grid is a loop
    in interpret mode: few large blocks run faster there than many small.)"""
    rows, features = x.shape
    block = next((b for b in (256, 128, 64, 32, 16, 8) if rows % b == 0 and b < rows), rows)
    return pl.pallas_call(
        _rms_norm_block,
        grid=(rows // block,),
        in_specs=[pl.BlockSpec((block, features), lambda i: (i, 0)),
                  pl.BlockSpec((features,), lambda i: (0,))],
        out_specs=pl.BlockSpec((block, features), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x, w)


def rms_norm_backward(x: jax.Array, w: jax.Array, grad: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The gradients of x and w, in jax.numpy."""
    r = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS)
    normed = x * r
    g = grad * w
    grad_x = r * (g - normed * jnp.mean(g * normed, axis=-1, keepdims=True))
    return grad_x, jnp.sum(grad * normed, axis=0)


def register(namespace: str = "examples"):
    """The operator `<namespace>::rms_norm`, its backward the jax.numpy one."""
    return torch.tpu.pallas.jax_op(f"{namespace}::rms_norm", rms_norm_pallas, backward=rms_norm_backward)


def rms_norm_reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The same math in PyTorch (what the kernel is checked against)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


class Block(torch.nn.Module):
    """Linear, RMSNorm (the kernel, or PyTorch's math), Linear."""

    def __init__(self, norm, features=32, classes=4):
        super().__init__()
        self.up = torch.nn.Linear(features, features)
        self.scale = torch.nn.Parameter(torch.ones(features))
        self.out = torch.nn.Linear(features, classes)
        self.norm = norm

    def forward(self, x):
        return self.out(self.norm(torch.relu(self.up(x)), self.scale))


if __name__ == "__main__":
    rms_norm = register()
    torch.manual_seed(0)
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    for name, mode, compiled in (("Fused Eager", "DEFER_AND_FUSE", False),
                                 ("compiled", "DEFER_NEVER", True)):
        torch.manual_seed(1)
        model = Block(rms_norm).to("tpu")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        step_fn = torch.compile(model, backend="tpu") if compiled else model
        with torch_tpu.eager_mode(mode):
            for step in range(5):
                loss = torch.nn.functional.cross_entropy(step_fn(x.to("tpu")), y.to("tpu"))
                opt.zero_grad()
                loss.backward()
                opt.step()
        print(f"{name}: loss after 5 steps {loss.item():.4f}")
    torch.tpu.pallas.save_kernel(rms_norm, "rms_norm.kernel")
    print("saved rms_norm.kernel (loads without JAX: torch.tpu.pallas.load_kernel)")
