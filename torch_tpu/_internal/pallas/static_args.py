"""A kernel operator with static arguments (int, float, bool, str: the
reference's static argnums, inferred from a jax_op function's annotations):
one tensor-only KernelOp per distinct tuple of static values, each exported
(JAX) or loaded from a kernel file (no JAX) on its own.

A call binds its arguments to the function's parameters, checks the static
ones' types, and runs the variant of those values on the arrays. Static
values are part of the kernel, as jax.jit's static arguments are: a new value
is a new export and a new program.
"""
import inspect
import threading

from . import kernel_op

STATIC_TYPES = {"int": int, "float": float, "bool": bool, "str": str}


class StaticArgsOp:
    """Operator `name` of parameters `params` ([(name, "array" | "int" |
    "float" | "bool" | "str")]); `make_variant(values, variant_name)` builds
    the KernelOp of a new tuple of static values (None: only those given)."""

    def __init__(self, name, params, num_results, make_variant=None, platform=None):
        self.name = name
        self.params = [(p, kind) for p, kind in params]
        self.num_results = int(num_results)
        self.platform = platform or kernel_op.target_platform()
        self.make_variant = make_variant
        self._variants = {}  # static values -> KernelOp
        self._lock = threading.Lock()
        self._signature = inspect.Signature(
            [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p, _ in self.params])
        kernel_op.OPS[name] = self

    def __call__(self, *args, **kwargs):
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.name}: {e}") from None
        arrays, statics = [], []
        for p, kind in self.params:
            value = bound.arguments[p]
            if kind == "array":
                arrays.append(value)
                continue
            expected = STATIC_TYPES[kind]
            ok = isinstance(value, expected) and not (expected is int and isinstance(value, bool))
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                value, ok = float(value), True
            if not ok:
                raise TypeError(f"{self.name}: argument '{p}' is a static {kind}, not "
                                f"{type(value).__name__}")
            statics.append(value)
        return self.variant(tuple(statics))(*arrays)

    def variant(self, values) -> kernel_op.KernelOp:
        found = self._variants.get(values)  # without the lock: Dynamo traces this path
        if found is not None:
            return found
        with self._lock:
            op = self._variants.get(values)
            if op is None:
                if self.make_variant is None:
                    known = "".join(f"\n  {list(v)}" for v in self._variants) or " none"
                    raise ValueError(f"the kernel {self.name} has no export for static arguments "
                                     f"{list(values)}; it has:{known}\nExport it for them with JAX "
                                     "(torch.tpu.pallas.jax_op) and save the kernel file again.")
                op = self.make_variant(values, f"{self.name}_v{len(self._variants)}")
                self._variants[values] = op
            return op

    def to_dict(self) -> dict:
        return {"name": self.name, "params": [list(p) for p in self.params],
                "num_results": self.num_results,
                "variants": [{"static": list(v), "op": op.to_dict()} for v, op in self._variants.items()]}

    def save(self, path) -> None:
        kernel_op.write_kernel_file(path, self.platform, {"static_op": self.to_dict()})


def from_dict(d: dict, platform: str) -> StaticArgsOp:
    op = StaticArgsOp(d["name"], d["params"], d["num_results"], platform=platform)
    for v in d["variants"]:
        op._variants[tuple(v["static"])] = kernel_op.from_dict(v["op"], platform)
    return op
