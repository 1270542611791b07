#include "strided.h"

#include <algorithm>
#include <numeric>

namespace torch_tpu::lowering {

int64_t Strided::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

bool Strided::contiguous() const {
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

namespace {

// Flat storage index of every element of the view (i64, shape view.sizes).
Value element_indices(Builder& b, const Strided& v) {
  TensorType t{ElementType::kI64, v.sizes};
  Value idx = b.full(t, static_cast<double>(v.offset));
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    if (v.sizes[d] == 1 || v.strides[d] == 0) continue;
    Value term = b.mul(b.iota(t, static_cast<int64_t>(d)), b.full(t, static_cast<double>(v.strides[d])));
    idx = b.add(idx, term);
  }
  return idx;
}

// Dims that move through memory (size > 1, stride != 0), outermost first,
// when they form a strided box: each stride divides the next outer one and
// the inner extent fits inside it.
bool box_dims(const Strided& v, std::vector<int64_t>& dims) {
  dims.clear();
  for (size_t d = 0; d < v.sizes.size(); ++d)
    if (v.sizes[d] > 1 && v.strides[d] != 0) dims.push_back(static_cast<int64_t>(d));
  std::stable_sort(dims.begin(), dims.end(),
                   [&](int64_t a, int64_t c) { return v.strides[a] > v.strides[c]; });
  for (size_t i = 0; i < dims.size(); ++i) {
    if (v.strides[dims[i]] < 0) return false;
    if (i + 1 < dims.size()) {
      int64_t outer = v.strides[dims[i]], inner = v.strides[dims[i + 1]];
      if (outer % inner != 0 || v.sizes[dims[i + 1]] * inner > outer) return false;
    }
  }
  return true;
}

}  // namespace

Value strided_read(Builder& b, Value flat, const Strided& v) {
  TensorType out{flat.dtype(), v.sizes};
  int64_t n = flat.dim(0);
  if (v.numel() == 0) return b.full(out, 0);
  if (v.contiguous()) {
    Value seg = v.offset == 0 && v.numel() == n ? flat : b.slice(flat, {v.offset}, {v.offset + v.numel()});
    return b.reshape(seg, v.sizes);
  }
  std::vector<int64_t> dims;
  if (box_dims(v, dims)) {
    if (dims.empty()) {  // a single element broadcast
      Value one = b.reshape(b.slice(flat, {v.offset}, {v.offset + 1}), {});
      return b.broadcast_in_dim(one, v.sizes, {});
    }
    int64_t s0 = v.strides[dims[0]], span = v.sizes[dims[0]] * s0;
    std::vector<int64_t> chunked{v.sizes[dims[0]]}, keep{v.sizes[dims[0]]};
    for (size_t i = 1; i < dims.size(); ++i) {
      chunked.push_back(v.strides[dims[i - 1]] / v.strides[dims[i]]);
      keep.push_back(v.sizes[dims[i]]);
    }
    // Rows of the innermost stride, unless it is 1 (no trailing unit dim to
    // make and drop).
    const bool unit_inner = v.strides[dims.back()] == 1;
    if (!unit_inner) {
      chunked.push_back(v.strides[dims.back()]);
      keep.push_back(1);
    }
    Value x;
    if (n % s0 == 0) {  // the whole storage in rows of each stride: the offset is a corner
      chunked[0] = n / s0;
      std::vector<int64_t> start(chunked.size()), limit(chunked.size());
      int64_t rest = v.offset, unit = n;
      bool fits = true;
      for (size_t i = 0; i < chunked.size(); ++i) {
        unit /= chunked[i];
        start[i] = rest / unit, rest %= unit, limit[i] = start[i] + keep[i];
        fits &= limit[i] <= chunked[i];  // else the view wraps a row: cut a span below
      }
      if (fits) x = b.slice(b.reshape(flat, chunked), start, limit);
      chunked[0] = v.sizes[dims[0]];
    }
    if (!x.valid()) {  // cut the span [offset, offset + size0*stride0) into rows
      int64_t end = std::min(n, v.offset + span);
      Value seg = b.slice(flat, {v.offset}, {end});
      if (end - v.offset < span)
        seg = b.pad(seg, b.constant(flat.dtype(), 0), {0}, {span - (end - v.offset)});
      x = b.slice(b.reshape(seg, chunked), std::vector<int64_t>(chunked.size(), 0), keep);
    }
    if (!unit_inner) {
      keep.pop_back();
      x = b.reshape(x, keep);
    }
    // x's dims are `dims` in stride order; put them in index order, then
    // broadcast into the size-1 and stride-0 positions.
    std::vector<int64_t> order(dims.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return dims[a] < dims[c]; });
    x = b.transpose(x, order);
    std::vector<int64_t> sorted_dims = dims;
    std::sort(sorted_dims.begin(), sorted_dims.end());
    return b.broadcast_in_dim(x, v.sizes, sorted_dims);
  }
  hlo::GatherDims g;
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = static_cast<int64_t>(v.sizes.size());
  return b.gather(flat, element_indices(b, v), g, {1}, out);
}

namespace {

// The dims of `v` from the largest stride to the smallest.
std::vector<int64_t> layout_order(const Strided& v) {
  std::vector<int64_t> perm(v.sizes.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int64_t a, int64_t c) { return v.strides[a] > v.strides[c]; });
  return perm;
}

}  // namespace

bool covers_densely(const Strided& v, int64_t storage_numel) {
  if (v.offset != 0 || v.numel() != storage_numel) return false;
  if (v.contiguous()) return true;
  std::vector<int64_t> perm = layout_order(v);
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(perm.size()) - 1; i >= 0; --i) {
    int64_t d = perm[i];
    if (v.sizes[d] == 1) continue;
    if (v.strides[d] != expected) return false;
    expected *= v.sizes[d];
  }
  return true;
}

Value dense_layout(Builder& b, Value value, const Strided& v, int64_t storage_numel) {
  if (!covers_densely(v, storage_numel)) return Value();
  if (v.contiguous()) return b.reshape(value, {storage_numel});  // the common case
  return b.reshape(b.transpose(value, layout_order(v)), {storage_numel});
}

Value strided_write(Builder& b, Value flat, Value value, const Strided& v) {
  int64_t n = flat.dim(0);
  if (v.numel() == 0) return flat;
  if (Value dense = dense_layout(b, value, v, n); dense.valid()) return dense;
  if (v.contiguous()) {
    Value start = b.constant_int(ElementType::kI64, v.offset);
    return b.dynamic_update_slice(flat, b.reshape(value, {v.numel()}), {start});
  }
  hlo::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  Value idx = b.reshape(element_indices(b, v), {v.numel(), 1});
  return b.scatter(flat, idx, b.reshape(value, {v.numel()}), s,
                   [](Builder&, const Values& a) { return Values{a[1]}; });
}

}  // namespace torch_tpu::lowering
