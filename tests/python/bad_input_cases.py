"""Bad inputs, and the inputs next to them: each case is a function of the
device. It runs on CPU and on tpu (in every eager mode); the tpu must raise
the exception type CPU raises, with a message free of internals, or return
what CPU returns (mutated tensors included).

`python tests/python/bad_input_cases.py [family ...]` prints the counts per
outcome (same-error, same-result, mismatch) and every mismatch.
"""
import dataclasses
import json
import os
import subprocess
import sys
import warnings
from typing import Any, Callable, Optional

os.environ.setdefault("TORCH_TPU_DISK_CACHE", "0")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_tpu  # noqa: E402

# Where test_bad_inputs.py counts outcomes for conftest's summary line.
COUNTS_KEY = pytest.StashKey()

MODES = ("DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "DEFER_AND_FUSE")

# Text that tells the user about our internals rather than their mistake.
# A pattern CPU's own message holds is not held against the tpu.
INTERNALS = ("internal error", "XLA", "xla", "stablehlo", "StableHLO", "mlir", "PJRT",
             "INVALID_ARGUMENT", "Traceback", "list assignment index", "list index out of range",
             "ZeroDivisionError", "cond must be a bool", "TORCH_TPU_CPU_FALLBACK",
             "is not supported for these arguments", "lowering")


@dataclasses.dataclass
class Case:
    family: str
    name: str
    fn: Callable[[str], Any]
    # May kill the process (huge allocations, out-of-range device reads):
    # the case runs in a subprocess.
    isolate: bool = False
    # The error PyTorch raises where a CPU run alone cannot show it (mixing
    # devices); None: the CPU run is the reference.
    expect: Optional[type] = None

    @property
    def id(self):
        return f"{self.family}:{self.name}"


CASES: list = []


def add(family, name, fn, isolate=False, expect=None):
    CASES.append(Case(family, name, fn, isolate, expect))


# ---- inputs ---------------------------------------------------------------


def t(*shape, d="cpu", dtype=torch.float32):
    """Deterministic values (no RNG) of `dtype` on device `d`."""
    n = 1
    for s in shape:
        n *= s
    base = (torch.arange(n, dtype=torch.float64) * 7 % 11 - 5) / 2
    if dtype == torch.bool:
        x = base > 0
    elif dtype == torch.uint8:
        x = (base * 2 + 10).to(dtype)
    elif dtype.is_floating_point or dtype.is_complex:
        x = base.to(dtype)
    else:
        x = (base * 2).to(dtype)
    return x.reshape(shape).to(d)


def i(values, d="cpu", dtype=torch.long):
    return torch.tensor(values, dtype=dtype).to(d)


def ib(values, d="cpu"):
    return torch.tensor(values, dtype=torch.bool).to(d)


# ---- shapes ---------------------------------------------------------------

add("shapes", "add_broadcast", lambda d: t(2, 3, d=d) + t(4, d=d))
add("shapes", "mul_broadcast_3d", lambda d: t(2, 3, 4, d=d) * t(3, 3, d=d))
add("shapes", "add_inplace_needs_broadcast_self", lambda d: t(3, d=d).add_(t(2, 3, d=d)))
add("shapes", "mm_inner", lambda d: torch.mm(t(2, 3, d=d), t(4, 5, d=d)))
add("shapes", "mm_1d", lambda d: torch.mm(t(3, d=d), t(3, 2, d=d)))
add("shapes", "bmm_batch", lambda d: torch.bmm(t(2, 3, 4, d=d), t(3, 4, 5, d=d)))
add("shapes", "bmm_2d", lambda d: torch.bmm(t(3, 4, d=d), t(4, 5, d=d)))
add("shapes", "matmul_vec", lambda d: torch.matmul(t(3, d=d), t(4, d=d)))
add("shapes", "matmul_batched", lambda d: torch.matmul(t(2, 3, 4, d=d), t(3, 5, 6, d=d)))
add("shapes", "mv_mismatch", lambda d: torch.mv(t(3, 4, d=d), t(3, d=d)))
add("shapes", "dot_mismatch", lambda d: torch.dot(t(3, d=d), t(4, d=d)))
add("shapes", "dot_2d", lambda d: torch.dot(t(2, 2, d=d), t(2, 2, d=d)))
add("shapes", "addmm_bias", lambda d: torch.addmm(t(3, d=d), t(2, 4, d=d), t(4, 5, d=d)))
add("shapes", "baddbmm_mismatch", lambda d: torch.baddbmm(t(2, 3, 5, d=d), t(2, 3, 4, d=d), t(2, 5, 5, d=d)))
add("shapes", "linear_weight", lambda d: F.linear(t(2, 3, d=d), t(4, 5, d=d)))
add("shapes", "linear_bias", lambda d: F.linear(t(2, 3, d=d), t(4, 3, d=d), t(5, d=d)))
add("shapes", "cat_other_dim", lambda d: torch.cat([t(2, 3, d=d), t(2, 4, d=d)], 0))
add("shapes", "cat_rank", lambda d: torch.cat([t(2, 3, d=d), t(3, d=d)], 0))
add("shapes", "cat_empty_list", lambda d: torch.cat([], 0))
add("shapes", "stack_shapes", lambda d: torch.stack([t(2, 3, d=d), t(3, 2, d=d)]))
add("shapes", "view_numel", lambda d: t(3, 4, d=d).view(5, 5))
add("shapes", "view_two_inferred", lambda d: t(3, 4, d=d).view(-1, -1))
add("shapes", "view_noncontiguous", lambda d: t(3, 4, d=d).t().view(-1))
add("shapes", "reshape_numel", lambda d: t(3, 4, d=d).reshape(7, -1))
add("shapes", "expand_size", lambda d: t(3, d=d).expand(4))
add("shapes", "expand_fewer_dims", lambda d: t(2, 3, d=d).expand(3))
add("shapes", "repeat_fewer_dims", lambda d: t(2, 3, d=d).repeat(2))
add("shapes", "permute_ndims", lambda d: t(2, 3, d=d).permute(0))
add("shapes", "permute_repeated", lambda d: t(2, 3, d=d).permute(0, 0))
add("shapes", "flatten_start_after_end", lambda d: t(2, 3, 4, d=d).flatten(2, 1))
add("shapes", "unflatten_sizes", lambda d: t(2, 6, d=d).unflatten(1, (4, 2)))
add("shapes", "split_sizes_sum", lambda d: t(6, d=d).split([2, 3]))
add("shapes", "narrow_past_end", lambda d: t(5, d=d).narrow(0, 3, 4))
add("shapes", "where_shapes", lambda d: torch.where(t(3, d=d) > 0, t(3, d=d), t(4, d=d)))
add("shapes", "masked_fill_mask_shape", lambda d: t(3, 4, d=d).masked_fill(ib([True, False], d=d), 1.0))
add("shapes", "conv2d_channels", lambda d: F.conv2d(t(1, 3, 5, 5, d=d), t(2, 4, 3, 3, d=d)))
add("shapes", "conv2d_kernel_too_big", lambda d: F.conv2d(t(1, 1, 2, 2, d=d), t(1, 1, 3, 3, d=d)))
add("shapes", "conv2d_rank", lambda d: F.conv2d(t(5, 5, d=d), t(1, 1, 3, 3, d=d)))
add("shapes", "conv1d_bias", lambda d: F.conv1d(t(1, 2, 5, d=d), t(3, 2, 2, d=d), t(2, d=d)))
add("shapes", "layer_norm_shape", lambda d: F.layer_norm(t(2, 3, d=d), (4,)))
add("shapes", "layer_norm_weight", lambda d: F.layer_norm(t(2, 3, d=d), (3,), t(4, d=d)))
add("shapes", "batch_norm_weight", lambda d: F.batch_norm(t(2, 3, 4, d=d), t(3, d=d), t(3, d=d).abs(), t(4, d=d)))
add("shapes", "batch_norm_running", lambda d: F.batch_norm(t(2, 3, 4, d=d), t(5, d=d), t(5, d=d).abs()))
add("shapes", "group_norm_groups", lambda d: F.group_norm(t(2, 6, 4, d=d), 4))
add("shapes", "cross_entropy_target", lambda d: F.cross_entropy(t(3, 5, d=d), i([0, 1], d=d)))
add("shapes", "nll_loss_weight", lambda d: F.nll_loss(t(3, 5, d=d), i([0, 1, 2], d=d), weight=t(4, d=d)))
add("shapes", "mse_loss_broadcast", lambda d: F.mse_loss(t(3, 1, d=d), t(3, 4, d=d)))
add("shapes", "mse_loss_incompatible", lambda d: F.mse_loss(t(3, d=d), t(4, d=d)))
add("shapes", "bce_shapes", lambda d: F.binary_cross_entropy(t(3, d=d).sigmoid(), t(4, d=d).sigmoid()))
add("shapes", "l1_loss_shapes", lambda d: F.l1_loss(t(2, 3, d=d), t(3, 2, d=d)))
add("shapes", "index_select_2d_index", lambda d: t(4, 3, d=d).index_select(0, i([[0, 1]], d=d)))
add("shapes", "gather_rank", lambda d: t(4, 3, d=d).gather(1, i([0, 1], d=d)))
add("shapes", "gather_index_bigger", lambda d: t(2, 2, d=d).gather(1, i([[0, 1], [1, 0], [0, 0]], d=d)))
add("shapes", "scatter_src_smaller", lambda d: t(3, 3, d=d).scatter(0, i([[0, 1, 2], [1, 2, 0]], d=d), t(1, 3, d=d)))
add("shapes", "topk_k_too_big", lambda d: t(4, d=d).topk(5))
add("shapes", "kthvalue_k_too_big", lambda d: t(4, d=d).kthvalue(5))
add("shapes", "max_pool2d_kernel_too_big", lambda d: F.max_pool2d(t(1, 1, 2, 2, d=d), 3))
add("shapes", "avg_pool2d_kernel_too_big", lambda d: F.avg_pool2d(t(1, 1, 2, 2, d=d), 3))
add("shapes", "pad_odd_length", lambda d: F.pad(t(2, 3, d=d), (1, 2, 3)))
add("shapes", "pad_negative_too_big", lambda d: F.pad(t(2, 3, d=d), (-2, -2)))
add("shapes", "unfold_size_too_big", lambda d: t(5, d=d).unfold(0, 6, 1))
add("shapes", "diag_3d", lambda d: torch.diag(t(2, 2, 2, d=d)))
add("shapes", "trace_1d", lambda d: torch.trace(t(3, d=d)))
add("shapes", "triu_1d", lambda d: torch.triu(t(3, d=d)))
add("shapes", "cross_not_3", lambda d: torch.linalg.cross(t(2, 4, d=d), t(2, 4, d=d)))
add("shapes", "roll_shifts_dims", lambda d: t(3, 4, d=d).roll((1, 2), (0,)))
add("shapes", "einsum_mismatch", lambda d: torch.einsum("ij,jk->ik", t(2, 3, d=d), t(4, 5, d=d)))
add("shapes", "tensordot_mismatch", lambda d: torch.tensordot(t(2, 3, d=d), t(4, 5, d=d), dims=1))
add("shapes", "max_empty", lambda d: t(0, d=d).max())
add("shapes", "argmax_empty", lambda d: t(0, d=d).argmax())
add("shapes", "amax_empty_dim", lambda d: t(0, 3, d=d).amax(0))
add("shapes", "min_dim_empty", lambda d: t(0, 3, d=d).min(0))
add("shapes", "prod_empty", lambda d: t(0, d=d).prod())
add("shapes", "mean_empty", lambda d: t(0, d=d).mean())
add("shapes", "sum_empty_dim", lambda d: t(0, 3, d=d).sum(0))
add("shapes", "mm_zero_inner", lambda d: torch.mm(t(2, 0, d=d), t(0, 3, d=d)))
add("shapes", "softmax_empty", lambda d: t(0, 3, d=d).softmax(1))
add("shapes", "pixel_shuffle_indivisible", lambda d: F.pixel_shuffle(t(1, 3, 2, 2, d=d), 2))
add("shapes", "cdist_last_dim", lambda d: torch.cdist(t(2, 3, d=d), t(2, 4, d=d)))
add("shapes", "lerp_weight_shape", lambda d: torch.lerp(t(3, d=d), t(3, d=d), t(4, d=d)))
add("shapes", "embedding_weight_1d", lambda d: F.embedding(i([0, 1], d=d), t(5, d=d)))
add("shapes", "interpolate_rank", lambda d: F.interpolate(t(4, d=d), size=8))
add("shapes", "addcmul_shapes", lambda d: torch.addcmul(t(3, d=d), t(2, d=d), t(3, d=d)))
add("shapes", "clamp_tensor_bound_shape", lambda d: torch.clamp(t(3, d=d), min=t(4, d=d)))

# ---- dims and other arguments ---------------------------------------------

DIM_OPS = {
    "sum": lambda x, k: x.sum(k),
    "mean": lambda x, k: x.mean(k),
    "prod": lambda x, k: x.prod(k),
    "amax": lambda x, k: x.amax(k),
    "amin": lambda x, k: x.amin(k),
    "max": lambda x, k: x.max(k),
    "min": lambda x, k: x.min(k),
    "argmax": lambda x, k: x.argmax(k),
    "argmin": lambda x, k: x.argmin(k),
    "var": lambda x, k: x.var(k),
    "std": lambda x, k: x.std(k),
    "logsumexp": lambda x, k: x.logsumexp(k),
    "norm": lambda x, k: x.norm(dim=k),
    "all": lambda x, k: (x > 0).all(k),
    "any": lambda x, k: (x > 0).any(k),
    "cumsum": lambda x, k: x.cumsum(k),
    "cumprod": lambda x, k: x.cumprod(k),
    "cummax": lambda x, k: x.cummax(k),
    "softmax": lambda x, k: x.softmax(k),
    "log_softmax": lambda x, k: x.log_softmax(k),
    "sort": lambda x, k: x.sort(k),
    "argsort": lambda x, k: x.argsort(k),
    "topk": lambda x, k: x.topk(1, k),
    "kthvalue": lambda x, k: x.kthvalue(1, k),
    "median": lambda x, k: x.median(k),
    "squeeze": lambda x, k: x.squeeze(k),
    "unsqueeze": lambda x, k: x.unsqueeze(k + 1),
    "transpose": lambda x, k: x.transpose(0, k),
    "movedim": lambda x, k: x.movedim(0, k),
    "flip": lambda x, k: x.flip(k),
    "roll": lambda x, k: x.roll(1, k),
    "flatten": lambda x, k: x.flatten(k),
    "narrow": lambda x, k: x.narrow(k, 0, 1),
    "select": lambda x, k: x.select(k, 0),
    "chunk": lambda x, k: x.chunk(2, k),
    "split": lambda x, k: x.split(1, k),
    "unbind": lambda x, k: x.unbind(k),
    "cat": lambda x, k: torch.cat([x, x], k),
    "stack": lambda x, k: torch.stack([x, x], k + 1),
    "index_select": lambda x, k: x.index_select(k, i([0], d=x.device)),
    "gather": lambda x, k: x.gather(k, i([[0]], d=x.device)),
    "diagonal": lambda x, k: x.diagonal(0, 0, k),
    "diff": lambda x, k: x.diff(dim=k),
    "count_nonzero": lambda x, k: x.count_nonzero(k),
    "nansum": lambda x, k: x.nansum(k),
    "glu": lambda x, k: F.glu(x, k),
    "normalize": lambda x, k: F.normalize(x, dim=k),
    "cosine_similarity": lambda x, k: F.cosine_similarity(x, x, dim=k),
    "repeat_interleave": lambda x, k: x.repeat_interleave(2, dim=k),
    "tensor_split": lambda x, k: x.tensor_split(2, k),
    "unfold": lambda x, k: x.unfold(k, 1, 1),
    "aminmax": lambda x, k: torch.aminmax(x, dim=k),
    "mode": lambda x, k: x.mode(k),
}
for _name, _op in DIM_OPS.items():
    add("arguments", f"{_name}_dim_out_of_range", lambda d, op=_op: op(t(2, 4, d=d), 2))
    add("arguments", f"{_name}_negative_dim_out_of_range", lambda d, op=_op: op(t(2, 4, d=d), -3))
add("arguments", "sum_repeated_dims", lambda d: t(2, 3, d=d).sum((0, 0)))
add("arguments", "flip_repeated_dims", lambda d: t(2, 3, d=d).flip((0, 0)))
add("arguments", "smooth_l1_negative_beta", lambda d: F.smooth_l1_loss(t(4, d=d), t(4, d=d) * 2, beta=-1.0))
add("arguments", "smooth_l1_zero_beta", lambda d: F.smooth_l1_loss(t(4, d=d), t(4, d=d) * 2, beta=0.0))
add("arguments", "huber_zero_delta", lambda d: F.huber_loss(t(4, d=d), t(4, d=d) * 2, delta=0.0))
add("arguments", "huber_negative_delta", lambda d: F.huber_loss(t(4, d=d), t(4, d=d) * 2, delta=-1.0))
add("arguments", "conv_transpose2d_output_padding", lambda d: F.conv_transpose2d(t(1, 2, 4, 4, d=d), t(2, 3, 3, 3, d=d), stride=2, output_padding=2))
add("arguments", "conv_transpose1d_output_padding_dilation", lambda d: F.conv_transpose1d(t(1, 2, 4, d=d), t(2, 3, 3, d=d), stride=1, output_padding=1))
add("arguments", "conv2d_zero_stride", lambda d: F.conv2d(t(1, 1, 5, 5, d=d), t(1, 1, 3, 3, d=d), stride=0))
add("arguments", "conv2d_negative_padding", lambda d: F.conv2d(t(1, 1, 5, 5, d=d), t(1, 1, 3, 3, d=d), padding=-1))
add("arguments", "conv2d_zero_dilation", lambda d: F.conv2d(t(1, 1, 5, 5, d=d), t(1, 1, 3, 3, d=d), dilation=0))
add("arguments", "conv2d_groups", lambda d: F.conv2d(t(1, 3, 5, 5, d=d), t(2, 1, 3, 3, d=d), groups=2))
add("arguments", "conv2d_padding_same_strided", lambda d: F.conv2d(t(1, 1, 5, 5, d=d), t(1, 1, 3, 3, d=d), stride=2, padding="same"))
add("arguments", "max_pool2d_zero_stride", lambda d: F.max_pool2d(t(1, 1, 4, 4, d=d), 2, stride=0))
add("arguments", "max_pool2d_big_padding", lambda d: F.max_pool2d(t(1, 1, 4, 4, d=d), 2, padding=2))
add("arguments", "avg_pool2d_big_padding", lambda d: F.avg_pool2d(t(1, 1, 4, 4, d=d), 2, padding=2))
add("arguments", "avg_pool2d_zero_divisor", lambda d: F.avg_pool2d(t(1, 1, 4, 4, d=d), 2, divisor_override=0))
add("arguments", "max_pool1d_zero_kernel", lambda d: F.max_pool1d(t(1, 1, 4, d=d), 0))
add("arguments", "adaptive_avg_pool2d_zero", lambda d: F.adaptive_avg_pool2d(t(1, 1, 4, 4, d=d), (0, 2)))
add("arguments", "pad_reflect_too_big", lambda d: F.pad(t(1, 2, 3, d=d), (3, 3), mode="reflect"))
add("arguments", "pad_bad_mode", lambda d: F.pad(t(1, 2, 3, d=d), (1, 1), mode="wrap"))
add("arguments", "dropout_p", lambda d: F.dropout(t(3, d=d), p=1.5))
add("arguments", "topk_negative_k", lambda d: t(4, d=d).topk(-1))
add("arguments", "kthvalue_zero_k", lambda d: t(4, d=d).kthvalue(0))
add("arguments", "chunk_zero", lambda d: t(4, d=d).chunk(0))
add("arguments", "split_zero_size", lambda d: t(4, d=d).split(0))
add("arguments", "unfold_zero_step", lambda d: t(4, d=d).unfold(0, 2, 0))
add("arguments", "diff_negative_n", lambda d: t(4, d=d).diff(n=-1))
add("arguments", "repeat_negative", lambda d: t(4, d=d).repeat(-1))
add("arguments", "expand_negative", lambda d: t(1, d=d).expand(-2))
add("arguments", "group_norm_indivisible", lambda d: F.group_norm(t(2, 6, 4, d=d), 4, t(6, d=d), t(6, d=d)))
add("arguments", "cross_entropy_label_smoothing", lambda d: F.cross_entropy(t(3, 5, d=d), i([0, 1, 2], d=d), label_smoothing=1.5))
add("arguments", "nll_loss_bad_reduction", lambda d: F.nll_loss(t(3, 5, d=d), i([0, 1, 2], d=d), reduction="bad"))
add("arguments", "clamp_without_bounds", lambda d: torch.clamp(t(4, d=d)))
add("arguments", "clamp_min_above_max", lambda d: torch.clamp(t(4, d=d), min=1.0, max=-1.0))
add("arguments", "clamp_nan_bound", lambda d: torch.clamp(t(4, d=d), min=float("nan")))
add("arguments", "quantile_q_out_of_range", lambda d: torch.quantile(t(4, d=d), 1.5))
add("arguments", "div_bad_rounding_mode", lambda d: torch.div(t(4, d=d), 2, rounding_mode="up"))
add("arguments", "arange_zero_step", lambda d: torch.arange(0, 5, 0, device=d))
add("arguments", "arange_wrong_sign", lambda d: torch.arange(0, 5, -1, device=d))
add("arguments", "arange_nan", lambda d: torch.arange(0, float("nan"), device=d))
add("arguments", "linspace_negative_steps", lambda d: torch.linspace(0, 1, -1, device=d))
add("arguments", "full_negative_size", lambda d: torch.full((-1, 2), 1.0, device=d))
add("arguments", "zeros_negative_size", lambda d: torch.zeros(2, -3, device=d))
add("arguments", "empty_negative_size", lambda d: torch.empty(-1, device=d))
add("arguments", "eye_negative", lambda d: torch.eye(-2, device=d))
add("arguments", "tril_indices_negative", lambda d: torch.tril_indices(-1, 3, device=d))
add("arguments", "pdist_1d", lambda d: F.pdist(t(4, d=d)))
add("arguments", "cdist_negative_p", lambda d: torch.cdist(t(2, 3, d=d), t(2, 3, d=d), p=-1.0))
add("arguments", "pixel_shuffle_zero", lambda d: F.pixel_shuffle(t(1, 4, 2, 2, d=d), 0))
add("arguments", "one_hot_negative_classes", lambda d: F.one_hot(i([0, 1], d=d), -2))
add("arguments", "interpolate_bad_mode", lambda d: F.interpolate(t(1, 1, 4, d=d), size=8, mode="cubic"))
add("arguments", "var_correction_too_big", lambda d: t(3, d=d).var(correction=5))
add("arguments", "std_single", lambda d: t(1, d=d).std())
add("arguments", "histc_min_above_max", lambda d: torch.histc(t(4, d=d), bins=4, min=2, max=1))
add("arguments", "multinomial_zero_samples_no_replacement", lambda d: torch.multinomial(t(3, d=d).abs() + 1, 4))
add("arguments", "renorm_negative_maxnorm", lambda d: t(2, 3, d=d).renorm(2, 0, -1.0))
add("arguments", "lp_pool_negative_norm", lambda d: F.lp_pool1d(t(1, 1, 4, d=d).abs(), 0.0, 2))
add("arguments", "fold_bad_output_size", lambda d: F.fold(t(1, 4, 3, d=d), (2, 2), (2, 2)))
add("arguments", "unfold_im2col_zero_kernel", lambda d: F.unfold(t(1, 1, 4, 4, d=d), 0))
add("arguments", "rrelu_lower_above_upper", lambda d: F.rrelu(t(4, d=d), 0.5, 0.1))
add("arguments", "threshold", lambda d: F.threshold(t(4, d=d), 0.5, 1.0))
add("arguments", "elu_inplace_negative_alpha", lambda d: F.elu(t(4, d=d), alpha=-1.0, inplace=True))

# ---- dtypes ---------------------------------------------------------------

INT, F32, F64 = torch.long, torch.float32, torch.float64
add("dtypes", "int_mul__float_scalar", lambda d: t(4, d=d, dtype=INT).mul_(1.5))
add("dtypes", "int_add__float_tensor", lambda d: t(4, d=d, dtype=INT).add_(t(4, d=d)))
add("dtypes", "int_div__int", lambda d: t(4, d=d, dtype=INT).div_(2))
add("dtypes", "int_div__floor", lambda d: t(4, d=d, dtype=INT).div_(2, rounding_mode="floor"))
add("dtypes", "int_mul__float_0d", lambda d: t(4, d=d, dtype=INT).mul_(torch.tensor(1.5).to(d)))
add("dtypes", "int_pow__half", lambda d: t(4, d=d, dtype=INT).pow_(0.5))
add("dtypes", "int_sqrt_", lambda d: t(4, d=d, dtype=INT).abs().sqrt_())
add("dtypes", "int_sigmoid_", lambda d: t(4, d=d, dtype=INT).sigmoid_())
add("dtypes", "int_clamp__float", lambda d: t(4, d=d, dtype=INT).clamp_(min=0.5))
add("dtypes", "int_addcdiv_", lambda d: t(4, d=d, dtype=INT).addcdiv_(t(4, d=d, dtype=INT), t(4, d=d, dtype=INT) + 9))
add("dtypes", "int_addcmul__float_value", lambda d: t(4, d=d, dtype=INT).addcmul_(t(4, d=d, dtype=INT), t(4, d=d, dtype=INT), value=0.5))
add("dtypes", "int_lerp_", lambda d: t(4, d=d, dtype=INT).lerp_(t(4, d=d, dtype=INT), 0.5))
add("dtypes", "bool_add__int", lambda d: t(4, d=d, dtype=torch.bool).add_(2))
add("dtypes", "bool_mul__bool", lambda d: t(4, d=d, dtype=torch.bool).mul_(t(4, d=d, dtype=torch.bool)))
add("dtypes", "float_add__complex", lambda d: t(4, d=d).add_(1j))
add("dtypes", "float_add__double", lambda d: t(4, d=d).add_(t(4, d=d, dtype=F64)))
add("dtypes", "int32_add__int64", lambda d: t(4, d=d, dtype=torch.int32).add_(t(4, d=d, dtype=INT)))
add("dtypes", "uint8_fill__300", lambda d: t(4, d=d, dtype=torch.uint8).fill_(300))
add("dtypes", "uint8_fill__negative", lambda d: t(4, d=d, dtype=torch.uint8).fill_(-1))
add("dtypes", "int8_fill__200", lambda d: t(4, d=d, dtype=torch.int8).fill_(200))
add("dtypes", "int_fill__float", lambda d: t(4, d=d, dtype=INT).fill_(2.7))
add("dtypes", "bool_fill__2", lambda d: t(4, d=d, dtype=torch.bool).fill_(2))
add("dtypes", "half_fill__huge", lambda d: t(4, d=d, dtype=torch.half).fill_(1e10))
add("dtypes", "full_uint8_300", lambda d: torch.full((3,), 300, dtype=torch.uint8, device=d))
add("dtypes", "full_int8_negative_200", lambda d: torch.full((3,), -200, dtype=torch.int8, device=d))
add("dtypes", "uint8_add_300", lambda d: t(4, d=d, dtype=torch.uint8) + 300)
add("dtypes", "uint8_masked_fill_300", lambda d: t(4, d=d, dtype=torch.uint8).masked_fill(t(4, d=d) > 0, 300))
add("dtypes", "int_masked_fill_float", lambda d: t(4, d=d, dtype=INT).masked_fill(t(4, d=d) > 0, 1.5))
add("dtypes", "masked_fill_float_mask", lambda d: t(4, d=d).masked_fill(t(4, d=d), 1.0))
add("dtypes", "where_float_cond", lambda d: torch.where(t(4, d=d), t(4, d=d), t(4, d=d)))
add("dtypes", "mm_f32_f64", lambda d: torch.mm(t(2, 3, d=d), t(3, 2, d=d, dtype=F64)))
add("dtypes", "matmul_f32_f64", lambda d: torch.matmul(t(2, 3, d=d), t(3, 2, d=d, dtype=F64)))
add("dtypes", "bmm_f32_f16", lambda d: torch.bmm(t(1, 2, 3, d=d), t(1, 3, 2, d=d, dtype=torch.half)))
add("dtypes", "mv_f32_f64", lambda d: torch.mv(t(2, 3, d=d), t(3, d=d, dtype=F64)))
add("dtypes", "dot_f32_f64", lambda d: torch.dot(t(3, d=d), t(3, d=d, dtype=F64)))
add("dtypes", "addmm_mixed", lambda d: torch.addmm(t(2, d=d, dtype=F64), t(2, 3, d=d), t(3, 2, d=d)))
add("dtypes", "mm_int", lambda d: torch.mm(t(2, 3, d=d, dtype=INT), t(3, 2, d=d, dtype=INT)))
add("dtypes", "mm_int_float", lambda d: torch.mm(t(2, 3, d=d, dtype=INT), t(3, 2, d=d)))
add("dtypes", "linear_f64_weight", lambda d: F.linear(t(2, 3, d=d), t(4, 3, d=d, dtype=F64)))
add("dtypes", "conv2d_f64_weight", lambda d: F.conv2d(t(1, 1, 4, 4, d=d), t(1, 1, 2, 2, d=d, dtype=F64)))
add("dtypes", "conv2d_int", lambda d: F.conv2d(t(1, 1, 4, 4, d=d, dtype=INT), t(1, 1, 2, 2, d=d, dtype=INT)))
add("dtypes", "lerp_f32_f64", lambda d: torch.lerp(t(3, d=d), t(3, d=d, dtype=F64), 0.5))
add("dtypes", "int_pow_negative_scalar", lambda d: t(4, d=d, dtype=INT).pow(-1))
add("dtypes", "int_pow_negative_scalar_2", lambda d: t(4, d=d, dtype=INT) ** -2)
add("dtypes", "int_pow_negative_tensor", lambda d: torch.pow(i([2, 1, -1, 3], d=d), i([-1, -2, -3, 2], d=d)))
add("dtypes", "int_scalar_pow_negative_tensor", lambda d: torch.pow(2, i([-1, 0, 3], d=d)))
add("dtypes", "int_pow_float_scalar", lambda d: t(4, d=d, dtype=INT).pow(0.5))
add("dtypes", "int_pow_zero_base_negative", lambda d: torch.pow(i([0, 1], d=d), -1.0))
add("dtypes", "int_floor_divide_zero", lambda d: torch.floor_divide(i([4, -4], d=d), i([0, 0], d=d)))
add("dtypes", "int_div_floor_zero", lambda d: torch.div(i([4, -4], d=d), 0, rounding_mode="floor"))
add("dtypes", "int_div_trunc_zero", lambda d: torch.div(i([4, -4], d=d), i([0, 2], d=d), rounding_mode="trunc"))
add("dtypes", "int_remainder_zero", lambda d: torch.remainder(i([4, -4], d=d), 0))
add("dtypes", "int_fmod_zero", lambda d: torch.fmod(i([4, -4], d=d), i([0, 3], d=d)))
add("dtypes", "int_true_div_zero", lambda d: i([4, 0, -4], d=d) / 0)
add("dtypes", "bitwise_and_float", lambda d: torch.bitwise_and(t(4, d=d), t(4, d=d)))
add("dtypes", "bitwise_not_float", lambda d: torch.bitwise_not(t(4, d=d)))
add("dtypes", "lshift_float", lambda d: t(4, d=d) << 1)
add("dtypes", "xor_float_int", lambda d: t(4, d=d) ^ t(4, d=d, dtype=INT))
add("dtypes", "gcd_float", lambda d: torch.gcd(t(4, d=d), t(4, d=d)))
add("dtypes", "neg_bool", lambda d: -t(4, d=d, dtype=torch.bool))
add("dtypes", "sub_bool_bool", lambda d: t(4, d=d, dtype=torch.bool) - t(4, d=d, dtype=torch.bool))
add("dtypes", "rsub_bool", lambda d: torch.rsub(t(4, d=d, dtype=torch.bool), True))
add("dtypes", "abs_bool", lambda d: t(4, d=d, dtype=torch.bool).abs())
add("dtypes", "mean_int", lambda d: t(4, d=d, dtype=INT).mean())
add("dtypes", "std_int", lambda d: t(4, d=d, dtype=INT).std())
add("dtypes", "softmax_int", lambda d: t(4, d=d, dtype=INT).softmax(0))
add("dtypes", "log_softmax_int", lambda d: t(4, d=d, dtype=INT).log_softmax(0))
add("dtypes", "erf_bool", lambda d: torch.erf(t(4, d=d, dtype=torch.bool)))
add("dtypes", "floor_int", lambda d: t(4, d=d, dtype=INT).floor())
add("dtypes", "sign_bool", lambda d: t(4, d=d, dtype=torch.bool).sign())
add("dtypes", "sigmoid_int", lambda d: t(4, d=d, dtype=INT).sigmoid())
add("dtypes", "int_true_divide", lambda d: t(4, d=d, dtype=INT) / 3)
add("dtypes", "int_plus_f64_0d", lambda d: t(4, d=d, dtype=INT) + torch.tensor(1.5, dtype=F64).to(d))
add("dtypes", "int32_plus_int64_0d", lambda d: t(4, d=d, dtype=torch.int32) + torch.tensor(7).to(d))
add("dtypes", "f16_plus_f64_0d", lambda d: t(4, d=d, dtype=torch.half) + torch.tensor(1.5, dtype=F64).to(d))
add("dtypes", "f16_plus_f64_1d", lambda d: t(4, d=d, dtype=torch.half) + t(4, d=d, dtype=F64))
add("dtypes", "uint8_plus_int8", lambda d: t(4, d=d, dtype=torch.uint8) + t(4, d=d, dtype=torch.int8))
add("dtypes", "bf16_plus_f16", lambda d: t(4, d=d, dtype=torch.bfloat16) + t(4, d=d, dtype=torch.half))
add("dtypes", "bool_plus_bool", lambda d: t(4, d=d, dtype=torch.bool) + t(4, d=d, dtype=torch.bool))
add("dtypes", "bool_plus_float_scalar", lambda d: t(4, d=d, dtype=torch.bool) + 1.5)
add("dtypes", "int_plus_bool_scalar", lambda d: t(4, d=d, dtype=INT) + True)
add("dtypes", "uint8_minus_wraps", lambda d: t(4, d=d, dtype=torch.uint8) - 20)
add("dtypes", "int8_mul_overflow", lambda d: t(4, d=d, dtype=torch.int8) * 100)
add("dtypes", "int_mul_complex_scalar", lambda d: t(4, d=d, dtype=INT) * 1j)
add("dtypes", "float_eq_int", lambda d: t(4, d=d) == t(4, d=d, dtype=INT))
add("dtypes", "int_lt_float_scalar", lambda d: t(4, d=d, dtype=INT) < 0.5)
add("dtypes", "where_mixed", lambda d: torch.where(t(4, d=d) > 0, t(4, d=d, dtype=INT), t(4, d=d, dtype=F64)))
add("dtypes", "where_scalar_int_tensor", lambda d: torch.where(t(4, d=d) > 0, t(4, d=d, dtype=INT), 2.5))
add("dtypes", "cat_mixed", lambda d: torch.cat([t(2, d=d, dtype=INT), t(2, d=d, dtype=torch.half)]))
add("dtypes", "cat_bool_int", lambda d: torch.cat([t(2, d=d, dtype=torch.bool), t(2, d=d, dtype=torch.uint8)]))
add("dtypes", "stack_mixed", lambda d: torch.stack([t(2, d=d, dtype=torch.int32), t(2, d=d)]))
add("dtypes", "clamp_int_float_min", lambda d: torch.clamp(t(4, d=d, dtype=INT), min=0.5))
add("dtypes", "clamp_int_tensor_float_bound", lambda d: torch.clamp(t(4, d=d, dtype=INT), min=t(4, d=d)))
add("dtypes", "maximum_mixed", lambda d: torch.maximum(t(4, d=d, dtype=INT), t(4, d=d, dtype=torch.half)))
add("dtypes", "atan2_int", lambda d: torch.atan2(t(4, d=d, dtype=INT), t(4, d=d, dtype=INT)))
add("dtypes", "copy__float_into_int", lambda d: t(4, d=d, dtype=INT).copy_(t(4, d=d) * 1.7))
add("dtypes", "copy__complex_into_float", lambda d: t(4, d=d).copy_(t(4, d=d, dtype=torch.complex64)))
add("dtypes", "index_select_float_index", lambda d: t(4, d=d).index_select(0, t(2, d=d)))
add("dtypes", "gather_int32_index", lambda d: t(4, d=d).gather(0, i([0, 3], d=d, dtype=torch.int32)))
add("dtypes", "embedding_float_indices", lambda d: F.embedding(t(2, d=d), t(5, 3, d=d)))
add("dtypes", "cross_entropy_float_target_shape", lambda d: F.cross_entropy(t(3, 5, d=d), t(3, d=d)))
add("dtypes", "nll_loss_int32_target", lambda d: F.nll_loss(t(3, 5, d=d), i([0, 1, 2], d=d, dtype=torch.int32)))
add("dtypes", "index_add__dtype", lambda d: t(4, d=d).index_add_(0, i([0], d=d), t(1, d=d, dtype=F64)))
add("dtypes", "index_copy__dtype", lambda d: t(4, d=d).index_copy_(0, i([0], d=d), t(1, d=d, dtype=F64)))
add("dtypes", "scatter__src_dtype", lambda d: t(4, d=d).scatter_(0, i([0], d=d), t(1, d=d, dtype=F64)))
add("dtypes", "masked_scatter__dtype", lambda d: t(4, d=d).masked_scatter_(t(4, d=d) > 0, t(4, d=d, dtype=F64)))
add("dtypes", "sum_dtype_int_of_float", lambda d: t(4, d=d).sum(dtype=INT))
add("dtypes", "cumsum_bool", lambda d: t(4, d=d, dtype=torch.bool).cumsum(0))
add("dtypes", "sum_uint8", lambda d: t(40, d=d, dtype=torch.uint8).sum())
add("dtypes", "prod_bool", lambda d: t(4, d=d, dtype=torch.bool).prod())
add("dtypes", "arange_float_int_dtype", lambda d: torch.arange(0, 2.5, 0.5, dtype=INT, device=d))
add("dtypes", "linspace_int", lambda d: torch.linspace(0, 5, 4, dtype=INT, device=d))
add("dtypes", "tensor_to_uint8_overflow", lambda d: (t(4, d=d, dtype=INT) * 100).to(torch.uint8))
add("dtypes", "relu_bool", lambda d: torch.relu(t(4, d=d, dtype=torch.bool)))
add("dtypes", "isnan_int", lambda d: torch.isnan(t(4, d=d, dtype=INT)))
add("dtypes", "round_decimals_int", lambda d: torch.round(t(4, d=d, dtype=INT), decimals=1))

# ---- devices: mixing cpu and tpu tensors (CUDA's rules) --------------------


def _mix(fn):
    """fn(tpu_or_cpu, cpu) — the second argument always stays on the CPU."""
    return lambda d: fn(d, "cpu")


add("devices", "add_cpu_vector", _mix(lambda d, c: t(3, d=d) + t(3, d=c)), expect=RuntimeError)
add("devices", "add_cpu_vector_first", _mix(lambda d, c: t(3, d=c) + t(3, d=d)), expect=RuntimeError)
add("devices", "mul__cpu_vector", _mix(lambda d, c: t(3, d=d).mul_(t(3, d=c))), expect=RuntimeError)
add("devices", "mm_cpu", _mix(lambda d, c: torch.mm(t(2, 2, d=d), t(2, 2, d=c))), expect=RuntimeError)
add("devices", "cat_cpu", _mix(lambda d, c: torch.cat([t(2, d=d), t(2, d=c)])), expect=RuntimeError)
add("devices", "where_cpu_cond", _mix(lambda d, c: torch.where(t(3, d=c) > 0, t(3, d=d), t(3, d=d))), expect=RuntimeError)
add("devices", "out_on_cpu", _mix(lambda d, c: torch.add(t(3, d=d), t(3, d=d), out=t(3, d=c))), expect=RuntimeError)
add("devices", "index_select_cpu_source", _mix(lambda d, c: t(4, d=c).index_select(0, i([0, 1], d=d))), expect=RuntimeError)
add("devices", "linear_cpu_weight", _mix(lambda d, c: F.linear(t(2, 3, d=d), t(4, 3, d=c))), expect=RuntimeError)
add("devices", "conv2d_cpu_weight", _mix(lambda d, c: F.conv2d(t(1, 1, 4, 4, d=d), t(1, 1, 2, 2, d=c))), expect=RuntimeError)
add("devices", "masked_fill_cpu_mask", _mix(lambda d, c: t(3, d=d).masked_fill(t(3, d=c) > 0, 1.0)), expect=RuntimeError)
add("devices", "copy__into_cpu_view", _mix(lambda d, c: t(3, d=c).copy_(t(3, d=d))))
add("devices", "cpu_0d_scalar", _mix(lambda d, c: t(3, d=d) + torch.tensor(2.0)))
add("devices", "cpu_0d_scalar_first", _mix(lambda d, c: torch.tensor(2.0) * t(3, d=d)))
add("devices", "cpu_0d_scalar_inplace", _mix(lambda d, c: t(3, d=d).mul_(torch.tensor(2.0))))
add("devices", "cpu_0d_int_scalar", _mix(lambda d, c: t(3, d=d) + torch.tensor(2)))
add("devices", "cpu_index_tensor", _mix(lambda d, c: t(4, d=d)[i([3, 0], d=c)]))
add("devices", "cpu_bool_mask_index", _mix(lambda d, c: t(4, d=d)[t(4, d=c) > 0]))

# ---- overlap: writes that read what they write -----------------------------


def _base(d, fn):
    x = t(6, d=d)
    fn(x)
    return x


def _base2(d, fn):
    x = t(3, 3, d=d)
    fn(x)
    return x


add("overlap", "shifted_iadd", lambda d: _base(d, lambda x: x[1:].__iadd__(x[:-1])))
add("overlap", "shifted_add_", lambda d: _base(d, lambda x: x[1:].add_(x[:-1])))
add("overlap", "shifted_mul_", lambda d: _base(d, lambda x: x[:-1].mul_(x[1:])))
add("overlap", "shifted_add_out", lambda d: _base(d, lambda x: torch.add(x[:-1], 1, out=x[1:])))
add("overlap", "shifted_neg_out", lambda d: _base(d, lambda x: torch.neg(x[:-1], out=x[1:])))
add("overlap", "shifted_copy_", lambda d: _base(d, lambda x: x[1:].copy_(x[:-1])))
add("overlap", "shifted_clamp_tensor", lambda d: _base(d, lambda x: x[1:].clamp_(min=x[:-1])))
add("overlap", "shifted_where_out", lambda d: _base(d, lambda x: torch.where(x[:-1] > 0, x[:-1], 0.0, out=x[1:])))
add("overlap", "transpose_add_", lambda d: _base2(d, lambda x: x.add_(x.t())))
add("overlap", "row_add_", lambda d: _base2(d, lambda x: x.add_(x[0])))
add("overlap", "column_mul_", lambda d: _base2(d, lambda x: x[:, 1:].mul_(x[:, :-1])))
add("overlap", "full_add_", lambda d: _base2(d, lambda x: x.add_(x)))
add("overlap", "full_add_out", lambda d: _base2(d, lambda x: torch.add(x, x, out=x)))
add("overlap", "disjoint_halves", lambda d: _base(d, lambda x: x[:3].add_(x[3:])))
add("overlap", "expanded_add_", lambda d: t(3, d=d).expand(2, 3).add_(1))
add("overlap", "expanded_copy_", lambda d: t(3, d=d).expand(2, 3).copy_(t(2, 3, d=d)))
add("overlap", "expanded_mul_out", lambda d: torch.mul(t(2, 3, d=d), 2, out=t(3, d=d).expand(2, 3)))
add("overlap", "index_add__self_source", lambda d: _base2(d, lambda x: x.index_add_(0, i([0, 1, 2], d=d), x)))
add("overlap", "index_copy__self_source", lambda d: _base2(d, lambda x: x.index_copy_(0, i([2, 1, 0], d=d), x)))
add("overlap", "scatter__self_source", lambda d: _base2(d, lambda x: x.scatter_(0, i([[2, 1, 0]], d=d), x)))
add("overlap", "masked_scatter__self", lambda d: _base(d, lambda x: x.masked_scatter_(x > 0, x)))
add("overlap", "cat_out_is_input", lambda d: _base(d, lambda x: torch.cat([x[:3], x[3:]], out=x)))
add("overlap", "gather_out_is_input", lambda d: _base(d, lambda x: torch.gather(x, 0, i([1, 0, 2, 3, 4, 5], d=d), out=x)))
add("overlap", "index_select_out_is_input", lambda d: _base(d, lambda x: torch.index_select(x, 0, i([1, 0, 2, 3, 4, 5], d=d), out=x)))
add("overlap", "mm_out_is_input", lambda d: _base2(d, lambda x: torch.mm(x, t(3, 3, d=d), out=x)))
add("overlap", "unfold_add_", lambda d: _base(d, lambda x: x.unfold(0, 2, 1).add_(1)))

# ---- views: writes through views whose elements share memory ----------------


def _expanded(d, fn, shape=(3,), to=(2, 3)):
    x = t(*shape, d=d)
    fn(x.expand(*to))
    return x


add("views", "expanded_fill_", lambda d: _expanded(d, lambda v: v.fill_(2.0)))
add("views", "expanded_fill__tensor", lambda d: _expanded(d, lambda v: v.fill_(torch.tensor(2.0).to(d))))
add("views", "expanded_zero_", lambda d: _expanded(d, lambda v: v.zero_()))
add("views", "expanded_masked_fill_", lambda d: _expanded(d, lambda v: v.masked_fill_(t(2, 3, d=d) > 0, 9.0)))
add("views", "expanded_masked_fill__row_mask", lambda d: _expanded(d, lambda v: v.masked_fill_(t(3, d=d) > 0, 9.0)))
add("views", "expanded_index_put_", lambda d: _expanded(d, lambda v: v.index_put_((i([0, 1], d=d), i([1, 2], d=d)), t(2, d=d))))
add("views", "expanded_index_put__accumulate", lambda d: _expanded(d, lambda v: v.index_put_((i([0, 1], d=d), i([1, 2], d=d)), t(2, d=d), accumulate=True)))
add("views", "expanded_setitem", lambda d: _expanded(d, lambda v: v.__setitem__((i([0], d=d), i([2], d=d)), 5.0)))
add("views", "expanded_index_fill_", lambda d: _expanded(d, lambda v: v.index_fill_(1, i([0], d=d), 4.0)))
add("views", "expanded_scalar_zero_", lambda d: _expanded(d, lambda v: v.zero_(), shape=(1,), to=(5,)))
add("views", "unfold_fill_", lambda d: _expanded(d, lambda v: v.unfold(0, 2, 1).fill_(3.0), shape=(5,), to=(5,)))
add("views", "as_strided_overlapping_zero_", lambda d: _expanded(d, lambda v: v.as_strided((3, 3), (1, 1)).zero_(), shape=(6,), to=(6,)))
add("views", "strided_fill_", lambda d: _expanded(d, lambda v: v[::2].fill_(7.0), shape=(6,), to=(6,)))
add("views", "transposed_fill_", lambda d: _expanded(d, lambda v: v.t().fill_(7.0), shape=(2, 3), to=(2, 3)))
add("views", "diagonal_fill_", lambda d: _expanded(d, lambda v: v.diagonal().fill_(7.0), shape=(3, 3), to=(3, 3)))
add("views", "diagonal_add_", lambda d: _expanded(d, lambda v: v.diagonal().add_(1.0), shape=(3, 3), to=(3, 3)))
add("views", "expanded_add_", lambda d: _expanded(d, lambda v: v.add_(1.0)))
add("views", "expanded_clamp_", lambda d: _expanded(d, lambda v: v.clamp_(0.0)))
add("views", "expanded_uniform_like_copy_", lambda d: _expanded(d, lambda v: v.copy_(t(3, d=d))))
add("views", "expanded_sum_reads", lambda d: t(3, d=d).expand(4, 3).sum(0))
add("views", "expanded_mm_reads", lambda d: torch.mm(t(3, 1, d=d).expand(3, 4), t(4, 2, d=d)))
add("views", "expanded_bool_fill_", lambda d: _expanded(d, lambda v: v.bool().expand(2, 3).fill_(True)))

# ---- out= -------------------------------------------------------------------


def _out(d, fn, *shape, dtype=torch.float32):
    out = t(*shape, d=d, dtype=dtype)
    r = fn(out)
    return r, out


add("out", "add_into_smaller", lambda d: _out(d, lambda o: torch.add(t(2, 3, d=d), 1, out=o), 2))
add("out", "add_into_larger", lambda d: _out(d, lambda o: torch.add(t(2, 3, d=d), 1, out=o), 4, 5))
add("out", "add_into_empty", lambda d: _out(d, lambda o: torch.add(t(2, 3, d=d), 1, out=o), 0))
add("out", "mul_broadcast_into_smaller", lambda d: _out(d, lambda o: torch.mul(t(2, 1, d=d), t(3, d=d), out=o), 3))
add("out", "mm_into_smaller", lambda d: _out(d, lambda o: torch.mm(t(2, 3, d=d), t(3, 4, d=d), out=o), 2, 2))
add("out", "mm_into_int", lambda d: _out(d, lambda o: torch.mm(t(2, 3, d=d), t(3, 4, d=d), out=o), 2, 4, dtype=INT))
add("out", "sum_dim_into_smaller", lambda d: _out(d, lambda o: torch.sum(t(4, 3, d=d), 0, out=o), 1))
add("out", "sum_into_int", lambda d: _out(d, lambda o: torch.sum(t(4, 3, d=d), out=o), 1, dtype=INT))
add("out", "cat_into_smaller", lambda d: _out(d, lambda o: torch.cat([t(2, 2, d=d), t(1, 2, d=d)], out=o), 2))
add("out", "cumsum_into_smaller", lambda d: _out(d, lambda o: torch.cumsum(t(5, d=d), 0, out=o), 3))
add("out", "clamp_into_smaller", lambda d: _out(d, lambda o: torch.clamp(t(5, d=d), 0, out=o), 2))
add("out", "where_into_smaller", lambda d: _out(d, lambda o: torch.where(t(4, d=d) > 0, t(4, d=d), 0.0, out=o), 2))
add("out", "matmul_into_smaller", lambda d: _out(d, lambda o: torch.matmul(t(2, 3, d=d), t(3, 4, d=d), out=o), 3))
add("out", "add_float_into_int", lambda d: _out(d, lambda o: torch.add(t(4, d=d), t(4, d=d), out=o), 4, dtype=INT))
add("out", "add_int_into_float", lambda d: _out(d, lambda o: torch.add(t(4, d=d, dtype=INT), 1, out=o), 4))
add("out", "add_into_bool", lambda d: _out(d, lambda o: torch.add(t(4, d=d, dtype=INT), 1, out=o), 4, dtype=torch.bool))
add("out", "eq_into_float", lambda d: _out(d, lambda o: torch.eq(t(4, d=d), 0.5, out=o), 4))
add("out", "eq_into_smaller_int", lambda d: _out(d, lambda o: torch.eq(t(4, d=d), 0.5, out=o), 2, dtype=INT))
add("out", "argmax_into_float", lambda d: _out(d, lambda o: torch.argmax(t(4, d=d), out=o), 1))
add("out", "neg_into_noncontiguous", lambda d: _out(d, lambda o: torch.neg(t(2, 3, d=d), out=o.t()), 3, 2))
add("out", "neg_into_noncontiguous_wrong_shape", lambda d: _out(d, lambda o: torch.neg(t(2, 3, d=d), out=o[::2]), 8))
add("out", "exp_into_view_of_larger", lambda d: _out(d, lambda o: torch.exp(t(2, 2, d=d), out=o[1]), 3, 4))
add("out", "max_dim_into_smaller", lambda d: (lambda v, ix: (torch.max(t(3, 4, d=d), 1, out=(v, ix)), v, ix))(t(1, d=d), i([0], d=d)))
add("out", "max_dim_indices_float", lambda d: (lambda v, ix: torch.max(t(3, 4, d=d), 1, out=(v, ix)))(t(3, d=d), t(3, d=d)))
add("out", "topk_into_smaller", lambda d: (lambda v, ix: (torch.topk(t(5, d=d), 2, out=(v, ix)), v, ix))(t(1, d=d), i([0], d=d)))
add("out", "sort_into_larger", lambda d: (lambda v, ix: (torch.sort(t(5, d=d), out=(v, ix)), v, ix))(t(9, d=d), i([0] * 9, d=d)))
add("out", "mean_into_f64", lambda d: _out(d, lambda o: torch.mean(t(4, d=d), 0, out=o), 1, dtype=F64))
add("out", "index_select_into_smaller", lambda d: _out(d, lambda o: torch.index_select(t(5, d=d), 0, i([4, 0, 2], d=d), out=o), 1))
add("out", "pow_into_int", lambda d: _out(d, lambda o: torch.pow(t(4, d=d, dtype=INT), 0.5, out=o), 4, dtype=INT))
add("out", "sigmoid_into_int", lambda d: _out(d, lambda o: torch.sigmoid(t(4, d=d), out=o), 4, dtype=INT))
add("out", "zeros_into_larger", lambda d: _out(d, lambda o: torch.zeros(2, out=o), 5))
add("out", "arange_into_smaller", lambda d: _out(d, lambda o: torch.arange(5, out=o), 2))
add("out", "linspace_into_int", lambda d: _out(d, lambda o: torch.linspace(0, 1, 3, out=o), 3, dtype=INT))
add("out", "bmm_out_f64", lambda d: _out(d, lambda o: torch.bmm(t(1, 2, 2, d=d), t(1, 2, 2, d=d), out=o), 1, 2, 2, dtype=F64))

# ---- indices: out-of-range values (checks on device data) --------------------
# Only mistakes CPU raises for. Reading them on device is data-dependent;
# they run isolated in case a bad read takes the process down.

add("indices", "getitem_int", lambda d: t(3, d=d)[5])
add("indices", "getitem_negative_int", lambda d: t(3, d=d)[-4])
add("indices", "select_out_of_range", lambda d: t(3, 4, d=d).select(1, 4))
add("indices", "narrow_start_out_of_range", lambda d: t(3, d=d).narrow(0, 5, 0))
add("indices", "setitem_int", lambda d: t(3, d=d).__setitem__(3, 1.0))
add("indices", "getitem_tensor", lambda d: t(3, d=d)[i([5], d=d)], isolate=True)
add("indices", "getitem_negative_tensor", lambda d: t(3, d=d)[i([-4], d=d)], isolate=True)
add("indices", "setitem_tensor", lambda d: t(3, d=d).__setitem__(i([3], d=d), 1.0), isolate=True)
add("indices", "index_put__tensor", lambda d: t(3, d=d).index_put_((i([7], d=d),), t(1, d=d)), isolate=True)
add("indices", "index_select", lambda d: t(4, d=d).index_select(0, i([4], d=d)), isolate=True)
add("indices", "index_select_negative", lambda d: t(4, d=d).index_select(0, i([-1], d=d)), isolate=True)
add("indices", "gather", lambda d: t(2, 3, d=d).gather(1, i([[0, 3]], d=d)), isolate=True)
add("indices", "gather_negative", lambda d: t(2, 3, d=d).gather(1, i([[0, -1]], d=d)), isolate=True)
add("indices", "scatter_", lambda d: t(2, 3, d=d).scatter_(1, i([[5]], d=d), 1.0), isolate=True)
add("indices", "scatter_add", lambda d: t(2, 3, d=d).scatter_add(0, i([[2]], d=d), t(1, 1, d=d)), isolate=True)
add("indices", "index_add_", lambda d: t(3, d=d).index_add_(0, i([3], d=d), t(1, d=d)), isolate=True)
add("indices", "index_copy_", lambda d: t(3, d=d).index_copy_(0, i([3], d=d), t(1, d=d)), isolate=True)
add("indices", "index_fill_", lambda d: t(3, d=d).index_fill_(0, i([3], d=d), 1.0), isolate=True)
add("indices", "take", lambda d: torch.take(t(2, 3, d=d), i([6], d=d)), isolate=True)
add("indices", "put_", lambda d: t(2, 3, d=d).put_(i([6], d=d), t(1, d=d)), isolate=True)
add("indices", "embedding", lambda d: F.embedding(i([5], d=d), t(5, 2, d=d)), isolate=True)
add("indices", "embedding_negative", lambda d: F.embedding(i([-1], d=d), t(5, 2, d=d)), isolate=True)
add("indices", "nll_loss_target", lambda d: F.nll_loss(t(2, 3, d=d), i([0, 3], d=d)), isolate=True)
add("indices", "cross_entropy_target", lambda d: F.cross_entropy(t(2, 3, d=d), i([0, -2], d=d)), isolate=True)
add("indices", "one_hot", lambda d: F.one_hot(i([0, 3], d=d), 3), isolate=True)
add("indices", "one_hot_negative", lambda d: F.one_hot(i([0, -1], d=d), 3), isolate=True)
add("indices", "masked_scatter_short_source", lambda d: t(4, d=d).masked_scatter_(ib([True] * 4, d=d), t(2, d=d)), isolate=True)
add("indices", "huge_empty", lambda d: torch.empty(1 << 62, device=d), isolate=True)
add("indices", "huge_zeros_overflow", lambda d: torch.zeros(1 << 40, 1 << 40, device=d), isolate=True)


# ---- running a case ---------------------------------------------------------


def _to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (list, tuple)):
        return [_to_cpu(v) for v in x]
    return x


def _run(case, device):
    """("error", exception) or ("result", value on the CPU)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            value = case.fn(device)
            if device != "cpu":
                # Device-side errors (index checks) surface at the latest here,
                # as CUDA's do at a synchronize.
                torch.tpu.synchronize()
            return "result", _to_cpu(value)
        except Exception as e:  # noqa: BLE001 - any error is an outcome
            return "error", e


_REFERENCE = {}


def reference(case):
    if case.id not in _REFERENCE:
        _REFERENCE[case.id] = _run(case, "cpu")
    return _REFERENCE[case.id]


def _same(got, want):
    try:
        torch.testing.assert_close(got, want, equal_nan=True, check_dtype=True, rtol=1e-5, atol=1e-5)
        return None
    except Exception as e:  # noqa: BLE001
        return str(e).strip().splitlines()[0:6]


def _usable():
    x = torch.tensor([1.0, 2.0])
    try:
        return torch.equal((x.to("tpu") * 3 + 1).cpu(), x * 3 + 1)
    except Exception:  # noqa: BLE001
        return False


def outcome(case, mode):
    """(outcome, detail): same-error, same-result or mismatch, in this process."""
    kind, want = reference(case)
    if case.expect is not None:
        kind, want = "error", case.expect("(PyTorch raises for this)")
    with torch_tpu.eager_mode(mode):
        got_kind, got = _run(case, "tpu")
    if not _usable():
        return "mismatch", "the process is unusable after this case"
    if kind == "error" and got_kind == "error":
        if type(got) is not type(want):
            return "mismatch", f"CPU raised {type(want).__name__}: {want}; tpu raised {type(got).__name__}: {got}"
        leaked = [p for p in INTERNALS if p in str(got) and p not in str(want)]
        if leaked:
            return "mismatch", f"message shows internals {leaked}: {got}"
        return "same-error", ""
    if kind == "error":
        return "mismatch", f"CPU raised {type(want).__name__}: {want}; tpu returned {got}"
    if got_kind == "error":
        return "mismatch", f"CPU returned a result; tpu raised {type(got).__name__}: {got}"
    diff = _same(got, want)
    return ("mismatch", f"results differ: {diff}") if diff else ("same-result", "")


def outcome_isolated(case):
    """{mode: (outcome, detail)} for `case`, run in a child process."""
    code = ("import json, sys; sys.path.insert(0, %r); import bad_input_cases as b; "
            "c = b.by_id()[%r]; print('\\n' + json.dumps({m: b.outcome(c, m) for m in b.MODES}))"
            % (os.path.dirname(os.path.abspath(__file__)), case.id))
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return {m: ("mismatch", "the case hung (over 300 s)") for m in MODES}
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        why = f"the process died (exit code {p.returncode}): {p.stderr.strip()[-500:]}"
        return {m: ("mismatch", why) for m in MODES}
    return {m: tuple(v) for m, v in json.loads(lines[-1]).items()}


def by_id():
    return {c.id: c for c in CASES}


def main(families):
    counts, mismatches = {}, []
    for case in CASES:
        if families and case.family not in families:
            continue
        results = outcome_isolated(case) if case.isolate else {m: outcome(case, m) for m in MODES}
        for mode, (result, detail) in results.items():
            counts.setdefault(case.family, {}).setdefault(result, 0)
            counts[case.family][result] += 1
            if result == "mismatch":
                mismatches.append(f"{case.id} [{mode}]: {detail}")
    for line in mismatches:
        print(line[:600])
    total = {}
    for family, c in counts.items():
        print(f"{family:10s} " + "  ".join(f"{k}={v}" for k, v in sorted(c.items())))
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
    print(f"{'total':10s} " + "  ".join(f"{k}={v}" for k, v in sorted(total.items())))
    return 1 if total.get("mismatch") else 0


if __name__ == "__main__":
    sys.exit(main(set(sys.argv[1:])))
