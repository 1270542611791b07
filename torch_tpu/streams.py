"""`torch.tpu.Stream`, `Event`, the current and default streams.

PJRT runs a device's programs in one order (ordered by the buffers they
share), so every stream of a device is a label on that order: waiting for an
event or another stream is satisfied by ordering, and an event is complete
when everything launched before its record has finished. The streams and
events themselves are C++ (csrc/aten/stream.h, behind the DeviceGuardImpl),
so `torch.Stream("tpu")`, `torch.Event("tpu")` and `torch.accelerator` reach
the same ones.
"""
import torch

from . import _C

_PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, as torch.Stream.device_type reads it


def _index(device) -> int:
    from .device import _check, _index as index
    return _check(index(device))


class Stream(torch.Stream):
    """A tpu stream (`torch.Stream` on device `tpu`)."""

    def __new__(cls, device=None, priority=0, **kwargs):
        if kwargs:  # stream_id, device_index, device_type: an existing stream
            return super().__new__(cls, priority=priority, **kwargs)
        return super().__new__(cls, device=torch.device("tpu", _index(device)), priority=priority)

    def __repr__(self):
        return f"torch.tpu.Stream(device=tpu:{self.device_index} stream_id={self.stream_id})"


class _TpuEvent(type(torch.Event)):
    def __instancecheck__(cls, obj):
        return isinstance(obj, torch.Event) and obj.device.type == "tpu"


class Event(torch.Event, metaclass=_TpuEvent):
    """A tpu event: makes a `torch.Event` on device `tpu` (a plain one, since
    `torch.Event.elapsed_time` takes no subclass); every tpu event is an
    instance."""

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        return torch.Event("tpu", enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


def _wrap(index: int, stream_id: int) -> Stream:
    return Stream(stream_id=stream_id, device_index=index, device_type=_PRIVATEUSE1)


def current_stream(device=None) -> Stream:
    index = _index(device)
    return _wrap(index, _C._current_stream(index))


def default_stream(device=None) -> Stream:
    return _wrap(_index(device), 0)


def set_stream(stream) -> None:
    if stream is None:
        return
    if not isinstance(stream, torch.Stream) or stream.device_type != _PRIVATEUSE1:
        raise ValueError(f"expected a tpu stream, got {stream!r}")
    _C._set_stream(stream.device_index, stream.stream_id)


class StreamContext:
    """Makes `stream` the current stream of its device (and its device the
    current device) inside the block; `None` does nothing."""

    def __init__(self, stream):
        if stream is not None and (not isinstance(stream, torch.Stream)
                                   or stream.device_type != _PRIVATEUSE1):
            raise ValueError(f"expected a tpu stream or None, got {stream!r}")
        self.stream = stream
        self._saved = None

    def __enter__(self):
        if self.stream is None:
            return self.stream
        index = self.stream.device_index
        self._saved = (_C._current_device(), index, _C._current_stream(index))
        _C._set_device(index)
        _C._set_stream(index, self.stream.stream_id)
        return self.stream

    def __exit__(self, *exc):
        if self._saved is not None:
            device, index, stream_id = self._saved
            _C._set_stream(index, stream_id)
            _C._set_device(device)
            self._saved = None
        return False


def stream(stream) -> StreamContext:
    return StreamContext(stream)
