"""The kernel entry points PyTorch's Inductor calls for tpu tensors (its
Pallas code generator, torch/_inductor/codegen/pallas.py, imports this module
by name): a serialized StableHLO module registered under (kernel name, key),
then called on tpu tensors with the result shapes given.

A registered module becomes a kernel operator (`kernel_op.KernelOp`,
`tpu_pallas::<name>_<n>`), so it runs like any other op: in every eager mode,
inside Fused programs and captured graphs. Where the plugin has no Mosaic
(XLA:CPU, XLA:GPU), importing this module makes Pallas lower in interpret
mode, so the kernel Inductor exports is plain StableHLO that runs there.
"""
import re
import threading

import torch

from . import kernel_op

_lock = threading.Lock()
_modules = {}  # (name, key) -> StableHLO text
_ops = {}  # (name, key) -> KernelOp


def _interpret_off_mosaic():
    """Inductor's generated code exports `pallas_call(interpret=False)` for
    platform 'tpu' (Mosaic). On a plugin without Mosaic it could not run,
    so JAX's Pallas interpret switch is set, process-wide, when this
    module is imported (the one running the generated code), and in every other."""
    try:
        from .jax_export import MOSAIC_PLATFORMS, set_pallas_interpret
    except ImportError:  # no JAX: text modules only
        return

    if kernel_op.target_platform() not in MOSAIC_PLATFORMS:
        set_pallas_interpret()


def lookup_custom_kernel(name: str, key: str) -> bool:
    """Whether (name, key) has a module."""
    return (name, key) in _modules


def register_custom_kernel(name: str, key: str, serialized_mlir_module=None) -> None:
    """Registers a module under (name, key): bytes as `jax.export` serializes
    one (`Exported.mlir_module_serialized`; read with JAX), or StableHLO text."""
    if serialized_mlir_module is None:
        raise TypeError(f"register_custom_kernel({name!r}): give serialized_mlir_module")
    module = serialized_mlir_module
    if isinstance(module, (bytes, bytearray)):
        from .jax_export import module_text

        try:
            module = module_text(bytes(module))
        except Exception as e:
            raise ValueError(f"register_custom_kernel({name!r}, {key!r}): cannot read the "
                             f"serialized module: {e}") from e
    if not isinstance(module, str):
        raise TypeError(f"register_custom_kernel({name!r}): serialized_mlir_module is bytes or "
                        f"StableHLO text, not {type(module).__name__}")
    with _lock:
        _modules[(name, key)] = module


def _operator(name, key, inputs, output_shapes) -> kernel_op.KernelOp:
    with _lock:
        op = _ops.get((name, key))
        if op is None:
            if (name, key) not in _modules:
                raise ValueError(f"call_custom_kernel: no kernel {name!r} with key {key!r} is "
                                 "registered (register_custom_kernel first)")
            base = re.sub(r"\W", "_", name)[:60] or "kernel"
            op_name = f"tpu_pallas::{base}_{len(_ops)}"
            op = kernel_op.KernelOp(op_name, [f"in{i}" for i in range(len(inputs))], len(output_shapes))
            _ops[(name, key)] = op
    signature = kernel_op.signature_of(inputs)
    outputs = [(kernel_op.dtype_name(t.dtype), tuple(t.shape)) for t in output_shapes]
    if signature not in op.signatures():
        op.add_kernel(signature, _modules[(name, key)], outputs)
    elif op.outputs_for(signature) != outputs:
        raise ValueError(f"call_custom_kernel {name!r}: output_shapes {outputs} differ from the "
                         f"kernel's {op.outputs_for(signature)}")
    return op


def call_custom_kernel(name: str, key: str, inputs, output_shapes, donate_argnums=(),
                       input_output_aliases=None, device_assignment=None):
    """Runs kernel (name, key) on tpu tensors `inputs`; `output_shapes` are
    tensors (or `jax.ShapeDtypeStruct`s) whose shapes and dtypes its results
    have (what the kernel returns is checked against them). Returns the
    results, new tensors; donated inputs stay valid. `device_assignment`
    (device ids, as Helion passes) may name one device at most: the kernel
    runs on its inputs' device."""
    if device_assignment is not None and len(device_assignment) > 1:
        raise ValueError(f"call_custom_kernel {name!r}: kernels over several devices "
                         f"(device_assignment {list(device_assignment)}) are not supported yet")
    inputs = list(inputs)
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or t.device.type != "tpu":
            raise TypeError(f"call_custom_kernel {name!r}: input {i} is not a tpu tensor")
    op = _operator(name, key, inputs, list(output_shapes))
    results = op(*inputs)
    return list(results) if isinstance(results, tuple) else [results]


_interpret_off_mosaic()
