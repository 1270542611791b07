"""The `torch.compile` backend "tpu".

Dynamo hands us an FX graph; AOTAutograd splits it into forward and backward
graphs of ATen ops. Each graph runs once on real tpu tensors with nothing
flushed (DEFER_ALL), so the per-op eager kernels record the whole graph as ONE
StableHLO program; later calls replay that program with only device buffers
crossing over. Eager and compiled mode share one lowering per op and one
compile cache.

As `torch.tpu.compiler` it also holds `custom_compiler_options` (the
reference's XLA compile options, compiler_options.py).
"""
import threading
import warnings

import torch

from . import _C
from ._import_hooks import after_import
from .compiler_options import custom_compiler_options, current_compiler_options  # noqa: F401

_graphs = []  # (name, StableHLO text) of captured graphs, newest last
_lock = threading.Lock()
_warned = set()


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=3)


_metrics_extra = {}


def _count(name):
    _metrics_extra[name] = _metrics_extra.get(name, 0) + 1


_bucket_compiles = {}  # graph name -> {bucket label: captures}


def compile_metrics() -> dict:
    """Captures (recompiles included), replays and eager fallbacks so far;
    `bucket_compiles`: per bucketed graph, the captures of each bucket."""
    out = dict(_metrics_extra)
    if _bucket_compiles:
        out["bucket_compiles"] = {g: dict(b) for g, b in _bucket_compiles.items()}
    from .dynamic_shapes import host_pads
    if host_pads():
        out["dynamic_host_pads"] = host_pads()
    return out


def graphs():
    """StableHLO text of the graphs compiled so far, as (name, text) pairs."""
    with _lock:
        return list(_graphs)


class _GraphRunner:
    """Runs one AOTAutograd graph: captures per input layout, then replays."""

    def __init__(self, gm, name, in_background=False):
        self.gm = gm
        self.name = name
        self.in_background = in_background  # async_compile.py
        # key of non-tpu arguments -> [(CapturedGraph, template, GraphReplay)]
        self.captured = {}
        self.eager_keys = set()
        self.captures = 0  # calls that captured (dynamic_shapes.BucketedRunner reads it)
        self.bucket_of_key = None  # set by dynamic_shapes.BucketedRunner: the bucket's label
        # A collective (torch.ops._c10d_functional.*, c10d.*) runs through the
        # process group during capture, so a captured program would replay
        # its first result; such graphs run their ops eagerly every call.
        self.collectives = sorted({str(n.target) for n in gm.graph.nodes
                                   if n.op == "call_function"
                                   and getattr(n.target, "namespace", None)
                                   in ("_c10d_functional", "c10d")})

    @staticmethod
    def bakes_in(t):
        """Whether a host tensor argument is taken by value (part of the key
        that picks the program, a constant inside it): a small one, such as a
        CPU step counter or a 0-d constant a graph lifted out of the model."""
        return t.numel() <= 16

    @staticmethod
    def _split(args):
        tensors, key = [], []
        for a in args:
            if isinstance(a, torch.Tensor):
                if a.device.type == "tpu":
                    tensors.append(a)
                    key.append("t")
                elif _GraphRunner.bakes_in(a):
                    key.append(("c", a.dtype, tuple(a.shape), tuple(a.flatten().tolist())))
                else:
                    return tensors, None
            else:
                key.append(("v", a))
        return tensors, tuple(key)

    def __call__(self, *args):
        if self.collectives:
            _warn_once((self.name, "collectives"),
                       f"torch_tpu: graph {self.name} runs eagerly: it calls collectives "
                       f"({', '.join(self.collectives)})")
            _count("eager_calls")
            return self.gm(*args)
        split = _C._split_graph_args(args)  # C++: no Python loop over the arguments
        tensors, key = split if split is not None else self._split(args)
        if key is None or key in self.eager_keys:
            _count("eager_calls")
            return self.gm(*args)
        entries = self.captured.setdefault(key, [])
        for entry in entries:
            graph, template, replay = entry
            if graph is None:  # no device work: outputs are views of inputs or values
                if template[0] == [(tuple(t.shape), t.stride()) for t in tensors]:
                    _count("replays")
                    return [self._output(kind, v, [], tensors) for kind, v in template[1]]
                continue
            outs = replay(tensors)  # C++: the program and the outputs' layout
            if outs is not None:
                _count("replays")
                return outs
            if self.in_background and graph.matches(tensors):
                return self._not_ready(entry, args, key, entries)
        return self._capture(args, tensors, key, entries)

    def _not_ready(self, entry, args, key, entries):
        """A call while its program compiles in the background (eager), or
        after that compile failed (eager from now on)."""
        graph = entry[0]
        if graph.status == "failed":
            _count("async_compile_failures")
            _warn_once((self.name, "async"), f"torch_tpu: graph {self.name} runs eagerly: its "
                       f"background compile failed: {graph.error}")
            entries.remove(entry)
            self.eager_keys.add(key)
        else:
            _count("async_eager_calls")
        _count("eager_calls")
        return self.gm(*args)

    @staticmethod
    def _output(kind, v, outs, inputs):
        if kind == "t":
            return outs[v]
        if kind == "a":  # a view of an input (e.g. a weight saved for backward)
            k, size, stride, offset = v
            return inputs[k].as_strided(size, stride, offset)
        return v

    def _capture(self, args, tensors, key, entries):
        _count("captures")
        self.captures += 1
        if entries:
            _count("recompiles")
        if self.bucket_of_key is not None:
            per = _bucket_compiles.setdefault(self.name, {})
            label = self.bucket_of_key()
            per[label] = per.get(label, 0) + 1
        real_args = args
        if self.in_background:  # recorded on stand-ins; the call runs eagerly
            from .async_compile import stand_ins, substitute
            tensors = stand_ins(tensors)
            args = substitute(args, tensors)
        _C._capture_begin(tensors)
        try:
            out = self.gm(*args)
        except BaseException as error:
            _C._capture_abort()
            if not self.in_background:
                raise
            _warn_once((self.name, "async-record"), f"torch_tpu: graph {self.name} runs eagerly: "
                       f"recording it for a background compile failed ({type(error).__name__}: "
                       f"{error})")
            self.eager_keys.add(key)
            _count("eager_calls")
            return self.gm(*real_args)
        flat = list(out) if isinstance(out, (list, tuple)) else [out]
        storages = {}
        for k, t in enumerate(tensors):
            storages.setdefault(t.untyped_storage().data_ptr(), k)
        out_tensors, template = [], []
        for o in flat:
            if not (isinstance(o, torch.Tensor) and o.device.type == "tpu"):
                template.append(("v", o))
            elif o.untyped_storage().data_ptr() in storages:
                k = storages[o.untyped_storage().data_ptr()]
                template.append(("a", (k, tuple(o.shape), o.stride(), o.storage_offset())))
            else:
                template.append(("t", len(out_tensors)))
                out_tensors.append(o)
        graph, why = _C._capture_end(tensors, out_tensors, self.in_background)
        if graph is None and not out_tensors:
            layout = [(tuple(t.shape), t.stride()) for t in tensors]
            entries.append((None, (layout, template), None))
        elif graph is None:
            _warn_once((self.name, why), f"torch_tpu: graph {self.name} runs eagerly: {why}")
            self.eager_keys.add(key)
        else:
            # Fused Eager records a replay into the thread's recording (one
            # program with the eager ops around it) for training graphs, and
            # for no_grad ones (the optimizer's update) only after a training
            # graph of the same recording; inference and bucketed graphs
            # launch alone: their eager surroundings change shape from call
            # to call (each generated token, each length), and each new
            # combination would compile the whole graph again. So do graphs
            # compiled in the background: the program joining them would be
            # compiled at the call, the stall async_compile is there to avoid.
            trains = self.name.startswith(("forward", "backward"))
            alone = self.bucket_of_key is not None or self.in_background
            graph.set_fusion("never" if alone else "train" if trains else "follow")
            entries.append((graph, template, _C.GraphReplay(graph, template)))
            with _lock:
                _graphs.append((self.name, graph.text))
            if self.in_background and graph.status == "pending":
                _count("async_compiles")
        if self.in_background:
            from ._internal import compile as warm_up

            if graph is not None and warm_up.submitting():  # async_compile's warm-up call
                raise warm_up.AsyncCompilationSubmitted(graph)
            if graph is not None and graph.status == "ready":  # in the memory tier already
                return self(*real_args)
            _count("async_eager_calls" if graph is not None else "eager_calls")
            return self.gm(*real_args)
        return out if isinstance(out, (list, tuple)) else [out]


def _graph_compiler(kind, buckets, in_background):
    counter = [0]

    def compile_graph(gm, example_inputs):
        from functorch.compile import make_boxed_func

        counter[0] += 1
        name = f"{kind}_{counter[0]}"
        runner = _runner(gm, name, buckets, in_background)
        return make_boxed_func(runner)

    return compile_graph


def _runner(gm, name, buckets, in_background=False):
    """A bucketed runner for a graph with symbolic sizes that can be bucketed
    exactly (dynamic_shapes.py), else the specializing one."""
    import functools

    from . import dynamic_shapes as ds

    runner = functools.partial(_GraphRunner, in_background=in_background)

    if not any(ds.symbolic(s) for n in gm.graph.nodes if n.op == "placeholder"
               for s in (n.meta["val"].shape if isinstance(n.meta.get("val"), torch.Tensor)
                         else [n.meta.get("val")])):
        return runner(gm, name)
    try:
        plan = ds.Plan(gm)
    except ds.Refused as why:
        _warn_once((name, "refused", str(why)), f"torch_tpu: graph {name} has varying sizes but compiles "
                   f"once per size: {why}")
        return runner(gm, name)
    except Exception as error:  # a graph the planner does not understand: never fatal
        _warn_once((name, "plan", str(error)), f"torch_tpu: graph {name} has varying sizes but "
                   f"compiles once per size: bucketing failed ({type(error).__name__}: {error})")
        return runner(gm, name)
    # A bucketed graph's ops (bounded dimensions over padded inputs) run only
    # as one program, never eagerly: it compiles before its first call returns.
    return ds.BucketedRunner(gm, name, plan, _GraphRunner, *buckets)


def tpu_backend(gm, example_inputs, **kwargs):
    """torch.compile(backend="tpu"). `options` may hold `num_dynamic_buckets`
    (1-8) and `bucket_size` (dynamic_shapes.py) and `async_compile`
    (async_compile.py); Inductor's other settings are accepted and ignored."""
    from . import async_compile
    from . import dynamic_shapes as ds

    options = dict(kwargs.pop("options", None) or {})
    buckets = ds.check_options({k: options.pop(k) for k in ds._OPTIONS if k in options})
    in_background = async_compile.check_option(options.pop(async_compile.OPTION, None))
    ignored = sorted(set(kwargs) | {f"options[{k!r}]" for k in options})
    if ignored:
        _warn_once("kwargs", f"torch_tpu: the tpu backend ignores Inductor settings {ignored}")
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(
        fw_compiler=_graph_compiler("forward", buckets, in_background),
        bw_compiler=_graph_compiler("backward", buckets, in_background),
        inference_compiler=_graph_compiler("inference", buckets, in_background),
        keep_inference_input_mutations=True,
    )(gm, example_inputs)


def _has_tpu_input(example_inputs):
    return any(isinstance(t, torch.Tensor) and t.device.type == "tpu" for t in example_inputs)


def default_backend(gm, example_inputs, **kwargs):
    """The process default for torch.compile: graphs whose inputs are tpu
    tensors use the tpu backend; everything else goes to Inductor as usual."""
    if _has_tpu_input(example_inputs):
        return tpu_backend(gm, example_inputs, **kwargs)
    mode = kwargs.get("mode")
    options = kwargs.get("options")
    return torch._TorchCompileInductorWrapper(mode, options, None)(gm, example_inputs)


def _set_default(registry):
    if registry.get_default_backend() == "inductor":
        registry.set_default_backend(default_backend)


def install_default_backend():
    """Sets the default backend when Dynamo's registry is first imported, so
    importing torch_tpu does not import Dynamo (seconds of start-up)."""
    after_import("torch._dynamo.backends.registry", _set_default)


def export_stablehlo(exported, path=None) -> str:
    """Lowers a `torch.export` ExportedProgram to a StableHLO module (text).

    The module's arguments are the flat device storages of the program's
    parameters, buffers and inputs in order of first use; it returns the
    flat storages of the outputs. Written to `path` when given."""
    module = exported.module().to("tpu")
    args, kwargs = exported.example_inputs

    def to_tpu(x):
        return x.to("tpu") if isinstance(x, torch.Tensor) else x

    args = tuple(to_tpu(a) for a in args)
    kwargs = {k: to_tpu(v) for k, v in (kwargs or {}).items()}
    inputs = [t for t in list(module.parameters()) + list(module.buffers())
              + list(args) + list(kwargs.values()) if isinstance(t, torch.Tensor)]
    with torch.no_grad():
        _C._capture_begin(inputs)
        try:
            out = module(*args, **kwargs)
        except BaseException:
            _C._capture_abort()
            raise
    flat = list(out) if isinstance(out, (list, tuple)) else [out]
    graph, why = _C._capture_end(inputs, [o for o in flat if isinstance(o, torch.Tensor)])
    if graph is None:
        raise RuntimeError(f"torch_tpu: cannot export this program as one StableHLO module: {why}")
    if path is not None:
        with open(path, "w") as f:
            f.write(graph.text)
    return graph.text
