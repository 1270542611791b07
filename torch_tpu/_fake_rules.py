"""Fake-tensor rules for tpu kernels that accept more than PyTorch's own rule.

`torch.compile` traces with fake tensors, whose shapes come from PyTorch's
meta functions. Where such a function is written for one device's kernel
(`aten::_grouped_mm`'s accepts bf16 only: CUDA's grouped GEMM), a graph that
runs eagerly on tpu could not be traced. Each rule here answers only for
fake tensors on `tpu` and returns NotImplemented otherwise, so PyTorch's rule
still decides for every other device (docs/design.md, "Nothing global at
import"); the rule states what the tpu kernel accepts and returns
(csrc/aten/tpu_ops.cc).
"""
import torch
from torch._subclasses import fake_impls
from torch.fx.operator_schemas import normalize_function

_aten = torch.ops.aten


def _on_tpu(*tensors):
    return any(isinstance(t, torch.Tensor) and t.device.type == "tpu" for t in tensors)


def _check_strides(name, mat):
    # One of the last two dims unit-stride, the other a multiple of 16 bytes
    # (at::native::check_valid_strides_and_return_transposed, minus CUDA's
    # pointer alignment).
    r, c = mat.dim() - 2, mat.dim() - 1
    stride, size = mat.stride(), mat.shape
    align = 16 // mat.element_size()
    if stride[r] == 1 and stride[c] >= max(1, size[r]):
        torch._check(stride[c] % align == 0, lambda: f"{name}: strides should be multiple of 16 bytes")
    elif stride[c] == 1 and stride[r] >= max(1, size[c]):
        torch._check(stride[r] % align == 0, lambda: f"{name}: strides should be multiple of 16 bytes")
    else:
        torch._check(False, lambda: f"Invalid strides/sizes, got {list(stride)} for strides and "
                                    f"{list(size)} for sizes")


def _grouped_mm_shape(a, b, offs):
    if a.dim() == 2 and b.dim() == 2:
        return [offs.size(0), a.size(0), b.size(1)]
    if a.dim() == 2:
        torch._check(offs.size(0) == b.size(0), lambda: "matrix batch sizes have to match")
        return [a.size(0), b.size(2)]
    if b.dim() == 2:
        torch._check(offs.size(0) == a.size(0), lambda: "matrix batch sizes have to match")
        return [a.size(1), b.size(1)]
    torch._check(a.size(0) == b.size(0), lambda: "batched dimension has to match")
    return [a.size(0), a.size(1), b.size(2)]


def _is_grouped_mm(func):
    return func is _aten._grouped_mm.default


@fake_impls.register_op_impl(_is_grouped_mm)
def _grouped_mm(fake_mode, func, *args, **kwargs):
    """aten::_grouped_mm on tpu: float32, bfloat16 and float16, every form
    (2d×3d, 3d×2d, 2d×2d with `offs`; 3d×3d without), the checks of
    at::native::_grouped_mm_validate_inputs; a contiguous result."""
    _, kw = normalize_function(func, args, kwargs, normalize_to_only_use_kwargs=True)
    mat_a, mat_b, offs = kw["input"], kw["mat2"], kw.get("offs")  # "self" is "input" here
    bias, out_dtype = kw.get("bias"), kw.get("out_dtype")
    if not _on_tpu(mat_a, mat_b, offs):
        return NotImplemented
    floats = (torch.float32, torch.bfloat16, torch.float16)
    for name, m in (("mat_a", mat_a), ("mat_b", mat_b)):
        torch._check(m.dtype in floats, lambda: f"Expected {name} to be Float32, BFloat16 or "
                                                f"Float16 matrix, got {m.dtype}")
        torch._check(m.dim() in (2, 3), lambda: f"{name} has to be 2 or 3d")
    if mat_a.dim() == 3 or mat_b.dim() == 3:
        torch._check(mat_a.size(-1) == mat_b.size(-2),
                     lambda: "contraction dimension of mat_a and mat_b must match")
    _check_strides("mat_a", mat_a)
    _check_strides("mat_b", mat_b)
    torch._check((offs is not None) == (mat_a.dim() == 2 or mat_b.dim() == 2),
                 lambda: "Have to provide offsets if there is a 2d matrix, or no offset if both "
                         "matrices are 3d")
    if offs is not None:
        torch._check(offs.dim() == 1, lambda: "offs has to be 1D")
        torch._check(offs.dtype == torch.int32, lambda: "Offsets have to be int32")
    torch._check(bias is None, lambda: "Bias not supported yet")
    dtype = mat_a.dtype if out_dtype is None else out_dtype
    torch._check(dtype == mat_a.dtype, lambda: "Grouped gemm output dtype must match `mat_a` dtype")
    return mat_a.new_empty(_grouped_mm_shape(mat_a, mat_b, offs), dtype=dtype)
