"""`torch.tpu.sync` (the reference's names): materializing pending work on
request, and the pending program as StableHLO text.

In Fused Eager ops are recorded into one pending program until a flush
point; these run it now. In Strict Eager every op already ran as it was
called, so nothing is pending and the text is empty.
"""
import os

import torch
from torch.utils import _pytree

from . import _C


def _tpu_tensors(tensors) -> list:
    flat, _ = _pytree.tree_flatten(list(tensors))
    for t in flat:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"torch.tpu.sync takes tpu tensors (or lists of them), got "
                            f"{type(t).__name__}")
        if t.device.type != "tpu":
            raise ValueError(f"torch.tpu.sync takes tpu tensors, got a tensor on {t.device}; "
                             "move it with .to('tpu') or leave it out")
    return flat


def synchronize(*tensors) -> None:
    """Runs the pending program that computes `tensors` (tpu tensors, or lists
    of them) and waits until they are computed. With no tensors: all pending
    work, as torch.tpu.synchronize()."""
    _tpu_tensors(tensors)
    _C._synchronize()


def computation_mlir(*tensors) -> str:
    """The pending program that computes `tensors`, as StableHLO text, after
    running it (every live pending value of this thread is an output of it,
    `tensors` among them). Empty when nothing is pending (Strict Eager, or
    values already computed)."""
    _tpu_tensors(tensors)
    return _C._flush_text()


def dump_computation_mlir(tensors, file_name: str) -> None:
    """Writes computation_mlir(tensors) to `file_name` (its folder is made)."""
    text = computation_mlir(tensors)
    directory = os.path.dirname(file_name)
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(file_name, "w") as f:
        f.write(text)


__all__ = ["synchronize", "computation_mlir", "dump_computation_mlir"]
