"""XLA compile options: `torch.tpu.compiler.custom_compiler_options` (the
reference's name) and the process-wide `allow_excess_precision`.

Options are XLA's (https://openxla.org/xla/flags_guidance) by name, plus
`xla_optimization_level` / `xla_memory_fitting_level` ("O0".."O3"). They
apply to every program compiled on this thread inside the block and are part
of the compile-cache keys (memory and disk): the same program under other
options is another executable. A set of options is checked by the plugin
when the block is entered, so a wrong name or value raises there.
"""
import contextlib
import os
import threading

import torch

from . import _C

_local = threading.local()   # .stack: this thread's merged option dicts
_defaults = {}               # process-wide options (allow_excess_precision)
_defaults_lock = threading.Lock()


def _stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def _validated(options) -> dict:
    if not isinstance(options, dict):
        raise TypeError("custom_compiler_options takes a dict of XLA option names to values, "
                        f"got {type(options).__name__}")
    for name, value in options.items():
        if not isinstance(name, str):
            raise TypeError(f"compiler option names are str, got {name!r}")
        if not isinstance(value, (str, bool, int, float)):
            raise TypeError(f"compiler option {name!r} must be a str, bool, int or float, "
                            f"got {type(value).__name__}")
    return dict(options)


def _apply() -> None:
    stack = _stack()
    if stack:
        _C._set_compile_options({**_defaults, **stack[-1]})
    else:
        _C._set_compile_options(None)


@contextlib.contextmanager
def custom_compiler_options(options: dict):
    """Compiles every program materialized on this thread inside the block with
    the XLA `options`; nested blocks merge, the inner one's values winning:

        with torch.tpu.compiler.custom_compiler_options({"xla_optimization_level": "O1"}):
            y = (x @ w).relu().cpu()
    """
    if torch.compiler.is_compiling():
        raise RuntimeError("custom_compiler_options cannot be used inside a torch.compile'd "
                           "function: a compiled graph is one program with one set of options; "
                           "enter the block around the compiled call instead")
    stack = _stack()
    merged = {**(stack[-1] if stack else {}), **_validated(options)}
    _C._set_compile_options({**_defaults, **merged})  # checked by the plugin here
    stack.append(merged)
    try:
        yield
    finally:
        stack.pop()
        _apply()


def current_compiler_options() -> dict:
    """The options this thread's compiles use now (process defaults included)."""
    stack = _stack()
    return {**_defaults, **(stack[-1] if stack else {})}


_EXCESS = "xla_allow_excess_precision"


def _excess_from_xla_flags():
    for flag in os.environ.get("XLA_FLAGS", "").split():
        name, _, value = flag.lstrip("-").partition("=")
        if name == _EXCESS:
            return value.lower() not in ("0", "false")
    return None


def get_allow_excess_precision() -> bool:
    """Whether XLA may keep intermediate values in more precision than their
    type (e.g. bf16 math in f32 between ops). Unless set here, XLA_FLAGS'
    --xla_allow_excess_precision, else XLA's default (True)."""
    if _EXCESS in _defaults:
        return _defaults[_EXCESS]
    from_env = _excess_from_xla_flags()
    return True if from_env is None else from_env


def set_allow_excess_precision(value: bool) -> None:
    """Sets it for every later compile of every thread (a changed value
    compiles programs again: it is part of the cache key)."""
    if not isinstance(value, bool):
        raise TypeError(f"allow_excess_precision must be True or False, got {value!r}")
    with _defaults_lock:
        _defaults[_EXCESS] = value
        _C._set_default_compile_options(dict(_defaults))
    _apply()
