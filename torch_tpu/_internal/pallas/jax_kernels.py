"""`torch.tpu.pallas.jax_op(name, fn)`: a JAX function (jax.numpy, or a
Pallas `pallas_call`) as a torch.library operator on tpu tensors.

Per input signature the function is exported with `jax.export` for the tpu
device's platform (Pallas in interpret mode where the plugin has no Mosaic)
and served as a StableHLO kernel (`kernel_op.KernelOp`); the operator's
fake function answers from the export's output types. Static (int, float,
bool, str) arguments make one such operator per tuple of their values
(static_args.py). `vjp=True` gives it autograd through `jax.vjp`,
`backward=` through the author's JAX function, each exported the same way.
`save_kernel` writes the exports to a kernel file that `load_kernel` serves
without JAX (kernel_op.py).
"""
import inspect
import typing

from . import kernel_op, static_args


def _is_array_annotation(annotation) -> bool:
    if annotation is inspect.Parameter.empty:
        return True
    import jax

    return annotation in (jax.Array, jax.numpy.ndarray) or annotation == "jax.Array"


def _parameters(name, fn):
    """([(parameter, "array" or a static kind)], number of results) of `fn`."""
    try:
        signature = inspect.signature(inspect.unwrap(fn), eval_str=True)
    except (TypeError, ValueError, NameError) as e:
        raise ValueError(f"jax_op {name}: cannot read the signature of {fn!r}: {e}") from e
    params = []
    for p in signature.parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.default is not p.empty:
            raise ValueError(f"jax_op {name}: parameter '{p.name}' must be positional, without a "
                             "default (bind such arguments with functools.partial)")
        static = next((k for k, t in static_args.STATIC_TYPES.items() if p.annotation is t), None)
        if static is None and not _is_array_annotation(p.annotation):
            raise ValueError(f"jax_op {name}: parameter '{p.name}' is annotated {p.annotation!r}: a "
                             "kernel takes arrays (jax.Array) and static int, float, bool or str "
                             "arguments; bind others with functools.partial")
        params.append((p.name, static or "array"))
    returns = signature.return_annotation
    if _is_array_annotation(returns) and returns is not inspect.Parameter.empty:
        return params, 1
    args = typing.get_args(returns)
    if typing.get_origin(returns) is tuple and args and Ellipsis not in args and all(
            _is_array_annotation(a) and a is not inspect.Parameter.empty for a in args):
        return params, len(args)
    raise ValueError(f"jax_op {name}: annotate what {getattr(fn, '__name__', 'the function')} returns: "
                     "-> jax.Array, or -> tuple[jax.Array, jax.Array] for several arrays "
                     f"(it says {'nothing' if returns is inspect.Parameter.empty else repr(returns)})")


def _with_statics(fn, params, values, extra=0):
    """`fn` as a function of its arrays (then `extra` more arguments, passed
    on after them), the static arguments fixed to `values`."""
    statics = dict(zip([p for p, kind in params if kind != "array"], values))

    def bound(*args):
        arrays = iter(args[:len(args) - extra] if extra else args)
        full = [next(arrays) if kind == "array" else statics[p] for p, kind in params]
        return fn(*full, *args[len(args) - extra:]) if extra else fn(*full)

    return bound


def _exporter(name, fn, platform):
    def export(signature):
        from . import jax_export

        try:
            text, outputs, tree = jax_export.export(fn, signature, platform)
        except Exception as e:  # the author's function: any error is theirs
            raise ValueError(f"jax_op {name}: jax.export of the JAX function for inputs "
                             f"{kernel_op.describe(signature)} failed: {type(e).__name__}: {e}") from e
        if tree.num_nodes > 1 and tree.num_leaves != tree.num_nodes - 1:
            raise ValueError(f"jax_op {name}: the JAX function returns {tree}; a kernel returns an "
                             "array or a flat tuple of arrays")
        return text, outputs

    return export


def _kernel_op(name, fn, backward, names, num_results, vjp, platform) -> kernel_op.KernelOp:
    """The KernelOp of `fn` (arrays `names` in), with autograd from
    jax.vjp (`vjp`) or `backward` (arrays, then the results' gradients)."""
    from . import jax_export

    op = kernel_op.KernelOp(name, names, num_results, exporter=_exporter(name, fn, platform),
                            cpu_impl=jax_export.run_on_cpu(fn), platform=platform)
    if vjp or backward is not None:
        backward_fn = jax_export.vjp_function(fn, len(names)) if vjp else backward
        backward_name = name + ("_vjp" if vjp else "_backward")
        grads = kernel_op.KernelOp(
            backward_name, names + [f"grad_{i}" for i in range(num_results)], len(names),
            exporter=_exporter(backward_name, backward_fn, platform),
            cpu_impl=jax_export.run_on_cpu(backward_fn), platform=platform)
        kernel_op.attach_vjp(op, grads)
    return op


def jax_op(name, fn=None, /, *, donate_argnums=None, mesh=None, input_partition_specs=None,
           output_partition_specs=None, vjp=False, backward=None):
    """Registers JAX function `fn` as the torch.library operator `name`
    ("namespace::op") on tpu tensors (and CPU tensors, through JAX on the
    host). Its parameters are arrays, or static int, float, bool or str
    arguments (annotated so: each distinct tuple of their values is its own
    kernel, and the operator is a callable picking it, not a CustomOpDef);
    its return annotation says how many arrays it returns. Without `fn`, a
    decorator.

    `donate_argnums`: accepted for the reference's API; inputs stay valid
    (a kernel's results are new buffers, which XLA may place in dead
    inputs). Autograd (ours; the reference has neither): `vjp=True`, through
    jax.vjp of `fn`; or `backward`, a JAX function taking `fn`'s arguments and
    then one gradient per result and returning the arrays' gradients (a
    tuple, one per array). Either is exported like `fn` and saved with it in
    kernel files. `mesh` and the partition specs (multi-device kernels) are
    not supported yet.
    """
    if not isinstance(name, str) or name.count("::") != 1 or not all(name.split("::")):
        raise ValueError(f"jax_op: an operator is named 'namespace::name', not {name!r}")
    if vjp and backward is not None:
        raise ValueError(f"jax_op {name}: give vjp=True or a backward function, not both")
    if backward is not None and not callable(backward):
        raise TypeError(f"jax_op {name}: backward is a JAX function, not {type(backward).__name__}")
    if mesh is not None or input_partition_specs is not None or output_partition_specs is not None:
        raise ValueError(f"jax_op {name}: mesh and partition specs (multi-device kernels) are not "
                         "supported yet; call the kernel on one device's tensors")

    def register(fn):
        if not callable(fn):
            raise TypeError(f"jax_op {name}: expected a JAX function, got {type(fn).__name__}")
        params, num_results = _parameters(name, fn)
        for i in donate_argnums or ():
            if not isinstance(i, int) or not 0 <= i < len(params):
                raise ValueError(f"jax_op {name}: donate_argnums has {i!r}; the function takes "
                                 f"{len(params)} arguments")
        platform = kernel_op.target_platform()
        if all(kind == "array" for _, kind in params):
            return _kernel_op(name, fn, backward, [p for p, _ in params], num_results, vjp, platform).op

        def make_variant(values, variant_name):
            return _kernel_op(variant_name, _with_statics(fn, params, values),
                              backward and _with_statics(backward, params, values, extra=num_results),
                              [p for p, kind in params if kind == "array"], num_results, vjp, platform)

        return static_args.StaticArgsOp(name, params, num_results, make_variant, platform)

    return register if fn is None else register(fn)
