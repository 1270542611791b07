"""`torch.tpu.ops` (the reference's names): TPU-minded operators, each a
`torch.ops.tpu.*` operator implemented in C++ (csrc/aten/tpu_ops.cc).

- `optimization_barrier(tensors)`: the same values as new tensors, through
  `stablehlo.optimization_barrier`: XLA moves no computation across it and
  neither fuses nor deduplicates through it (use the returned tensors).
- `max_pool{1,2,3}d(input, kernel_size, stride, padding, dilation,
  ceil_mode)`: max pooling without indices; every list has one value per
  spatial dim and nothing has a default. `max_pool{1,2,3}d_backward(
  grad_output, input, ...)` finds the maxima again from `input`.
- `ragged_dot(lhs (m, k), rhs (g, k, n), group_sizes (g,))`: consecutive row
  groups of `lhs`, group i times `rhs[i]` (mixture of experts); autograd
  works for lhs and rhs. `ragged_dot_weight_grad(lhs, grad_output,
  group_sizes)` is its gradient for rhs. `torch._grouped_mm` runs on tpu
  the same way.
- `align_jagged_to_multiple(nt, multiple=128, padding_value=0.0)`,
  `strip_jagged_padding(nt, valid_tokens=None)`: a `torch.jagged` nested
  tensor's values buffer padded to a multiple of rows, and cut back
  (`jagged.py`).
"""
import torch

from . import _C  # noqa: F401  (registers the torch.ops.tpu operators)
from .jagged import align_jagged_to_multiple, strip_jagged_padding

__all__ = [
    "optimization_barrier", "max_pool1d", "max_pool1d_backward", "max_pool2d", "max_pool2d_backward", "max_pool3d",
    "max_pool3d_backward", "ragged_dot", "ragged_dot_weight_grad", "align_jagged_to_multiple",
    "strip_jagged_padding",
]


def optimization_barrier(inputs):
    return torch.ops.tpu._optimization_barrier(list(inputs))


def max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode):
    return torch.ops.tpu._max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode):
    return torch.ops.tpu._max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode):
    return torch.ops.tpu._max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool1d_backward(grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    return torch.ops.tpu._max_pool1d_backward(grad_output, input, kernel_size, stride, padding,
                                              dilation, ceil_mode)


def max_pool2d_backward(grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    return torch.ops.tpu._max_pool2d_backward(grad_output, input, kernel_size, stride, padding,
                                              dilation, ceil_mode)


def max_pool3d_backward(grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    return torch.ops.tpu._max_pool3d_backward(grad_output, input, kernel_size, stride, padding,
                                              dilation, ceil_mode)


def ragged_dot(lhs, rhs, group_sizes, *, out=None):
    if out is None:
        return torch.ops.tpu._ragged_dot(lhs, rhs, group_sizes)
    return torch.ops.tpu._ragged_dot.out(lhs, rhs, group_sizes, out=out)


def ragged_dot_weight_grad(lhs, grad_output, group_sizes):
    return torch.ops.tpu._ragged_dot_weight_grad(lhs, grad_output, group_sizes)
