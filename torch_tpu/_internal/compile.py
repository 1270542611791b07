"""Ahead-of-time warm-up of a list of shapes, under the reference's names:
`async_compile(fn, warmup_inputs)`, `AsyncCompilationSubmitted` and
`resolve_compilations`.

`async_compile` compiles `fn` with `torch.compile(backend="tpu",
fullgraph=True, dynamic=False, options={"async_compile": True})` and calls it
once per warm-up input. Each such call traces its graph (Dynamo and
AOTAutograd, on this thread), records it as one program on stand-in tensors
and queues the program's compile on the compile cache's background worker
(torch_tpu/async_compile.py), then stops without running anything: the graph
runner raises `AsyncCompilationSubmitted`, which `async_compile` catches. So
the next shape is traced while the previous one compiles. At the end it waits
for every queued compile and returns the compiled callable, whose calls on
those shapes replay their programs at once.

A warm-up input is a tuple of positional arguments, a dict of keyword
arguments, a `(args_tuple, kwargs_dict)` pair, or a single argument (a list
is one positional argument). Each distinct shape is one Dynamo graph; Dynamo
keeps `torch._dynamo.config.recompile_limit` of them per function (8 by
default), and later shapes run eagerly, so warm up at most that many.
"""
import threading

import torch

_submit_only = threading.local()


class AsyncCompilationSubmitted(Exception):
    """Raised out of a warm-up call once its graph's compile was queued, so
    the call runs nothing. `artifact` is the graph whose program compiles
    (its `status`: "pending", "ready" or "failed"); `resolve()` waits for it."""

    def __init__(self, artifact=None):
        super().__init__("torch_tpu: the graph's compile was submitted; nothing was run")
        self.artifact = artifact

    def resolve(self):
        if self.artifact is not None:
            resolve_compilations([self])


def submitting() -> bool:
    """Whether this thread is inside async_compile's warm-up calls (read by
    the graph runner, torch_tpu/compiler.py)."""
    return getattr(_submit_only, "on", False)


def resolve_compilations(artifacts) -> int:
    """Waits until the compiles of `artifacts` (graphs or
    AsyncCompilationSubmitted exceptions) are done; returns how many were
    waited for. A failed compile is not an error here: that graph runs
    eagerly when called, with one warning naming it."""
    from .. import _C

    resolved = 0
    for item in artifacts:
        graph = item.artifact if isinstance(item, AsyncCompilationSubmitted) else item
        if graph is None or not hasattr(graph, "status"):
            raise TypeError(f"torch_tpu: resolve_compilations takes the graphs async_compile "
                            f"submitted (or AsyncCompilationSubmitted), got {type(item).__name__}")
        resolved += 1
    if resolved:
        _C._drain_background_compiles()
    return resolved


def _unpack(item):
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], tuple) \
            and isinstance(item[1], dict):
        return item[0], item[1]
    if isinstance(item, tuple):
        return item, {}
    if isinstance(item, dict):
        return (), item
    return (item,), {}


def async_compile(fn, warmup_inputs, *, no_grad=True, **backend_kwargs):
    """Compiles `fn` for each input of `warmup_inputs` (its shapes), tracing
    one while the previous ones compile in the background, and returns the
    compiled callable once every compile is done. `no_grad` (default True,
    for inference) runs the compiled callable under torch.no_grad(); the
    other keyword arguments are torch.compile options for the tpu backend
    (e.g. `num_dynamic_buckets`)."""
    if not callable(fn):
        raise TypeError(f"torch_tpu: async_compile takes a callable or nn.Module, got "
                        f"{type(fn).__name__}")
    if isinstance(warmup_inputs, (torch.Tensor, dict)) or not hasattr(warmup_inputs, "__iter__"):
        raise TypeError("torch_tpu: warmup_inputs must be a sequence of warm-up inputs (argument "
                        "tuples or keyword dicts), one per shape to compile")
    options = dict(backend_kwargs)
    options["async_compile"] = True
    compiled = torch.compile(fn, backend="tpu", fullgraph=True, dynamic=False, options=options)
    if no_grad:
        compiled = torch.no_grad()(compiled)
    artifacts = []
    _submit_only.on = True
    try:
        for item in warmup_inputs:
            args, kwargs = _unpack(item)
            try:
                compiled(*args, **kwargs)
            except AsyncCompilationSubmitted as submitted:
                artifacts.append(submitted)
    finally:
        _submit_only.on = False
    resolve_compilations(artifacts)
    return compiled


__all__ = ["AsyncCompilationSubmitted", "async_compile", "resolve_compilations"]
