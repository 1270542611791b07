// Operators whose result shape depends on tensor values: nonzero,
// masked_select, boolean-mask indexing, repeat_interleave and bincount. Each
// reads the values that decide the shape to the host (a sync), computes there what
// fixes the shape, and leaves the data movement to the device lowerings
// (`_unsafe_index`, `_unsafe_index_put`). None of these names may also be a
// lowering in the registry, or the generic registration would claim it too.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "op_list.h"
#include "tensor_io.h"

namespace torch_tpu::aten {

namespace {

using IndexList = c10::List<std::optional<at::Tensor>>;

bool is_mask(const at::Tensor& t) {
  return t.scalar_type() == at::kBool || t.scalar_type() == at::kByte;
}

at::Tensor on_device(const at::Tensor& t, const at::Tensor& like) {
  return t.device() == like.device() ? t : t.to(like.device());
}

// Appends the long indices of a boolean mask that covers dims [dim, ...) of
// self: one index tensor per mask dim, from the mask's true places.
void append_mask(const at::Tensor& self, const at::Tensor& mask, int64_t dim, IndexList& out) {
  TORCH_CHECK_NOT_IMPLEMENTED(mask.dim() > 0, "tpu: indexing with a 0-dim boolean mask");
  for (int64_t k = 0; k < mask.dim(); ++k) {
    TORCH_CHECK_INDEX(dim + k < self.dim() && mask.size(k) == self.size(dim + k),
                      "The shape of the mask ", mask.sizes(), " at index ", k,
                      " does not match the shape of the indexed tensor ", self.sizes(),
                      " at index ", dim + k);
  }
  at::Tensor host = mask.device().is_cpu() ? mask : to_cpu(mask, "boolean-mask indexing");
  at::Tensor places = host.to(at::kBool).nonzero();  // [count, mask.dim()]
  for (int64_t k = 0; k < mask.dim(); ++k)
    out.push_back(on_device(places.select(1, k).contiguous(), self));
}

// Index tensors on self's device, boolean masks replaced by long indices.
IndexList device_indices(const at::Tensor& self, const IndexList& indices) {
  IndexList out;
  int64_t dim = 0;
  for (const std::optional<at::Tensor>& i : indices) {
    if (!i.has_value() || !i->defined()) {
      out.push_back(std::nullopt);
      ++dim;
    } else if (is_mask(*i)) {
      append_mask(self, *i, dim, out);
      dim += i->dim();
    } else {
      out.push_back(on_device(*i, self));
      ++dim;
    }
  }
  return out;
}

at::Tensor index_tensor(const at::Tensor& self, const IndexList& indices) {
  return at::_unsafe_index(self, device_indices(self, indices));
}

// An out= tensor may not overlap itself or what the op reads (CPU's checks).
void check_out_overlap(const at::Tensor& out, std::initializer_list<const at::Tensor*> inputs) {
  at::assert_no_internal_overlap(out);
  for (const at::Tensor* in : inputs)
    if (in->defined()) at::assert_no_overlap(out, *in);
}

at::Tensor& index_out(const at::Tensor& self, const IndexList& indices, at::Tensor& out) {
  check_out_overlap(out, {&self});
  for (size_t k = 0; k < indices.size(); ++k) {
    std::optional<at::Tensor> i = indices.get(k);
    if (i.has_value()) check_out_overlap(out, {&*i});
  }
  at::Tensor r = index_tensor(self, indices);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

// index_put_ into a view whose elements share storage (an expanded view):
// the indexed elements' storage positions, read through a view of
// positions 0, 1, ... with self's strides, index a flat view of the storage
// self spans. Each indexed element writes (or adds to) its storage element,
// as on CPU, where duplicates accumulate.
void index_put_overlapping(at::Tensor& self, const IndexList& indices, const at::Tensor& values,
                           bool accumulate) {
  int64_t span = 1;
  for (int64_t d = 0; d < self.dim(); ++d) span += (self.size(d) - 1) * self.stride(d);
  at::Tensor positions = at::arange(span, self.options().dtype(at::kLong))
                             .as_strided(self.sizes(), self.strides(), 0);
  IndexList at_positions;
  at_positions.push_back(at::_unsafe_index(positions, indices));
  at::Tensor flat = self.as_strided({span}, {1}, self.storage_offset());
  flat.index_put_(at_positions, values, accumulate);
}

// The functional `_unsafe_index_put` lowering computes the result; it is
// written back into self (a view of a larger storage updates that storage).
at::Tensor& index_put_impl_(at::Tensor& self, const IndexList& indices, const at::Tensor& values,
                            bool accumulate, bool unsafe) {
  at::Tensor v = values.dim() == 0 ? values : on_device(values, self);
  IndexList on_self = device_indices(self, indices);
  if (self.numel() > 0 && at::has_internal_overlap(self) == at::MemOverlap::Yes)
    index_put_overlapping(self, on_self, v, accumulate);
  else
    self.copy_(at::_unsafe_index_put(self, on_self, v, accumulate));
  return self;
}

at::Tensor masked_select_tensor(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool,
              "masked_select: expected BoolTensor for mask, got ", mask.scalar_type());
  std::vector<int64_t> shape = at::infer_size(self.sizes(), mask.sizes());
  if (shape.empty()) shape.push_back(1);  // 0-dim: one element, selected or not
  IndexList indices;
  indices.push_back(mask.expand(shape));
  return index_tensor(self.expand(shape), indices);
}

at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  check_out_overlap(out, {&self, &mask});
  at::Tensor r = masked_select_tensor(self, mask);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

// nonzero and friends: computed on the host and uploaded (the result is
// small next to the mask, and its size is needed first anyway).
at::Tensor nonzero_tensor(const at::Tensor& self) {
  return to_cpu(self, "aten::nonzero").nonzero().to(self.device());
}

// As CPU's: an out= of the result's shape keeps its strides; any other is
// resized to [N, ndim] with strides (1, N), column-major as the result is.
at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  at::Tensor r = nonzero_tensor(self);
  if (out.sizes() != r.sizes()) {
    at::native::resize_output(out, r.sizes());
    out.as_strided_(r.sizes(), {1, r.size(0)});
  }
  out.copy_(r);
  return out;
}

at::Tensor nonzero_static_tensor(const at::Tensor& self, c10::SymInt size, int64_t fill_value) {
  return at::nonzero_static(to_cpu(self, "aten::nonzero_static"), size.expect_int(), fill_value).to(self.device());
}

at::Tensor repeat_interleave_tensor(const at::Tensor& repeats, std::optional<c10::SymInt> output_size) {
  std::optional<int64_t> n;
  if (output_size) n = output_size->expect_int();
  return at::repeat_interleave(to_cpu(repeats, "aten::repeat_interleave"), n).to(repeats.device());
}


// bincount: the length (largest value + 1, at least minlength) needs the
// values on the host; the counting is a device scatter-add.
at::Tensor bincount_tensor(const at::Tensor& self, const std::optional<at::Tensor>& weights,
                           c10::SymInt minlength_arg) {
  int64_t minlength = minlength_arg.expect_int();
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  TORCH_CHECK(self.dim() == 1 && at::isIntegralType(self.scalar_type(), /*includeBool=*/false),
              "bincount only supports 1-d non-negative integral inputs.");
  bool weighted = weights.has_value() && weights->defined();
  TORCH_CHECK(!weighted || (weights->dim() == 1 && weights->size(0) == self.size(0)),
              "weights should be 1-d and have the same length as input");
  int64_t n = minlength;
  if (self.numel() > 0) {
    at::Tensor host = to_cpu(self, "aten::bincount");
    TORCH_CHECK(host.min().item<int64_t>() >= 0,
                "bincount only supports 1-d non-negative integral inputs.");
    n = std::max(n, host.max().item<int64_t>() + 1);
  }
  // CPU counts in float for float weights, in double for any other weights.
  at::ScalarType dtype = !weighted ? at::kLong
                         : weights->scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
  at::Tensor out = at::zeros({n}, self.options().dtype(dtype));
  if (self.numel() == 0) return out;
  at::Tensor values = weighted ? on_device(*weights, self).to(dtype) : at::ones({self.numel()}, out.options());
  IndexList indices;
  // As int64: a uint8 (or bool) index would be read as a mask.
  indices.push_back(self.scalar_type() == at::kLong ? self : self.to(at::kLong));
  return at::_unsafe_index_put(out, indices, values, true);
}

// A host bool: same sizes and every element equal after type promotion (NaN
// is unequal), as on CPU. The comparison runs on the device; one bool returns.
bool equal(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(),
              "Cannot compare two tensors on different devices. Got: ", self.device(), " and ",
              other.device());
  if (!self.is_same_size(other)) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  KernelList k(m, "host-synced");
  k.impl("index.Tensor", index_tensor);
  k.impl("index.Tensor_out", index_out);
  k.impl("_index_put_impl_", index_put_impl_);
  k.impl("masked_select", masked_select_tensor);
  k.impl("masked_select.out", masked_select_out);
  k.impl("equal", equal);
  k.impl("nonzero", nonzero_tensor);
  k.impl("nonzero.out", nonzero_out);
  k.impl("nonzero_static", nonzero_static_tensor);
  k.impl("repeat_interleave.Tensor", repeat_interleave_tensor);
  k.impl("bincount", bincount_tensor);
}

}  // namespace torch_tpu::aten
