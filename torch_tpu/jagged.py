"""`torch.tpu.ops.align_jagged_to_multiple` / `strip_jagged_padding` (the
reference's names): a `torch.jagged` nested tensor's flat values buffer
padded with trailing rows to a multiple of a tile size, and those rows cut
off again. The offsets are shared, so every sequence keeps its tokens; a
padded buffer gives a stable set of shapes (fewer programs to compile) and
lets a stack of layers run on the values without a pad/slice between them.

Both are compositions of ATen ops on the values (pad, narrow), so they work
on any device, record in Fused Eager and trace under torch.compile.
"""
import torch
import torch.nn.functional as F
from torch.nested._internal.nested_tensor import nested_view_from_values_offsets

__all__ = ["align_jagged_to_multiple", "strip_jagged_padding"]


def _check_jagged(fn: str, nt) -> None:
    if not isinstance(nt, torch.Tensor) or not nt.is_nested or nt.layout != torch.jagged:
        raise TypeError(f"{fn}: expected a torch.jagged nested tensor (torch.nested.nested_tensor("
                        f"..., layout=torch.jagged)), got {type(nt).__name__}"
                        + (f" with layout {nt.layout}" if isinstance(nt, torch.Tensor) else ""))


def align_jagged_to_multiple(nt, multiple: int = 128, padding_value=0.0):
    """`nt` with its values buffer padded by `padding_value` rows up to a
    multiple of `multiple` rows (unchanged when it is one already)."""
    _check_jagged("align_jagged_to_multiple", nt)
    if not isinstance(multiple, int) or isinstance(multiple, bool) or multiple < 1:
        raise ValueError(f"align_jagged_to_multiple: multiple must be a positive int, got {multiple!r}")
    values = nt.values()
    extra = -values.size(0) % multiple
    if extra == 0:
        return nt
    # F.pad's pairs run from the last dimension to the first.
    padded = F.pad(values, (0, 0) * (values.dim() - 1) + (0, extra), value=padding_value)
    return nested_view_from_values_offsets(padded, nt.offsets())


def strip_jagged_padding(nt, valid_tokens=None):
    """`nt` with the values rows past the last offset cut off (a view).
    `valid_tokens`, when the caller knows it, saves reading the last offset
    from the device."""
    _check_jagged("strip_jagged_padding", nt)
    offsets = nt.offsets()
    if valid_tokens is None:
        valid_tokens = int(offsets[-1].item()) if offsets.numel() else 0
    rows = nt.values().size(0)
    if not 0 <= valid_tokens <= rows:
        raise ValueError(f"strip_jagged_padding: valid_tokens is {valid_tokens}, but the values "
                         f"buffer has {rows} rows")
    if valid_tokens == rows:
        return nt
    return nested_view_from_values_offsets(nt.values().narrow(0, 0, valid_tokens), offsets)
