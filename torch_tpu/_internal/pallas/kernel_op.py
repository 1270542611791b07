"""A torch.library operator served by exported StableHLO kernels, one per
input signature, with no JAX: what `jax_op` builds on, what a kernel file
loads into, and what Inductor's Pallas entry points register.

The operator is a `torch.library.custom_op` whose tpu kernel is the
StableHLO path of `torch_tpu.library` (the kernel text is inlined into the
program that calls it, so it runs in every eager mode and inside compiled
graphs). Its fake function answers from the exported output types; a
signature never seen asks `exporter` (JAX, at authoring time) for a new
kernel, or, without one, raises naming the signatures the operator has.
"""
import json
import threading

import torch

from ... import _C

FORMAT = "torch_tpu.kernel/1"
OPS = {}  # operator name -> its KernelOp or StaticArgsOp (save_kernel finds it here)


def dtype_name(dtype: torch.dtype) -> str:
    """'float32', 'bfloat16', 'int64', 'bool': the name numpy, JAX and torch share."""
    return str(dtype).rsplit(".", 1)[-1]


def torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"a kernel's tensor has element type {name!r}, which torch does not hold")
    return dtype


def signature_of(tensors) -> tuple:
    """The key of one kernel: ((dtype name, shape), ...) of the inputs."""
    return tuple((dtype_name(t.dtype), tuple(int(d) for d in t.shape)) for t in tensors)


def describe(signature) -> str:
    return "(" + ", ".join(f"{d}{list(s)}" for d, s in signature) + ")"


def tensor_schema(names, num_results: int) -> str:
    """'(Tensor a, Tensor b) -> (Tensor, Tensor)'."""
    params = ", ".join(f"Tensor {n}" for n in names)
    results = "Tensor" if num_results == 1 else "(" + ", ".join(["Tensor"] * num_results) + ")"
    return f"({params}) -> {results}"


class KernelOp:
    """Operator `name` ("ns::op") with tensor parameters `arg_names` and
    `num_results` tensor results; kernels are added per input signature.

    `exporter(signature) -> (stablehlo text, [(dtype name, shape), ...])`
    makes a kernel for a new signature (None: the operator has only the
    kernels it was given). `cpu_impl`, if given, runs the operator on CPU
    tensors; without it a CPU call raises saying the kernel runs on tpu.
    """

    def __init__(self, name, arg_names, num_results, exporter=None, cpu_impl=None, platform=None):
        if not isinstance(name, str) or name.count("::") != 1 or not all(name.split("::")):
            raise ValueError(f"a kernel operator is named 'namespace::name', not {name!r}")
        self.name = name
        self.arg_names = list(arg_names)
        self.num_results = int(num_results)
        self.platform = platform or target_platform()
        self.exporter = exporter
        self.backward = None  # a KernelOp computing the inputs' gradients (vjp), if any
        self._outputs = {}  # signature -> [(dtype name, shape)] of the results
        self._texts = {}  # signature -> its StableHLO text (kept for save())
        self._lock = threading.Lock()
        schema = tensor_schema(self.arg_names, self.num_results)

        def run_on_cpu(*args):
            # First the checks the fake function makes: the tpu kernel runs
            # this kernel to raise CPU's error when its meta function fails.
            self.outputs_for(signature_of(args))
            if cpu_impl is None:
                raise RuntimeError(f"{name} is a tpu kernel: call it on tpu tensors")
            return cpu_impl(*args)

        try:
            self.op = torch.library.custom_op(name, run_on_cpu, mutates_args=(), schema=schema,
                                              device_types="cpu")
        except RuntimeError as e:
            raise ValueError(f"cannot define the kernel operator {name}: {e}") from e
        self.op.register_fake(self._fake)
        _C._serve_stablehlo_operator(name)  # its tpu kernel, before any signature's kernel
        OPS[name] = self

    def __call__(self, *args):
        return self.op(*args)

    def signatures(self):
        return list(self._outputs)

    def add_kernel(self, signature, text: str, outputs) -> None:
        """Serves `signature` with StableHLO `text` returning `outputs`."""
        signature = tuple((d, tuple(s)) for d, s in signature)
        outputs = [(d, tuple(s)) for d, s in outputs]
        if len(outputs) != self.num_results:
            raise ValueError(f"the kernel {self.name} for inputs {describe(signature)} returns "
                             f"{len(outputs)} tensors; the operator declares {self.num_results}")
        with self._lock:
            if signature in self._outputs:
                return
            try:
                _C._register_stablehlo_kernel(self.name, text)
            except ValueError as e:
                raise ValueError(f"the kernel {self.name} for inputs {describe(signature)}: {e}") from e
            self._outputs[signature] = outputs
            self._texts[signature] = text

    def outputs_for(self, signature):
        found = self._outputs.get(signature)
        if found is not None:
            return found
        if self.exporter is None:
            known = "".join(f"\n  {describe(s)}" for s in self._outputs) or " none"
            raise ValueError(f"the kernel {self.name} has no export for inputs {describe(signature)}; "
                             f"it has:{known}\nExport it for these shapes with JAX "
                             "(torch.tpu.pallas.jax_op) and save the kernel file again.")
        text, outputs = self.exporter(signature)
        self.add_kernel(signature, text, outputs)
        return self._outputs[signature]

    def _fake(self, *args):
        # One export per input signature: a dimension Dynamo made dynamic on
        # its own (automatic dynamic shapes, after a call at another size)
        # is specialized to its value by signature_of's int(), a guard that
        # compiles again for another size. A dimension the user marked
        # dynamic cannot be: Dynamo then says which one.
        outputs = self.outputs_for(signature_of(args))
        device = args[0].device if args else torch.device("meta")
        results = [torch.empty(s, dtype=torch_dtype(d), device=device) for d, s in outputs]
        return results[0] if self.num_results == 1 else tuple(results)

    # -- kernel files ------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "arg_names": self.arg_names,
            "num_results": self.num_results,
            "kernels": [{"inputs": [[d, list(s)] for d, s in sig],
                         "outputs": [[d, list(s)] for d, s in self._outputs[sig]],
                         "stablehlo": self._texts[sig]} for sig in self._outputs],
            "backward": self.backward.to_dict() if self.backward is not None else None,
        }

    def save(self, path) -> None:
        """Writes the kernel file: every exported signature (and the
        backward's), loadable without JAX by `load_kernel`."""
        write_kernel_file(path, self.platform, {"op": self.to_dict()})


def write_kernel_file(path, platform: str, body: dict) -> None:
    with open(path, "w") as f:
        json.dump({"format": FORMAT, "platform": platform, **body}, f)


def target_platform() -> str:
    """The jax.export platform of the tpu device's plugin: 'cpu', 'cuda', 'rocm' or 'tpu'."""
    platform = _C._platform()[0].lower()
    return {"gpu": "cuda"}.get(platform, platform)


def from_dict(d: dict, platform: str) -> KernelOp:
    op = KernelOp(d["name"], d["arg_names"], d["num_results"], platform=platform)
    for k in d["kernels"]:
        op.add_kernel([(dt, s) for dt, s in k["inputs"]], k["stablehlo"], [(dt, s) for dt, s in k["outputs"]])
    if d.get("backward"):
        attach_vjp(op, from_dict(d["backward"], platform))
    return op


def read_kernel_file(path):
    """The KernelOp (or StaticArgsOp) of a kernel file written by `save` (no
    JAX needed): defined with torch.library under its saved name, its kernels
    (and backward) registered. Raises ValueError for a file that is not a
    kernel file, or one exported for another platform than this device's."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read the kernel file {path}: {e}") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a torch_tpu kernel file (format {FORMAT!r})")
    body = data.get("op") or data.get("static_op") or {}
    here = target_platform()
    if data.get("platform") != here:
        raise ValueError(f"the kernel file {path} ({body.get('name')}) was exported for platform "
                         f"{data.get('platform')!r}; this device's is {here!r}: export it again there")
    if "static_op" in data:
        from . import static_args

        return static_args.from_dict(data["static_op"], here)
    return from_dict(data["op"], here)


def attach_vjp(op: KernelOp, backward: KernelOp) -> None:
    """Autograd of `op` through `backward`, which takes op's inputs and the
    results' gradients and returns the inputs' gradients."""
    op.backward = backward

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def grad(ctx, *grads):
        inputs = ctx.saved_tensors
        outputs = op.outputs_for(signature_of(inputs))
        cotangents = [g if g is not None else torch.zeros(s, dtype=torch_dtype(d), device=inputs[0].device)
                      for g, (d, s) in zip(grads, outputs)]
        result = backward(*inputs, *cotangents)
        return result if isinstance(result, tuple) else (result,)

    op.op.register_autograd(grad, setup_context=setup_context)


def kernel_of(op):
    """The KernelOp (or StaticArgsOp) behind an operator from jax_op or load_kernel."""
    name = getattr(op, "_qualname", None) or getattr(op, "name", op)
    found = OPS.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"{name!r} is not a kernel operator of torch.tpu.pallas.jax_op or load_kernel")
    return found


def save_kernel(op, path) -> None:
    """Writes `op`'s exported kernels (every input signature it has run with,
    and its vjp's) to the kernel file `path`, which `load_kernel` serves in a
    process without JAX."""
    kernel_of(op).save(path)


def load_kernel(path):
    """The operator of kernel file `path` (a torch.library CustomOpDef; a
    callable that picks the variant of its static arguments for an operator
    that has some), served without JAX."""
    found = read_kernel_file(path)
    return found.op if isinstance(found, KernelOp) else found
