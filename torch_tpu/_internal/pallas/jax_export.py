"""JAX at authoring time: a JAX function exported (`jax.export`) for one input
signature to StableHLO text, and serialized modules (what Inductor's Pallas
code hands over) turned into text. Imported only by the JAX entry points,
never by `import torch_tpu` or by a loaded kernel file.
"""
import contextlib

import jax
import jax.numpy as jnp
from jax._src import config as _jax_config
from jax._src.interpreters import mlir as _mlir
from jax._src.lib import _jax
from jax._src.lib.mlir import ir as _ir

# Plugins that run Mosaic (Pallas's TPU compiler); elsewhere pallas_call
# lowers in interpret mode: its body as plain StableHLO (a loop over the grid).
MOSAIC_PLATFORMS = ("tpu",)


@contextlib.contextmanager
def pallas_interpret(platform: str):
    """Every pallas_call traced inside lowers in interpret mode off-Mosaic.
    JAX's switch for this (the value `force_tpu_interpret_mode` sets) is
    internal; `True` selects the HLO interpreter, which exports as plain
    StableHLO (the TPU-simulating interpreter uses host callbacks, which do
    not serialize)."""
    if platform in MOSAIC_PLATFORMS:
        yield
        return
    state = _jax_config.pallas_tpu_interpret_mode_context_manager
    previous = state.swap_local(True)
    try:
        yield
    finally:
        state.set_local(previous)


def set_pallas_interpret() -> None:
    """Interpret mode for every pallas_call traced from now on, in every
    thread (for code we do not call, such as Inductor's generated kernels)."""
    _jax_config.pallas_tpu_interpret_mode_context_manager.set_global(True)


def module_text(serialized: bytes) -> str:
    """A serialized StableHLO module (`Exported.mlir_module_serialized`) as
    text, without locations (they name the author's files)."""
    with _mlir.make_ir_context() as context:
        module = _jax.mlir.deserialize_portable_artifact(serialized)
        if not isinstance(module, _ir.Module):
            module = _ir.Module.parse(module, context=context)
        return _mlir.module_to_string(module, enable_debug_info=False)


def wide(dtype_names) -> bool:
    """Whether a call needs JAX's 64-bit mode: only then, so that a kernel
    written for JAX's default (jnp.zeros is float32) keeps its types, and
    64-bit tensors stay 64-bit instead of becoming 32-bit parameters."""
    return any(name in ("int64", "uint64", "float64", "complex128") for name in dtype_names)


def export(fn, signature, platform: str):
    """(text, [(dtype name, shape), ...] of the results, number of results
    as a pytree leaf count) of `fn` exported for `signature`
    ((dtype name, shape) per input) on `platform`."""
    args = [jax.ShapeDtypeStruct(shape, jnp.dtype(dtype)) for dtype, shape in signature]
    with jax.enable_x64(wide(dtype for dtype, _ in signature)), pallas_interpret(platform):
        exported = jax.export.export(jax.jit(fn), platforms=[platform])(*args)
    outputs = [(a.dtype.name, tuple(int(d) for d in a.shape)) for a in exported.out_avals]
    return module_text(exported.mlir_module_serialized), outputs, exported.out_tree


def vjp_function(fn, num_args: int):
    """(*primals, *cotangents) -> the primals' gradients, through jax.vjp."""

    def backward(*args):
        primals, cotangents = args[:num_args], args[num_args:]
        outputs, pullback = jax.vjp(fn, *primals)
        if not isinstance(outputs, (tuple, list)):
            cotangents = cotangents[0]
        else:
            cotangents = type(outputs)(cotangents)
        return tuple(pullback(cotangents))

    return backward


def run_on_cpu(fn):
    """`fn` on CPU torch tensors (the operator's CPU kernel), through numpy
    (bfloat16 by its bits: numpy has no such type of its own)."""
    import numpy as np
    import torch

    def to_jax(t, device):
        t = t.detach().contiguous()
        if t.dtype == torch.bfloat16:
            return jax.device_put(t.view(torch.int16).numpy().view(jnp.bfloat16), device)
        return jax.device_put(t.numpy(), device)

    def to_torch(x):
        a = np.asarray(x)
        if a.dtype == jnp.bfloat16:
            return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
        return torch.from_numpy(a.copy())

    def run(*args):
        cpu = jax.local_devices(backend="cpu")[0]
        with jax.enable_x64(wide(str(a.dtype).rsplit(".", 1)[-1] for a in args)), pallas_interpret("cpu"):
            out = jax.jit(fn)(*[to_jax(a, cpu) for a in args])
        if isinstance(out, (tuple, list)):
            return tuple(to_torch(x) for x in out)
        return to_torch(out)

    return run
