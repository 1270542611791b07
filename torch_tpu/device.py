"""The `torch.tpu` device module.

Its names follow torch.cuda and the reference TorchTPU's `torch.tpu`:
`EagerMode`, `set_eager_mode` (a setter that is also a context manager), the
`eager_mode` property (get and set), `Precision` and `precision`.
"""
import os
import sys
import types

import torch

from . import _C
from .modes import EagerMode, get_eager_mode, set_eager_mode


def _index(device=None) -> int:
    if device is None:
        return _C._current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "tpu":
        raise ValueError(f"expected a tpu device, got {device}")
    return _C._current_device() if device.index is None else device.index


def _check(index: int) -> int:
    n = device_count()
    if not 0 <= index < n:
        raise RuntimeError(f"tpu:{index} is not a valid device: {n} tpu device(s) are available "
                           "(TORCH_TPU_NUM_DEVICES sets how many the CPU plugin exposes)")
    return index


def _is_in_bad_fork() -> bool:
    """The PJRT client is created lazily per process; a fork before first use
    is safe, and one after it is not supported by the plugins either way."""
    return False


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return _C._device_count()


def is_initialized() -> bool:
    return _C._is_initialized()


def init() -> None:
    _C._init()


def _lazy_init() -> None:
    _C._init()


def current_device() -> int:
    return _C._current_device()


def set_device(device) -> None:
    _C._set_device(_check(_index(device)))


class device:
    """Context manager that makes `device` the current tpu device."""

    def __init__(self, device):
        self.index = _index(device)
        self.previous = None

    def __enter__(self):
        self.previous = current_device()
        set_device(self.index)
        return self

    def __exit__(self, *exc):
        set_device(self.previous)
        return False


class device_of(device):
    """Makes the device of tensor `obj` current inside the block; for a tensor
    on another device the current device stays (torch.cuda.device_of)."""

    def __init__(self, obj):
        super().__init__(obj.device if obj.device.type == "tpu" else current_device())


def synchronize(device=None) -> None:
    _C._synchronize()


def get_device_name(device=None) -> str:
    _check(_index(device))
    platform, _, kind, _ = _C._platform()
    return f"{kind} ({platform})"


class _DeviceProperties:
    """torch.cuda.get_device_properties' shape: `name`, `total_memory` (bytes),
    `multi_processor_count` / `core_count`, and which plugin serves it."""

    def __init__(self, name, total_memory, core_count, platform, version, plugin):
        self.name = name
        self.total_memory = total_memory
        self.core_count = self.multi_processor_count = core_count
        self.platform = platform
        self.platform_version = version
        self.plugin = plugin

    def __repr__(self):
        return (f"_TpuDeviceProperties(name={self.name!r}, "
                f"total_memory={self.total_memory // (1 << 20)}MB, "
                f"core_count={self.core_count}, platform={self.platform!r})")


def _core_count(platform: str) -> int:
    # XLA:CPU runs a device's programs on the host cores this process may
    # use; a TPU or GPU PJRT device is one core (a TensorCore, an SM array).
    if platform == "cpu":
        try:
            return len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return os.cpu_count() or 1
    return 1


def get_device_properties(device=None):
    index = _check(_index(device))
    platform, version, kind, plugin = _C._platform()
    total = torch.accelerator.get_memory_info(index)[1]
    return _DeviceProperties(kind, total, _core_count(platform), platform, version, plugin)


# ---- random number generation -------------------------------------------------


def manual_seed(seed: int) -> None:
    _C._manual_seed(current_device(), int(seed) & 0xFFFFFFFFFFFFFFFF)


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _C._manual_seed(i, int(seed) & 0xFFFFFFFFFFFFFFFF)


def seed() -> None:
    _C._seed(current_device())


def seed_all() -> None:
    for i in range(device_count()):
        _C._seed(i)


def initial_seed() -> int:
    return _C._initial_seed(current_device())


def default_generators() -> tuple:
    """Each device's default torch.Generator (torch.cuda.default_generators)."""
    return tuple(_C._default_generator(i) for i in range(device_count()))


def get_rng_state(device="tpu") -> torch.Tensor:
    seed_value, offset = _C._get_rng_state(_check(_index(device)))
    return torch.tensor([seed_value, offset], dtype=torch.uint64).view(torch.uint8)


def set_rng_state(new_state: torch.Tensor, device="tpu") -> None:
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8 \
            or new_state.numel() != 16:
        raise ValueError("tpu RNG state must be a uint8 tensor of 16 bytes, as returned by "
                         "torch.tpu.get_rng_state()")
    seed_value, offset = new_state.clone().view(torch.uint64).tolist()
    _C._set_rng_state(_check(_index(device)), seed_value, offset)


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(states) -> None:
    for i, s in enumerate(states):
        set_rng_state(s, i)


# ---- memory --------------------------------------------------------------------
# One source: the C++ allocator (a c10::DeviceAllocator) that torch.accelerator
# reads too. Nothing is cached, so reserved equals allocated.

def memory_stats(device=None) -> dict:
    return dict(torch.accelerator.memory_stats(_check(_index(device))))


def memory_allocated(device=None) -> int:
    return torch.accelerator.memory_allocated(_check(_index(device)))


def max_memory_allocated(device=None) -> int:
    return torch.accelerator.max_memory_allocated(_check(_index(device)))


def memory_reserved(device=None) -> int:
    return torch.accelerator.memory_reserved(_check(_index(device)))


def max_memory_reserved(device=None) -> int:
    return torch.accelerator.max_memory_reserved(_check(_index(device)))


def reset_peak_memory_stats(device=None) -> None:
    torch.accelerator.reset_peak_memory_stats(_check(_index(device)))


def reset_accumulated_memory_stats(device=None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_check(_index(device)))


def mem_get_info(device=None) -> tuple:
    """(free, total) bytes: the plugin's device limit, else the host's memory."""
    return torch.accelerator.get_memory_info(_check(_index(device)))


def empty_cache() -> None:
    """Device arrays are freed as soon as their tensors die; nothing is cached.
    Finishes queued work so that arrays only it still held are freed too."""
    torch.accelerator.empty_cache()


def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True
from .precision import Precision, precision, get_precision, set_precision  # noqa: E402,F401
# The reference's submodules: torch.tpu.compiler, .ops, .optimizers,
# .pallas, .profiler, .sync (torch_tpu.sync is a function, so its module is tpu_sync).
from . import compiler, ops, optimizers, profiler  # noqa: E402,F401
from . import tpu_sync as sync  # noqa: E402,F401
from ._internal import pallas  # noqa: E402,F401  (no JAX until jax_op is called)
from .compiler_options import get_allow_excess_precision, set_allow_excess_precision  # noqa: E402
from .dynamic_shapes import mark_dynamic  # noqa: E402,F401  (torch.tpu.mark_dynamic)
from .streams import (  # noqa: E402,F401
    Event, Stream, StreamContext, current_stream, default_stream, set_stream, stream,
)
from .transfers import TransferFuture, batch_to_device, batch_to_host  # noqa: E402,F401
from .graphs import (  # noqa: E402,F401
    TPUGraph, graph, graph_pool_handle, is_current_stream_capturing, make_graphed_callables,
)


class _DeviceModule(types.ModuleType):
    """`torch.tpu`'s properties: `eager_mode` and `allow_excess_precision`
    (the reference's: read them, or assign) and `default_generators` (a
    tuple, as torch.cuda's)."""

    @property
    def eager_mode(self) -> EagerMode:
        return get_eager_mode()

    @eager_mode.setter
    def eager_mode(self, mode) -> None:
        set_eager_mode(mode)

    @property
    def allow_excess_precision(self) -> bool:
        return get_allow_excess_precision()

    @allow_excess_precision.setter
    def allow_excess_precision(self, value: bool) -> None:
        set_allow_excess_precision(value)

    @property
    def default_generators(self) -> tuple:
        return _default_generators()


_default_generators = default_generators
del default_generators
sys.modules[__name__].__class__ = _DeviceModule
for _name in ("compiler", "ops", "optimizers", "pallas", "profiler", "sync"):  # `import torch.tpu.ops` works too
    sys.modules[f"torch.tpu.{_name}"] = globals()[_name]
