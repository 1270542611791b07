"""`torch.tpu.profiler`: the tpu in `torch.profiler`.

`torch.profiler.profile(activities=[ProfilerActivity.CPU,
ProfilerActivity.PrivateUse1])` shows the tpu's side next to the host ops:
each launched program (`tpu::launch` on the host thread, and the program's
span on the `tpu` device lane, named for its mode and ops), each compile or
disk load of a cache miss (`tpu::compile`), each copy (`tpu::copy_to_device`,
`tpu::copy_to_host`, with bytes) and each `tpu::synchronize`. The C++
adapter (csrc/profiler) registers with PyTorch's PrivateUse1 profiler
registry; nothing here has to be called.

`TpuProfilerConfig` is the reference's `experimental_config`: its
`host_tracer_level` and `device_tracer_level` select those events (0: off).
"""
import os
import warnings
from typing import Mapping, Optional, Union

import torch

from . import _C

_Value = Union[int, bool, str]

# The reference's option keys (stable, never experimental).
_STABLE_KEYS = frozenset({
    "check_experimental_options", "device_tracer_level", "host_tracer_level",
    "python_tracer_level", "run_dir", "worker_rank",
})


def available() -> bool:
    """Whether `torch.profiler` sees the tpu in this build: False where the
    torch wheel has no Kineto or no PrivateUse1 profiler registry (then it
    shows host ops only)."""
    return bool(_C._profiler_registered())


def _format(value: _Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"TpuProfilerConfig: option values are int, bool or str, got "
                    f"{type(value).__name__} ({value!r})")


def _level(name: str, value, top: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise ValueError(f"TpuProfilerConfig: {name} must be an int from 0 to {top}, "
                         f"got {value!r}")
    return value


class TpuProfilerConfig(torch.profiler._ExperimentalConfig):
    """The tpu's profiler options, passed as `torch.profiler.profile(...,
    experimental_config=TpuProfilerConfig(...))`.

    host_tracer_level: 0 leaves out the host events (launches, compiles,
        copies, synchronizes); 1 or more keeps them (one level of detail).
    device_tracer_level: 0 leaves out the programs' device spans; 1 keeps
        them.
    python_tracer_level: 0; Python frames come from torch.profiler's own
        `with_stack=True`, so 1 warns that it adds nothing here.
    run_dir, worker_rank: where the reference writes XPlane files (and the
        rank in their names). This backend writes none: the tpu's events are
        in the profiler's own trace (`prof.export_chrome_trace(...)`,
        `torch.profiler.tensorboard_trace_handler`), so setting either warns.
    experimental_options: the reference's backend options; this backend has
        none, so any raises `ValueError` unless `check_experimental_options`
        is False (then they are ignored).
    """

    def __init__(self, *, host_tracer_level: int = 2, device_tracer_level: int = 1,
                 python_tracer_level: int = 0,
                 run_dir: Optional[Union[str, os.PathLike]] = None,
                 worker_rank: Optional[str] = None,
                 experimental_options: Optional[Mapping[str, _Value]] = None,
                 check_experimental_options: bool = True):
        parts = [
            f"host_tracer_level:{_level('host_tracer_level', host_tracer_level, 3)}",
            f"device_tracer_level:{_level('device_tracer_level', device_tracer_level, 1)}",
            f"python_tracer_level:{_level('python_tracer_level', python_tracer_level, 1)}",
        ]
        if python_tracer_level:
            warnings.warn("TpuProfilerConfig(python_tracer_level=1) adds nothing on this "
                          "backend: pass with_stack=True to torch.profiler.profile for "
                          "Python frames.", stacklevel=2)
        if worker_rank is not None:
            if not isinstance(worker_rank, str):
                raise TypeError(f"TpuProfilerConfig: worker_rank must be a str, got "
                                f"{type(worker_rank).__name__}")
            if ":" in worker_rank or "," in worker_rank:
                raise ValueError(f"TpuProfilerConfig: worker_rank cannot contain ':' or ',': "
                                 f"{worker_rank!r}")
            parts.append(f"worker_rank:{_format(worker_rank)}")
        if run_dir is not None:
            parts.append(f"run_dir:{_format(os.fspath(run_dir))}")
        if run_dir is not None or worker_rank is not None:
            warnings.warn("TpuProfilerConfig: run_dir and worker_rank name the reference's "
                          "XPlane files; this backend writes none. The tpu's events are in "
                          "the profiler's trace: prof.export_chrome_trace(path) or "
                          "on_trace_ready=torch.profiler.tensorboard_trace_handler(dir).",
                          stacklevel=2)
        for key, value in (experimental_options or {}).items():
            if key in _STABLE_KEYS:
                raise ValueError(f"TpuProfilerConfig: experimental option {key!r} clashes "
                                 f"with the stable option of that name; pass it as {key}=")
            if ":" in key or "," in key:
                raise ValueError(f"TpuProfilerConfig: experimental option keys cannot "
                                 f"contain ':' or ',': {key!r}")
            if check_experimental_options:
                raise ValueError(f"TpuProfilerConfig: unknown experimental option {key!r}: "
                                 f"this backend has none (pass "
                                 f"check_experimental_options=False to ignore them)")
            parts.append(f"{key}:{_format(value)}")
        super().__init__(custom_profiler_config=",".join(parts))
        self.host_tracer_level = host_tracer_level
        self.device_tracer_level = device_tracer_level
