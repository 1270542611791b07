"""`JaxCallable`: a jitted JAX function (a Pallas kernel) called on tpu
tensors, the entry point Helion's Pallas backend runs its kernels through
(helion/runtime/pallas/launcher.py imports this module by name).

Per invocation key (the input shapes and dtypes, and the static
arguments' values) the function is exported with `jax.export` for the tpu
device's platform (Pallas in interpret mode where the plugin has no
Mosaic), registered with `tpu_torch_pallas` under the StableHLO's
fingerprint and called through `tpu_torch_pallas.call_custom_kernel`, as
Inductor's Pallas code is. The attributes Helion reads to call
`call_custom_kernel` directly afterwards (`output_shapes`,
`kernel_key_to_mlir_fingerprint`, ...) are kept per key.
"""
import hashlib

import torch

from . import jax_export, kernel_op, tpu_torch_pallas


def jax_placeholder(t: torch.Tensor):
    """The `jax.ShapeDtypeStruct` of tensor `t` (a Pallas call's out_shape)."""
    import jax
    import jax.numpy as jnp

    return jax.ShapeDtypeStruct(tuple(int(d) for d in t.shape), jnp.dtype(kernel_op.dtype_name(t.dtype)))


def get_default_pallas_mesh():
    """A mesh over every device of the process group: multi-device kernels
    are not supported yet (as for `jax_op`)."""
    raise NotImplementedError("Pallas kernels over several tpu devices (a mesh) are not supported "
                              "yet; call the kernel on one device's tensors")


def _is_array(x) -> bool:
    return isinstance(x, torch.Tensor)


def _get_kernel_invocation_key(trace_key, args, kwargs, static_argnums):
    """The key of one export of a JaxCallable: its trace key, each tensor
    argument's (dtype, shape), the static arguments' values and the keyword
    arguments (static values)."""
    static = set(static_argnums or ())
    parts = []
    for i, a in enumerate(args):
        if i in static or not _is_array(a):
            parts.append(("static", i, a))
        else:
            parts.append(kernel_op.signature_of([a])[0])
    return (trace_key, tuple(parts), tuple(sorted((kwargs or {}).items())))


class JaxCallable:
    """`jit_fn` (a JAX function of arrays, then static values at
    `static_argnums`) called on tpu tensors; returns tpu tensors in the
    function's output structure. `input_output_aliases` ({input index:
    output index}) writes those outputs into their inputs as well, as a
    donated buffer would be. `donate_argnums` is passed on (inputs stay
    valid); `mesh` may have one device only."""

    def __init__(self, name, jit_fn, trace_key=None, mesh=None, input_partition_specs=None,
                 output_partition_specs=None, input_output_aliases=None, donate_argnums=(),
                 static_argnums=()):
        if mesh is not None and mesh.devices.size != 1:
            get_default_pallas_mesh()  # raises: several devices
        self.name = name
        self.jit_fn = jit_fn
        self.trace_key = trace_key if trace_key is not None else f"{name}_{id(jit_fn)}"
        self.mesh = mesh
        self.input_partition_specs = input_partition_specs
        self.output_partition_specs = output_partition_specs
        self.input_output_aliases = dict(input_output_aliases or {})
        self.donate_argnums = tuple(donate_argnums or ())
        self.static_argnums = tuple(static_argnums or ())
        self.output_shapes = {}  # key -> ([jax.ShapeDtypeStruct] of the results, their pytree)
        self.kernel_key_to_mlir_fingerprint = {}  # key -> the registered module's key

    def _export(self, key, args, kwargs):
        """Exports the function for this call's signature and registers it."""
        import jax
        import jax.numpy as jnp

        static = set(self.static_argnums)
        arrays = [i for i, a in enumerate(args) if i not in static and _is_array(a)]

        def fn(*xs):
            full = list(args)
            for i, x in zip(arrays, xs):
                full[i] = x
            return self.jit_fn(*full, **kwargs)

        signature = kernel_op.signature_of([args[i] for i in arrays])
        text, outputs, tree = jax_export.export(fn, signature, kernel_op.target_platform())
        fingerprint = hashlib.sha256(text.encode()).hexdigest()
        if not tpu_torch_pallas.lookup_custom_kernel(self.name, fingerprint):
            tpu_torch_pallas.register_custom_kernel(self.name, fingerprint, serialized_mlir_module=text)
        self.output_shapes[key] = ([jax.ShapeDtypeStruct(s, jnp.dtype(d)) for d, s in outputs], tree)
        self.kernel_key_to_mlir_fingerprint[key] = fingerprint

    def __call__(self, *args, **kwargs):
        key = _get_kernel_invocation_key(self.trace_key, args, kwargs, self.static_argnums)
        if key not in self.output_shapes:
            self._export(key, args, kwargs)
        output_shapes, tree = self.output_shapes[key]
        static = set(self.static_argnums)
        inputs = [a for i, a in enumerate(args) if i not in static and _is_array(a)]
        results = tpu_torch_pallas.call_custom_kernel(
            self.name, self.kernel_key_to_mlir_fingerprint[key], inputs=inputs,
            output_shapes=output_shapes, donate_argnums=self.donate_argnums)
        for i, o in self.input_output_aliases.items():
            args[i].copy_(results[o])
        return tree.unflatten(results)
