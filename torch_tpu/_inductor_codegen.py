"""Inductor's code generator for `tpu` tensors where it cannot run.

PyTorch's Inductor generates Pallas (JAX) kernels for the device type `tpu`.
Without JAX installed, `torch.compile(backend="inductor")` on tpu tensors
failed deep inside Inductor with `No module named 'jax'` after seconds of
tracing (transformers' `CompileConfig()` names Inductor explicitly). Then we
register, through Inductor's own per-device registry, a code generator whose
first use raises one error saying what to do instead: `backend="tpu"`, which
is also what the default backend picks for tpu tensors. With JAX installed,
Inductor's Pallas path is left as it is: its generated code runs its kernels
through torch_tpu._internal.pallas.tpu_torch_pallas.
"""
import importlib.util

MESSAGE = (
    'torch_tpu: torch.compile(backend="inductor") cannot compile a graph of tpu tensors '
    "here: Inductor's code generator for tpu is its Pallas path, which needs JAX (not "
    'installed). Use backend="tpu", or no backend= (the default backend compiles tpu '
    "graphs with \"tpu\"); for transformers' generate(), leave compile_config unset or "
    'pass CompileConfig(backend="tpu").')


class NoInductorCodegen:
    """Inductor's Scheduling and wrapper-codegen slots for `tpu`: any use raises."""

    supports_caching = False

    def __init__(self, *args, **kwargs):
        raise RuntimeError(MESSAGE)

    @classmethod
    def create(cls, *args, **kwargs):
        raise RuntimeError(MESSAGE)


def _register(common):
    if common.get_scheduling_for_device("tpu") is None:
        common.register_backend_for_device("tpu", NoInductorCodegen, NoInductorCodegen)


def _jax_importable() -> bool:
    try:
        return importlib.util.find_spec("jax") is not None
    except (ImportError, ValueError):  # an import hook refusing it; a broken entry
        return False


def install():
    """At Inductor's first import, when JAX is absent (called at import of torch_tpu)."""
    if not _jax_importable():
        from ._import_hooks import after_import

        after_import("torch._inductor.codegen.common", _register)
