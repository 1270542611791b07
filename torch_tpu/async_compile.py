"""Asynchronous compilation: torch.compile(backend="tpu") graphs and Fused
Eager recordings whose program is not compiled yet run eagerly while it
compiles in the background.

Graphs: with `options={"async_compile": True}` (or the process-wide switch
below), a graph whose program is not compiled yet does not wait for
it: the graph is recorded as one program on stand-in tensors (fresh tpu
tensors with the inputs' layouts, so recording computes nothing and touches
no user tensor), its compile is queued on the compile cache's background
worker (csrc/engine/background.h, the worker of tiered compilation), and the
call runs the graph's ops eagerly in the current eager mode. Later calls run
eagerly while the compile is pending and replay the one program once it is
ready; a failed compile leaves the graph eager, with one warning naming it.

Fused Eager (csrc/engine/async_eager.cc): a recording whose program neither
cache tier holds runs op by op, each op a Strict program, while the program
compiles on the same worker; the same recording launches the program once it
is compiled.

The switch: `torch_tpu.set_async_compile(True)`, or
TORCH_TPU_ASYNC_COMPILE=1 in the environment; off by default.
"""
import os

import torch

from . import _C

ENV = "TORCH_TPU_ASYNC_COMPILE"
OPTION = "async_compile"
_switch = None  # set_async_compile's value; None: the environment decides


def set_async_compile(enabled) -> None:
    """Turns asynchronous compiles on or off for the process: graphs of
    torch.compile(backend="tpu") without an `async_compile` option, and Fused
    Eager recordings. True or False override TORCH_TPU_ASYNC_COMPILE; None
    hands the choice back to it."""
    global _switch
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"torch_tpu.set_async_compile takes True, False or None, got {enabled!r}")
    _switch = enabled
    _C._set_async_compile(check_option(None))


def async_compile_enabled() -> bool:
    """Whether Fused Eager recordings compile in the background now."""
    return _C._async_compile()


def check_option(value):
    """Whether graphs compile in the background: the option's value (a bool),
    else set_async_compile's, else the environment's ("0" or "1"), else off.
    ValueError for bad values."""
    if value is None and _switch is not None:
        return _switch
    if value is None:
        env = os.environ.get(ENV, "0")
        if env not in ("0", "1"):
            raise ValueError(f"torch_tpu: {ENV} must be 0 or 1, got {env!r}")
        return env == "1"
    if not isinstance(value, bool):
        raise ValueError(f"torch_tpu: the torch.compile option `{OPTION}` must be True or False, "
                         f"got {value!r}")
    return value


def stand_ins(tensors):
    """Fresh tpu tensors with the layouts of `tensors` (sizes, strides, offsets,
    storage sizes; tensors sharing a storage get stand-ins sharing one)."""
    storages = {}
    out = []
    for t in tensors:
        s = t.untyped_storage()
        key = s.data_ptr(), s.nbytes()
        if key not in storages:
            storages[key] = torch.UntypedStorage(s.nbytes(), device=t.device)
        d = torch.empty(0, dtype=t.dtype, device=t.device)
        d.set_(storages[key], t.storage_offset(), t.shape, t.stride())
        out.append(d)
    return out


def substitute(args, replacements):
    """`args` with its tpu tensors replaced, in order, by `replacements`."""
    it = iter(replacements)
    return [next(it) if isinstance(a, torch.Tensor) and a.device.type == "tpu" else a
            for a in args]
