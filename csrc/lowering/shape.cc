// Data-moving shape ops: cat, flip, roll, repeat, padding, triangles,
// diagonals, and the backward/scatter forms of views (select, slice,
// diagonal, unfold, as_strided). Pure views are metadata in csrc/aten.
#include <algorithm>

#include "indexing.h"
#include "strided.h"

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;
constexpr ElementType kI64 = ElementType::kI64;

Value slice_dim(Builder& b, Value x, int64_t dim, int64_t start, int64_t limit) {
  std::vector<int64_t> lo(x.rank(), 0), hi = x.shape();
  lo[dim] = start;
  hi[dim] = limit;
  return b.slice(x, lo, hi);
}

// cat(tensors, dim): legacy empty 1-D inputs are skipped; inputs take the
// promoted result dtype.
Values cat(Context& c, const Args& a) {
  const TensorType& t = c.out();
  int64_t dim = wrap_dim(a[1].i, t.rank());
  Values parts;
  for (Value v : a[0].tensors) {
    if (v.rank() != t.rank() || v.dim(dim) == 0) continue;
    parts.push_back(c.b.convert(v, t.dtype));
  }
  if (parts.empty()) return {c.b.zeros(t)};
  return {c.b.concatenate(parts, dim)};
}

Values flip(Context& c, const Args& a) {
  Value x = a[0].tensor;
  if (x.rank() == 0) return {x};
  return {c.b.reverse(x, wrap_dims(a[1].ints, x.rank()))};
}

Value roll_dim(Builder& b, Value x, int64_t dim, int64_t shift) {
  int64_t n = x.dim(dim);
  if (n == 0) return x;
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return x;
  return b.concatenate({slice_dim(b, x, dim, n - s, n), slice_dim(b, x, dim, 0, n - s)}, dim);
}

// roll(self, shifts, dims): without dims, rolls the flattened tensor.
Values roll(Context& c, const Args& a) {
  Value x = a[0].tensor;
  if (a[2].ints.empty()) {
    Value flat = c.b.reshape(x, {x.type().numel()});
    return {c.b.reshape(roll_dim(c.b, flat, 0, a[1].ints.at(0)), x.shape())};
  }
  for (size_t i = 0; i < a[2].ints.size(); ++i)
    x = roll_dim(c.b, x, wrap_dim(a[2].ints[i], x.rank()), a[1].ints.at(i));
  return {x};
}

// repeat(self, repeats): broadcast into [r0, s0, r1, s1, ...], then merge pairs.
Values repeat(Context& c, const Args& a) {
  const TensorType& t = c.out();
  if (t.numel() == 0) return {c.b.zeros(t)};
  const std::vector<int64_t>& reps = a[1].ints;
  std::vector<int64_t> shape(reps.size() - a[0].tensor.rank(), 1);
  for (int64_t s : a[0].tensor.shape()) shape.push_back(s);
  Value x = c.b.reshape(a[0].tensor, shape);
  std::vector<int64_t> wide, dims;
  for (size_t i = 0; i < reps.size(); ++i) {
    wide.insert(wide.end(), {reps[i], shape[i]});
    dims.push_back(static_cast<int64_t>(2 * i + 1));
  }
  return {c.b.reshape(c.b.broadcast_in_dim(x, wide, dims), t.shape)};
}

// constant_pad_nd(self, pad, value): pairs from the last dim backwards;
// negative amounts crop (stablehlo.pad allows negative edges).
Values constant_pad_nd(Context& c, const Args& a) {
  Value x = a[0].tensor;
  const TensorType& t = c.out();
  if (t.numel() == 0) return {c.b.zeros(t)};
  std::vector<int64_t> lo(x.rank(), 0), hi(x.rank(), 0);
  const std::vector<int64_t>& p = a[1].ints;
  for (size_t i = 0; 2 * i + 1 < p.size(); ++i) {
    lo[x.rank() - 1 - i] = p[2 * i];
    hi[x.rank() - 1 - i] = p[2 * i + 1];
  }
  Value value = c.b.convert(a[2].tensor, x.dtype());
  return {c.b.pad(x, value, lo, hi)};
}

// Source position of each output position of a dim of size n padded by
// (lo, hi), mirroring at the edges or repeating them.
std::vector<int64_t> pad_source(int64_t n, int64_t lo, int64_t hi, bool reflect) {
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < n + lo + hi; ++i) {
    int64_t j = i - lo;
    if (reflect) {
      j = j < 0 ? -j : j;
      j = j > n - 1 ? 2 * (n - 1) - j : j;
    } else {
      j = std::clamp<int64_t>(j, 0, n - 1);
    }
    idx.push_back(j);
  }
  return idx;
}

// reflection_padNd / replication_padNd (self, padding) and their backward
// (grad_output, self, padding): a static gather per padded dim, and its
// adjoint scatter-add.
LoweringFn edge_pad(bool reflect, bool backward) {
  return [reflect, backward](Context& c, const Args& a) {
    Value x = a[0].tensor;
    Value self = backward ? a[1].tensor : x;
    const std::vector<int64_t>& p = a[backward ? 2 : 1].ints;
    if (c.out().numel() == 0) return Values{c.b.zeros(c.out())};
    for (size_t i = 0; 2 * i + 1 < p.size(); ++i) {
      int64_t dim = self.rank() - 1 - static_cast<int64_t>(i);
      auto idx = pad_source(self.dim(dim), p[2 * i], p[2 * i + 1], reflect);
      x = backward ? add_static(c.b, x, dim, idx, self.dim(dim)) : take_static(c.b, x, dim, idx);
    }
    return Values{c.b.convert(x, c.out().dtype)};
  };
}

LoweringFn triangle(bool lower) {
  return [lower](Context& c, const Args& a) {
    Value x = a[0].tensor;
    int64_t r = x.rank();
    TensorType t{kI64, x.shape()};
    // Keep col <= row + k (lower) or col >= row + k.
    Value col = c.b.iota(t, r - 1);
    Value row_k = c.b.add(c.b.iota(t, r - 2), splat_like(c.b, static_cast<double>(a[1].i), col));
    Value keep = c.b.compare(lower ? Compare::kLE : Compare::kGE, col, row_k);
    return Values{c.b.select(keep, x, splat_like(c.b, 0, x))};
  };
}

// The places of diagonal `offset` of (dim1, dim2) in a tensor of `shape`, and
// `v` (the other dims, then the diagonal) spread along them.
struct Diagonal {
  Value mask, values;
};

Diagonal diagonal_places(Builder& b, Value v, const std::vector<int64_t>& shape,
                         int64_t offset, int64_t dim1, int64_t dim2) {
  int64_t r = static_cast<int64_t>(shape.size()), nb = r - 2;
  std::vector<int64_t> canon;  // other dims, rows, cols
  for (int64_t d = 0; d < r; ++d)
    if (d != dim1 && d != dim2) canon.push_back(shape[d]);
  int64_t rows = shape[dim1], cols = shape[dim2];
  canon.insert(canon.end(), {rows, cols});
  int64_t skip = std::max<int64_t>(-offset, 0), len = v.dim(nb);
  std::vector<int64_t> lo(nb + 1, 0), hi(nb + 1, 0);
  lo[nb] = skip;
  hi[nb] = rows - len - skip;
  Value by_row = b.pad(v, b.constant(v.dtype(), 0), lo, hi);
  std::vector<int64_t> row_dims(nb + 1);
  for (int64_t i = 0; i <= nb; ++i) row_dims[i] = i;
  Value values = b.broadcast_in_dim(by_row, canon, row_dims);
  TensorType it{kI64, canon};
  Value diff = b.sub(b.iota(it, nb + 1), b.iota(it, nb));
  Value mask = b.compare(Compare::kEQ, diff, splat_like(b, static_cast<double>(offset), diff));
  std::vector<int64_t> perm;
  for (int64_t p = 0, next = 0; p < r; ++p)
    perm.push_back(p == dim1 ? nb : p == dim2 ? nb + 1 : next++);
  return {b.transpose(mask, perm), b.transpose(values, perm)};
}

// diag_embed(self, offset, dim1, dim2).
Values diag_embed(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Diagonal d = diagonal_places(c.b, c.b.convert(a[0].tensor, t.dtype), t.shape, a[1].i,
                               wrap_dim(a[2].i, t.rank()), wrap_dim(a[3].i, t.rank()));
  return {c.b.select(d.mask, d.values, c.b.zeros(t))};
}

// diagonal_backward(grad, input_sizes, offset, dim1, dim2).
Values diagonal_backward(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Diagonal d = diagonal_places(c.b, c.b.convert(a[0].tensor, t.dtype), t.shape, a[2].i,
                               wrap_dim(a[3].i, t.rank()), wrap_dim(a[4].i, t.rank()));
  return {c.b.select(d.mask, d.values, c.b.zeros(t))};
}

// diagonal_scatter(self, src, offset, dim1, dim2).
Values diagonal_scatter(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Diagonal d = diagonal_places(c.b, c.b.convert(a[1].tensor, t.dtype), t.shape, a[2].i,
                               wrap_dim(a[3].i, t.rank()), wrap_dim(a[4].i, t.rank()));
  return {c.b.select(d.mask, d.values, a[0].tensor)};
}

// `src` laid into zeros of `shape` at start, start+step, ... along `dim`
// (interior padding does the striding).
Value spread(Builder& b, Value src, const std::vector<int64_t>& shape, int64_t dim,
             int64_t start, int64_t step) {
  int64_t r = static_cast<int64_t>(shape.size()), m = src.dim(dim);
  if (m == 0) return b.zeros({src.dtype(), shape});
  std::vector<int64_t> lo(r, 0), hi(r, 0), interior(r, 0);
  lo[dim] = start;
  interior[dim] = step - 1;
  hi[dim] = shape[dim] - (start + (m - 1) * step + 1);
  return b.pad(src, b.constant(src.dtype(), 0), lo, hi, interior);
}

// `base` with the strided box along `dim` replaced by `src`.
Value place(Builder& b, Value base, Value src, int64_t dim, int64_t start, int64_t step) {
  src = b.convert(src, base.dtype());
  Value values = spread(b, src, base.shape(), dim, start, step);
  Value ones = b.full({ElementType::kPred, src.shape()}, 1);
  Value mask = spread(b, ones, base.shape(), dim, start, step);
  return b.select(mask, values, base);
}

int64_t clamp_start(int64_t start, int64_t n) {
  if (start < 0) start += n;
  return std::clamp<int64_t>(start, 0, n);
}

// The source with a size-1 `dim` inserted (select's inverse shape).
Value unselect(Builder& b, Value src, int64_t dim) {
  std::vector<int64_t> shape = src.shape();
  shape.insert(shape.begin() + dim, 1);
  return b.reshape(src, shape);
}

// select_backward(grad, input_sizes, dim, index).
Values select_backward(Context& c, const Args& a) {
  const TensorType& t = c.out();
  int64_t dim = wrap_dim(a[2].i, t.rank());
  Value g = unselect(c.b, c.b.convert(a[0].tensor, t.dtype), dim);
  return {spread(c.b, g, t.shape, dim, clamp_start(a[3].i, t.shape[dim]), 1)};
}

// select_scatter(self, src, dim, index).
Values select_scatter(Context& c, const Args& a) {
  Value self = a[0].tensor;
  int64_t dim = wrap_dim(a[2].i, self.rank());
  Value src = unselect(c.b, a[1].tensor, dim);
  return {place(c.b, self, src, dim, clamp_start(a[3].i, self.dim(dim)), 1)};
}

// slice_backward(grad, input_sizes, dim, start, end, step).
Values slice_backward(Context& c, const Args& a) {
  const TensorType& t = c.out();
  int64_t dim = wrap_dim(a[2].i, t.rank());
  Value g = c.b.convert(a[0].tensor, t.dtype);
  return {spread(c.b, g, t.shape, dim, clamp_start(a[3].i, t.shape[dim]), a[5].i)};
}

// slice_scatter(self, src, dim, start?, end?, step).
Values slice_scatter(Context& c, const Args& a) {
  Value self = a[0].tensor;
  int64_t dim = wrap_dim(a[2].i, self.rank());
  int64_t start = a[3].none() ? 0 : clamp_start(a[3].i, self.dim(dim));
  return {place(c.b, self, a[1].tensor, dim, start, a[5].i)};
}

// as_strided_scatter(self, src, size, stride, storage_offset?): the view is
// taken over self's elements in row-major order (a contiguous clone of self).
Values as_strided_scatter(Context& c, const Args& a) {
  Value self = a[0].tensor;
  Strided view{a[2].ints, a[3].ints, a[4].none() ? 0 : a[4].i};
  Value flat = c.b.reshape(self, {self.type().numel()});
  Value r = strided_write(c.b, flat, c.b.convert(a[1].tensor, self.dtype()), view);
  return {c.b.reshape(r, self.shape())};
}

// narrow_copy(self, dim, start, length): a negative start counts from the end.
Values narrow_copy(Context& c, const Args& a) {
  Value self = a[0].tensor;
  int64_t dim = wrap_dim(a[1].i, self.rank());
  int64_t start = a[2].i < 0 ? a[2].i + self.dim(dim) : a[2].i;
  std::vector<int64_t> begin(self.rank(), 0), end = self.shape();
  begin[dim] = start;
  end[dim] = start + a[3].i;
  return {c.b.slice(self, begin, end)};
}

// unfold_backward(grad, input_sizes, dim, size, step): window w's element k
// came from position w * step + k.
Values unfold_backward(Context& c, const Args& a) {
  const TensorType& t = c.out();
  if (t.rank() == 0)  // a 0-dim tensor unfolds to [size], each element itself
    return {reduce_sum(c.b, c.b.convert(a[0].tensor, t.dtype), {0})};
  if (t.numel() == 0) return {c.b.zeros(t)};
  int64_t dim = wrap_dim(a[2].i, t.rank()), size = a[3].i, step = a[4].i;
  Value g = c.b.convert(a[0].tensor, t.dtype);
  int64_t windows = g.dim(dim);
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < t.rank(); ++d) {
    perm.push_back(d);
    if (d == dim) perm.push_back(t.rank());
  }
  std::vector<int64_t> merged = t.shape;
  merged[dim] = windows * size;
  g = c.b.reshape(c.b.transpose(g, perm), merged);
  std::vector<int64_t> idx;
  for (int64_t w = 0; w < windows; ++w)
    for (int64_t k = 0; k < size; ++k) idx.push_back(w * step + k);
  return {add_static(c.b, g, dim, idx, t.shape[dim])};
}

}  // namespace

void register_shape(Registry& r) {
  r.add("aten::cat", cat);
  r.add("aten::flip", flip);
  r.add("aten::roll", roll);
  r.add("aten::repeat", repeat);
  r.add("aten::constant_pad_nd", constant_pad_nd);
  for (const char* n : {"1d", "2d", "3d"}) {
    std::string d = n;
    r.add("aten::reflection_pad" + d, edge_pad(true, false));
    r.add("aten::reflection_pad" + d + "_backward", edge_pad(true, true));
    r.add("aten::replication_pad" + d, edge_pad(false, false));
    r.add("aten::replication_pad" + d + "_backward", edge_pad(false, true));
  }
  r.add("aten::tril", triangle(true));
  r.add("aten::triu", triangle(false));
  r.add("aten::diag_embed", diag_embed);
  r.add("aten::diagonal_backward", diagonal_backward);
  r.add("aten::diagonal_scatter", diagonal_scatter);
  r.add("aten::select_backward", select_backward);
  r.add("aten::select_scatter", select_scatter);
  r.add("aten::slice_backward", slice_backward);
  r.add("aten::narrow_copy", narrow_copy);
  r.add("aten::slice_scatter", slice_scatter);
  r.add("aten::as_strided_scatter", as_strided_scatter);
  r.add("aten::unfold_backward", unfold_backward);
}

}  // namespace torch_tpu::lowering
