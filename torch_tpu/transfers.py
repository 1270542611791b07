"""Batched host<->device copies: `torch.tpu.batch_to_device(tensors)` and
`torch.tpu.batch_to_host(tensors)`.

Each is `[t.to(device) for t in tensors]` / `[t.cpu() for t in tensors]` in
one call, with the same results (dtypes, sizes, a dense source's strides;
views, non-contiguous and zero-size tensors), but every copy is issued
before any is waited for, and a device-to-host batch runs the pending
program once. The copies are not recorded by autograd (as
`t.detach().to(device)`).

`async_op=True` (torch.distributed's name for the same choice) returns a
`TransferFuture` instead of the list: `wait()` returns the list, `done()`
asks without blocking. Until `wait()`, a host-to-device batch's sources must
stay unchanged (its results can be used at once), and a device-to-host
batch's results are not yet filled. `pin_memory=True` gives pinned host
tensors, as `Tensor.pin_memory()`. The C++ side is
csrc/aten/batch_transfer.h.
"""
import torch

from . import _C

__all__ = ["TransferFuture", "batch_to_device", "batch_to_host"]

TransferFuture = _C.TransferFuture


def _tensor_list(fn: str, tensors) -> list:
    if isinstance(tensors, torch.Tensor) or not hasattr(tensors, "__iter__"):
        raise TypeError(f"{fn}: expected a list or tuple of tensors, got {type(tensors).__name__}")
    tensors = list(tensors)
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: tensors[{i}] is a {type(t).__name__}, not a torch.Tensor")
    return tensors


def batch_to_device(tensors, device=None, *, async_op: bool = False):
    """Copies CPU tensors to `device` (a tpu device; default the current one)."""
    tensors = _tensor_list("batch_to_device", tensors)
    from .device import _index  # device.py imports this module
    future = _C._batch_to_device(tensors, _index(device))
    return future if async_op else future.wait()


def batch_to_host(tensors, *, pin_memory: bool = False, async_op: bool = False):
    """Copies tpu tensors to the CPU (pinned host memory when `pin_memory`)."""
    tensors = _tensor_list("batch_to_host", tensors)
    future = _C._batch_to_host(tensors, bool(pin_memory))
    return future if async_op else future.wait()
