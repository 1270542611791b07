// The operators behind torch.tpu.ops (the reference's `torch.ops.tpu.*`)
// and aten::_grouped_mm on tpu. Each is a composition of ATen ops whose
// lowerings already exist, registered as CompositeImplicitAutograd (so
// autograd derives their backward) or, for _grouped_mm, under PrivateUse1
// below PyTorch's own derivative formula:
// - _max_pool{1,2,3}d: max pooling that returns only the values (the
//   indices of the lowering are dead, so a fused program drops them), and
//   _max_pool{1,2,3}d_backward, which finds the maxima again from the input;
// - _ragged_dot / _ragged_dot_weight_grad (mixture of experts): rows split
//   into consecutive groups, each multiplied by its own matrix. The groups
//   are a 0/1 mask built on the device from the sizes, so nothing waits for
//   the host and the shapes never depend on the data (each group's product
//   is computed for every row and the mask selects: g times the flops of
//   one matmul, the price of static shapes without a grouped-gemm kernel).
#include <ATen/ATen.h>
#include <ATen/native/GroupedMMUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "dispatch.h"
#include "op_list.h"

namespace torch_tpu::aten {
namespace {

using IntList = c10::IntArrayRef;

void check_window(const char* op, size_t n, IntList kernel, IntList stride, IntList padding,
                  IntList dilation) {
  for (auto [name, v] : {std::pair{"kernel_size", kernel}, {"stride", stride},
                         {"padding", padding}, {"dilation", dilation}})
    TORCH_CHECK_VALUE(v.size() == n, op, ": ", name, " needs one value per spatial dim (", n,
                      "), got ", v.size());
}

at::Tensor max_pool(size_t n, const at::Tensor& x, IntList k, IntList s, IntList p, IntList d,
                    bool ceil) {
  static const char* names[] = {"", "_max_pool1d", "_max_pool2d", "_max_pool3d"};
  check_window(names[n], n, k, s, p, d);
  if (n == 3) return std::get<0>(at::max_pool3d_with_indices(x, k, s, p, d, ceil));
  if (n == 2) return std::get<0>(at::max_pool2d_with_indices(x, k, s, p, d, ceil));
  // 1d runs as 2d with a height of one.
  auto y = std::get<0>(at::max_pool2d_with_indices(x.unsqueeze(-2), {1, k[0]}, {1, s[0]},
                                                   {0, p[0]}, {1, d[0]}, ceil));
  return y.squeeze(-2);
}

at::Tensor max_pool_backward(size_t n, const at::Tensor& grad, const at::Tensor& x, IntList k,
                             IntList s, IntList p, IntList d, bool ceil) {
  static const char* names[] = {"", "_max_pool1d_backward", "_max_pool2d_backward",
                                "_max_pool3d_backward"};
  check_window(names[n], n, k, s, p, d);
  if (n == 3) {
    auto idx = std::get<1>(at::max_pool3d_with_indices(x, k, s, p, d, ceil));
    return at::max_pool3d_with_indices_backward(grad, x, k, s, p, d, ceil, idx);
  }
  if (n == 2) {
    auto idx = std::get<1>(at::max_pool2d_with_indices(x, k, s, p, d, ceil));
    return at::max_pool2d_with_indices_backward(grad, x, k, s, p, d, ceil, idx);
  }
  at::Tensor x2 = x.unsqueeze(-2), g2 = grad.unsqueeze(-2);
  std::vector<int64_t> k2{1, k[0]}, s2{1, s[0]}, p2{0, p[0]}, d2{1, d[0]};
  auto idx = std::get<1>(at::max_pool2d_with_indices(x2, k2, s2, p2, d2, ceil));
  return at::max_pool2d_with_indices_backward(g2, x2, k2, s2, p2, d2, ceil, idx).squeeze(-2);
}

// (groups, length): whether position j belongs to group i, the groups being
// consecutive runs that end at `ends` (positions past the last end: none).
at::Tensor group_mask(const at::Tensor& ends, int64_t length) {
  at::Tensor e = ends.to(at::kLong);
  at::Tensor pos = at::arange(length, e.options());
  at::Tensor group_of = pos.unsqueeze(1).ge(e.unsqueeze(0)).sum(1);  // (length,)
  at::Tensor groups = at::arange(e.size(0), e.options());
  return groups.unsqueeze(1).eq(group_of.unsqueeze(0));
}

// Sums `per_group` (g, ...) over groups where `keep` (broadcastable) holds:
// a select, not a multiply, so another group's inf or NaN never leaks in.
at::Tensor select_sum(const at::Tensor& keep, const at::Tensor& per_group) {
  return at::where(keep, per_group, at::zeros({}, per_group.options())).sum(0);
}

void check_ragged(const char* op, const at::Tensor& lhs, const at::Tensor& other,
                  const at::Tensor& group_sizes, bool other_is_rhs) {
  TORCH_CHECK_VALUE(lhs.dim() == 2, op, ": lhs must be 2-D (m, k), got shape ", lhs.sizes());
  TORCH_CHECK_VALUE(group_sizes.dim() == 1, op, ": group_sizes must be 1-D (g,), got shape ",
                    group_sizes.sizes());
  TORCH_CHECK_TYPE(!at::isFloatingType(group_sizes.scalar_type()) &&
                       !at::isComplexType(group_sizes.scalar_type()) &&
                       group_sizes.scalar_type() != at::kBool,
                   op, ": group_sizes must be an integer tensor, got ",
                   group_sizes.scalar_type());
  if (other_is_rhs) {
    TORCH_CHECK_VALUE(other.dim() == 3, op, ": rhs must be 3-D (g, k, n), got shape ",
                      other.sizes());
    TORCH_CHECK_VALUE(other.size(0) == group_sizes.size(0), op, ": rhs has ", other.size(0),
                      " groups but group_sizes has ", group_sizes.size(0));
    TORCH_CHECK_VALUE(other.size(1) == lhs.size(1), op, ": lhs is (m, ", lhs.size(1),
                      ") but rhs is (g, ", other.size(1), ", n): k must match");
  } else {
    TORCH_CHECK_VALUE(other.dim() == 2 && other.size(0) == lhs.size(0), op,
                      ": grad_output must be 2-D with lhs's ", lhs.size(0), " rows, got shape ",
                      other.sizes());
  }
}

at::Tensor ragged_dot(const at::Tensor& lhs, const at::Tensor& rhs, const at::Tensor& sizes) {
  check_ragged("ragged_dot", lhs, rhs, sizes, true);
  at::Tensor keep = group_mask(at::cumsum(sizes, 0), lhs.size(0)).unsqueeze(2);  // (g, m, 1)
  return select_sum(keep, at::matmul(lhs.unsqueeze(0), rhs));
}

at::Tensor& ragged_dot_out(const at::Tensor& lhs, const at::Tensor& rhs, const at::Tensor& sizes,
                           at::Tensor& out) {
  at::Tensor r = ragged_dot(lhs, rhs, sizes);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}

at::Tensor ragged_dot_weight_grad(const at::Tensor& lhs, const at::Tensor& grad,
                                  const at::Tensor& sizes) {
  check_ragged("ragged_dot_weight_grad", lhs, grad, sizes, false);
  at::Tensor keep = group_mask(at::cumsum(sizes, 0), lhs.size(0)).unsqueeze(2);  // (g, m, 1)
  at::Tensor rows = at::where(keep, lhs.unsqueeze(0), at::zeros({}, lhs.options()));
  return at::matmul(rows.transpose(1, 2), grad.unsqueeze(0));  // (g, k, n)
}

// torch._grouped_mm, every form, without reading `offs` on the host (the
// generic fallback slices per group after copying offs to the CPU).
at::Tensor grouped_mm(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& offs,
                      const std::optional<at::Tensor>& bias, std::optional<at::ScalarType> out_dtype) {
  at::native::_grouped_mm_validate_inputs(a, b, offs, bias, out_dtype);
  at::ScalarType dtype = at::native::_resolve_grouped_mm_out_dtype(a, b, out_dtype);
  at::Tensor zero = at::zeros({}, a.options());
  at::Tensor out;
  if (a.dim() == 3 && b.dim() == 3) {
    out = at::bmm(a, b);
  } else if (a.dim() == 2 && b.dim() == 3) {  // rows of a in groups
    TORCH_CHECK_VALUE(offs->size(0) == b.size(0), "_grouped_mm: offs has ", offs->size(0),
                      " groups but mat2 has ", b.size(0));
    out = select_sum(group_mask(*offs, a.size(0)).unsqueeze(2), at::matmul(a.unsqueeze(0), b));
  } else if (a.dim() == 3 && b.dim() == 2) {  // columns of b in groups
    TORCH_CHECK_VALUE(offs->size(0) == a.size(0), "_grouped_mm: offs has ", offs->size(0),
                      " groups but self has ", a.size(0));
    out = select_sum(group_mask(*offs, b.size(1)).unsqueeze(1), at::matmul(a, b));
  } else {  // the contraction dim in groups: one product per group
    TORCH_CHECK_VALUE(a.size(1) == b.size(0), "_grouped_mm: self is (m, ", a.size(1),
                      ") but mat2 is (", b.size(0), ", n): the contraction dims must match");
    at::Tensor keep = group_mask(*offs, a.size(1)).unsqueeze(1);  // (g, 1, k)
    out = at::matmul(at::where(keep, a.unsqueeze(0), zero), b);
  }
  return out.to(dtype);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tpu, m) {
  m.def("_max_pool1d(Tensor input, int[] kernel_size, int[] stride, int[] padding, "
        "int[] dilation, bool ceil_mode) -> Tensor");
  m.def("_max_pool1d_backward(Tensor grad_output, Tensor input, int[] kernel_size, "
        "int[] stride, int[] padding, int[] dilation, bool ceil_mode) -> Tensor");
  m.def("_max_pool2d(Tensor input, int[] kernel_size, int[] stride, int[] padding, "
        "int[] dilation, bool ceil_mode) -> Tensor");
  m.def("_max_pool2d_backward(Tensor grad_output, Tensor input, int[] kernel_size, "
        "int[] stride, int[] padding, int[] dilation, bool ceil_mode) -> Tensor");
  m.def("_max_pool3d(Tensor input, int[] kernel_size, int[] stride, int[] padding, "
        "int[] dilation, bool ceil_mode) -> Tensor");
  m.def("_max_pool3d_backward(Tensor grad_output, Tensor input, int[] kernel_size, "
        "int[] stride, int[] padding, int[] dilation, bool ceil_mode) -> Tensor");
  m.def("_optimization_barrier(Tensor[] inputs) -> Tensor[]");
  // Bucketed compilation (torch_tpu/dynamic_shapes.py): dimension `dim` of
  // x holds `size` valid elements / becomes static again. Identities outside
  // a tpu program.
  m.def("_bounded_dim(Tensor x, Tensor size, int dim) -> Tensor");
  m.def("_static_dim(Tensor x, int dim) -> Tensor");
  m.def("_ragged_dot(Tensor lhs, Tensor rhs, Tensor group_sizes) -> Tensor");
  m.def("_ragged_dot.out(Tensor lhs, Tensor rhs, Tensor group_sizes, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("_ragged_dot_weight_grad(Tensor lhs, Tensor grad_output, Tensor group_sizes) -> Tensor");
}

TORCH_LIBRARY_IMPL(tpu, CompositeImplicitAutograd, m) {
  m.impl("_max_pool1d", [](const at::Tensor& x, IntList k, IntList s, IntList p, IntList d, bool c) {
    return max_pool(1, x, k, s, p, d, c);
  });
  m.impl("_max_pool2d", [](const at::Tensor& x, IntList k, IntList s, IntList p, IntList d, bool c) {
    return max_pool(2, x, k, s, p, d, c);
  });
  m.impl("_max_pool3d", [](const at::Tensor& x, IntList k, IntList s, IntList p, IntList d, bool c) {
    return max_pool(3, x, k, s, p, d, c);
  });
  m.impl("_max_pool1d_backward", [](const at::Tensor& g, const at::Tensor& x, IntList k, IntList s,
                                    IntList p, IntList d, bool c) {
    return max_pool_backward(1, g, x, k, s, p, d, c);
  });
  m.impl("_max_pool2d_backward", [](const at::Tensor& g, const at::Tensor& x, IntList k, IntList s,
                                    IntList p, IntList d, bool c) {
    return max_pool_backward(2, g, x, k, s, p, d, c);
  });
  m.impl("_max_pool3d_backward", [](const at::Tensor& g, const at::Tensor& x, IntList k, IntList s,
                                    IntList p, IntList d, bool c) {
    return max_pool_backward(3, g, x, k, s, p, d, c);
  });
  m.impl("_ragged_dot", &ragged_dot);
  m.impl("_ragged_dot.out", &ragged_dot_out);
  m.impl("_ragged_dot_weight_grad", &ragged_dot_weight_grad);
}

// The barrier is an identity everywhere but in a tpu program (its lowering,
// csrc/lowering/misc.cc, served through the dispatch registration below).
static std::vector<at::Tensor> barrier_copies(at::TensorList inputs) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : inputs) out.push_back(t.clone());
  return out;
}

static at::Tensor bounded_dim_copy(const at::Tensor& x, const at::Tensor&, int64_t) {
  return x.clone();
}
static at::Tensor static_dim_copy(const at::Tensor& x, int64_t) { return x.clone(); }

TORCH_LIBRARY_IMPL(tpu, CPU, m) {
  m.impl("_optimization_barrier", &barrier_copies);
  m.impl("_bounded_dim", &bounded_dim_copy);
  m.impl("_static_dim", &static_dim_copy);
}

TORCH_LIBRARY_IMPL(tpu, Meta, m) {
  m.impl("_optimization_barrier", &barrier_copies);
  m.impl("_bounded_dim", &bounded_dim_copy);
  m.impl("_static_dim", &static_dim_copy);
}

TORCH_LIBRARY_IMPL(tpu, PrivateUse1, m) {
  register_lowered_ops(m, "tpu");
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  KernelList(m, "composite").impl("_grouped_mm", &grouped_mm);
}

}  // namespace torch_tpu::aten
