"""`torch.tpu.pallas` (the reference's `torch_tpu._internal.pallas`): custom
kernels from JAX and Pallas on tpu tensors.

`jax_op` needs JAX (an authoring-time extra: `pip install torch_tpu[pallas]`)
and imports it on first use; `load_kernel`/`save_kernel` and the entry points
Inductor's Pallas code calls (`tpu_torch_pallas`) run kernels without it.
"""
from .kernel_op import load_kernel, save_kernel

__all__ = ["jax_op", "load_kernel", "save_kernel"]


def __getattr__(name):
    # jax_kernels (jax_op) imports JAX; only a use of jax_op loads it.
    if name == "jax_op":
        from .jax_kernels import jax_op

        return jax_op
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return __all__ + ["tpu_torch_pallas"]
