// Indexing: advanced indexing (`index`, `index_put`), gathers and scatters
// along a dim, `index_select`/`index_add`/`index_copy`/`index_fill`, `take`,
// `put`, `masked_scatter` and the embedding backward. Boolean masks need
// their true count on the host: csrc/aten/host_ops.cc turns them into index
// tensors before these lowerings run. Index semantics: see indexing.h.
#include "indexing.h"

#include <algorithm>

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;
constexpr ElementType kI64 = ElementType::kI64;

std::vector<int64_t> iota_dims(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

// i64 indices with negative entries wrapped by `size`, checked at run time
// to lie in [-size, size) (or [0, size) unless `negative_ok`), dim `dim`.
Value wrap_index(Builder& b, Value idx, int64_t size, int64_t dim, bool negative_ok = true) {
  if (idx.dtype() == ElementType::kPred || idx.dtype() == ElementType::kU8)
    throw Unsupported("boolean mask indices must be converted on the host first");
  idx = b.convert(idx, kI64);
  // PyTorch raises IndexError where negative indices wrap, RuntimeError in
  // gather and scatter.
  check_in_range(b, idx, negative_ok ? -size : 0, size,
                 "index out of bounds for dimension " + std::to_string(dim) + " with size " +
                     std::to_string(size),
                 std::nullopt, negative_ok);
  Value neg = b.compare(Compare::kLT, idx, splat_like(b, 0, idx));
  return b.select(neg, b.add(idx, splat_like(b, static_cast<double>(size), idx)), idx);
}

hlo::RegionFn combiner(Combine combine) {
  return [combine](Builder& b, const Values& a) -> Values {
    bool pred = a[0].dtype() == ElementType::kPred;
    switch (combine) {
      case Combine::kAdd: return {pred ? b.or_(a[0], a[1]) : b.add(a[0], a[1])};
      case Combine::kMul: return {pred ? b.and_(a[0], a[1]) : b.mul(a[0], a[1])};
      case Combine::kMax: return {b.max(a[0], a[1])};
      case Combine::kMin: return {b.min(a[0], a[1])};
      case Combine::kReplace: break;
    }
    return {a[1]};
  };
}

// Where an advanced-indexing access reads or writes.
struct Layout {
  std::vector<int64_t> dims;    // indexed dims of self, increasing
  std::vector<int64_t> batch;   // broadcast shape of the index tensors
  Value coords;                 // i64 [batch..., dims.size()]
  std::vector<int64_t> shape;   // shape of the indexed result
  std::vector<int64_t> window;  // result positions of the non-indexed dims
};

Layout layout(Builder& b, Value self, const Values& indices) {
  Layout l;
  for (size_t d = 0; d < indices.size(); ++d) {
    if (!indices[d].valid()) continue;
    l.dims.push_back(static_cast<int64_t>(d));
    l.batch = broadcast_shapes(l.batch, indices[d].shape());
  }
  bool adjacent = l.dims.back() - l.dims.front() + 1 == static_cast<int64_t>(l.dims.size());
  int64_t at = adjacent ? l.dims.front() : 0;  // NumPy: batch dims go first otherwise
  std::vector<int64_t> column = l.batch;
  column.push_back(1);
  Values cols;
  for (int64_t d : l.dims) {
    Value i = b.broadcast_to(wrap_index(b, indices[d], self.dim(d), static_cast<int64_t>(d)),
                             l.batch);
    cols.push_back(b.reshape(i, column));
  }
  l.coords = b.concatenate(cols, static_cast<int64_t>(l.batch.size()));
  std::vector<int64_t> rest;
  for (int64_t d = 0; d < self.rank(); ++d)
    if (std::find(l.dims.begin(), l.dims.end(), d) == l.dims.end()) rest.push_back(self.dim(d));
  l.shape.assign(rest.begin(), rest.begin() + at);
  l.shape.insert(l.shape.end(), l.batch.begin(), l.batch.end());
  l.shape.insert(l.shape.end(), rest.begin() + at, rest.end());
  for (int64_t j = 0; j < static_cast<int64_t>(rest.size()); ++j)
    l.window.push_back(j < at ? j : j + static_cast<int64_t>(l.batch.size()));
  return l;
}

bool any_index(const Values& indices) {
  return std::any_of(indices.begin(), indices.end(), [](const Value& v) { return v.valid(); });
}

// `idx` on `dim` and full slices before it.
Values at_dim(Value idx, int64_t dim) {
  Values v(dim + 1);
  v[dim] = idx;
  return v;
}

// Coordinates of every element of `index` in an operand of the same rank:
// `index` (wrapped by `size`) on `dim`, the element's own position elsewhere.
Value dim_coords(Builder& b, Value index, int64_t dim, int64_t size) {
  int64_t r = index.rank();
  std::vector<int64_t> column = index.shape();
  column.push_back(1);
  Values cols;
  for (int64_t d = 0; d < r; ++d) {
    // gather and scatter take no negative indices.
    Value c = d == dim ? wrap_index(b, index, size, dim, false) : b.iota({kI64, index.shape()}, d);
    cols.push_back(b.reshape(c, column));
  }
  return b.concatenate(cols, r);
}

// torch.gather on rank >= 1.
Value gather_dim(Builder& b, Value self, int64_t dim, Value index) {
  TensorType out{self.dtype(), index.shape()};
  if (out.numel() == 0) return b.zeros(out);
  int64_t r = self.rank();
  hlo::GatherDims g;
  g.collapsed_slice_dims = g.start_index_map = iota_dims(r);
  g.index_vector_dim = r;
  return b.gather(self, dim_coords(b, index, dim, self.dim(dim)), g,
                  std::vector<int64_t>(r, 1), out);
}

// torch.scatter on rank >= 1; `src` is sliced to index's shape (or a scalar).
Value scatter_dim(Builder& b, Value self, int64_t dim, Value index, Value src,
                  Combine combine) {
  if (TensorType{kI64, index.shape()}.numel() == 0) return self;
  int64_t r = self.rank();
  Value upd = b.convert(src, self.dtype());
  if (upd.rank() == 0) upd = b.broadcast_to(upd, index.shape());
  else if (upd.shape() != index.shape()) upd = b.slice(upd, std::vector<int64_t>(r, 0), index.shape());
  hlo::ScatterDims s;
  s.inserted_window_dims = s.scatter_dims_to_operand_dims = iota_dims(r);
  s.index_vector_dim = r;
  return b.scatter(self, dim_coords(b, index, dim, self.dim(dim)), upd, s, combiner(combine));
}

// Rank-0 operands of the dim ops act as rank 1 of size 1.
Value rank1(Builder& b, Value x) {
  return x.rank() == 0 ? b.reshape(x, {1}) : x;
}

Values gather(Context& c, const Args& a) {
  Value self = rank1(c.b, a[0].tensor), index = rank1(c.b, a[2].tensor);
  Value r = gather_dim(c.b, self, wrap_dim(a[1].i, self.rank()), index);
  return {c.b.reshape(r, c.out().shape)};
}

Combine combine_named(const std::string& name) {
  if (name == "add" || name == "sum") return Combine::kAdd;
  if (name == "multiply" || name == "prod") return Combine::kMul;
  if (name == "amax") return Combine::kMax;
  if (name == "amin") return Combine::kMin;
  throw Unsupported("scatter reduction '" + name + "'");
}

// scatter.src/.value and .reduce/.value_reduce (argument 4 names the reduction).
Values scatter(Context& c, const Args& a) {
  Combine combine = a.size() > 4 ? combine_named(a[4].s) : Combine::kReplace;
  Value self = rank1(c.b, a[0].tensor), index = rank1(c.b, a[2].tensor);
  Value src = a[0].tensor.rank() == 0 ? rank1(c.b, a[3].tensor) : a[3].tensor;
  Value r = scatter_dim(c.b, self, wrap_dim(a[1].i, self.rank()), index, src, combine);
  return {c.b.reshape(r, c.out().shape)};
}

Values scatter_add(Context& c, const Args& a) {
  Value self = rank1(c.b, a[0].tensor), index = rank1(c.b, a[2].tensor);
  Value src = rank1(c.b, a[3].tensor);
  Value r = scatter_dim(c.b, self, wrap_dim(a[1].i, self.rank()), index, src, Combine::kAdd);
  return {c.b.reshape(r, c.out().shape)};
}

// Integer division rounding toward negative infinity, for positive `d`.
Value floor_div_by_positive(Builder& b, Value n, Value d) {
  if (hlo::is_float(n.dtype()) || hlo::is_complex(n.dtype())) return b.div(n, d);
  Value q = b.div(n, d);
  Value inexact = b.compare(Compare::kNE, b.mul(q, d), n);
  Value negative = b.compare(Compare::kLT, n, splat_like(b, 0, n));
  return b.select(b.and_(inexact, negative), b.sub(q, splat_like(b, 1, q)), q);
}

// scatter_reduce(self, dim, index, src, reduce, include_self).
Values scatter_reduce(Context& c, const Args& a) {
  Builder& b = c.b;
  Value self = rank1(b, a[0].tensor), index = rank1(b, a[2].tensor);
  Value src = rank1(b, a[3].tensor);
  int64_t dim = wrap_dim(a[1].i, self.rank());
  const std::string& reduce = a[4].s;
  bool include_self = a[5].b;
  Value zero = b.constant(self.dtype(), 0), one = b.constant(self.dtype(), 1);
  auto scatter = [&](Value base, Value s, Combine k) { return scatter_dim(b, base, dim, index, s, k); };
  Value r;
  if (reduce == "mean") {
    Value sum = scatter(include_self ? self : scatter(self, zero, Combine::kReplace), src,
                        Combine::kAdd);
    Value count = scatter(b.full(self.type(), include_self ? 1 : 0), one, Combine::kAdd);
    Value empty = b.compare(Compare::kEQ, count, splat_like(b, 0, count));
    r = floor_div_by_positive(b, sum, b.select(empty, splat_like(b, 1, count), count));
  } else {
    Combine k = combine_named(reduce);
    Value base = self;
    // Without self, the touched places start from a value the reduction ignores:
    // its identity, or for max/min one of the scattered values.
    if (!include_self)
      base = scatter(self, k == Combine::kAdd ? zero : k == Combine::kMul ? one : src,
                     Combine::kReplace);
    r = scatter(base, src, k);
  }
  return {b.reshape(r, c.out().shape)};
}

// index_select(self, dim, index).
Values index_select(Context& c, const Args& a) {
  Value self = rank1(c.b, a[0].tensor);
  int64_t dim = wrap_dim(a[1].i, self.rank());
  int64_t n = TensorType{kI64, a[2].tensor.shape()}.numel();
  Value idx = c.b.reshape(a[2].tensor, {n});
  check_in_range(c.b, idx, 0, self.dim(dim), "index out of range in self");
  std::vector<int64_t> shape = self.shape();
  shape[dim] = n;
  Value r = index_gather(c.b, self, at_dim(idx, dim), {self.dtype(), shape});
  return {c.b.reshape(r, c.out().shape)};
}

// `values` written along `dim` of self at `index` (index_add/copy/fill).
Value index_dim_scatter(Builder& b, Value self0, int64_t dim0, Value index, Value values,
                        Combine combine) {
  Value self = rank1(b, self0);
  int64_t dim = wrap_dim(dim0, self.rank());
  int64_t n = TensorType{kI64, index.shape()}.numel();
  std::vector<int64_t> shape = self.shape();
  shape[dim] = n;
  if (values.rank() > 0 || self0.rank() == 0) values = b.reshape(values, shape);
  Value r = index_scatter(b, self, at_dim(b.reshape(index, {n}), dim), values, combine);
  return b.reshape(r, self0.shape());
}

Values index_add(Context& c, const Args& a) {
  Value src = a[3].tensor;
  if (a.size() > 4 && a[4].kind == Arg::kTensor)
    src = c.b.mul(c.b.convert(src, c.out().dtype), coerce(c.b, a[4].tensor, c.out().dtype, src.shape()));
  return {index_dim_scatter(c.b, a[0].tensor, a[1].i, a[2].tensor, src, Combine::kAdd)};
}

Values index_copy(Context& c, const Args& a) {
  return {index_dim_scatter(c.b, a[0].tensor, a[1].i, a[2].tensor, a[3].tensor, Combine::kReplace)};
}

// _unsafe_index_put(self, indices, values, accumulate).
Values index_put(Context& c, const Args& a) {
  Combine k = a[3].b ? Combine::kAdd : Combine::kReplace;
  return {index_scatter(c.b, a[0].tensor, a[1].tensors, a[2].tensor, k)};
}

Values take(Context& c, const Args& a) {
  Value self = a[0].tensor;
  Value flat = c.b.reshape(self, {self.type().numel()});
  return {index_gather(c.b, flat, {a[1].tensor}, c.out())};
}

// put(self, index, source, accumulate): writes into the flattened self.
Values put(Context& c, const Args& a) {
  Value self = a[0].tensor, index = a[1].tensor;
  Value flat = c.b.reshape(self, {self.type().numel()});
  Value src = c.b.reshape(a[2].tensor, index.shape());
  Value r = index_scatter(c.b, flat, {index}, src, a[3].b ? Combine::kAdd : Combine::kReplace);
  return {c.b.reshape(r, self.shape())};
}

// masked_scatter(self, mask, source): the k-th true place takes source's k-th
// element; positions come from a prefix sum of the mask.
Values masked_scatter(Context& c, const Args& a) {
  Builder& b = c.b;
  const TensorType& t = c.out();
  Value self = coerce(b, a[0].tensor, t);
  Value mask = a[1].tensor;
  if (mask.dtype() != ElementType::kPred)
    mask = b.compare(Compare::kNE, mask, splat_like(b, 0, mask));
  mask = b.broadcast_to(mask, t.shape);
  int64_t n = t.numel(), m = TensorType{kI64, a[2].tensor.shape()}.numel();
  if (n == 0 || m == 0) return {self};
  Value pos = prefix_sum(b, b.convert(b.reshape(mask, {n}), kI64));
  check_all(b, b.compare(Compare::kLE, b.slice(pos, {n - 1}, {n}), splat(b, m, kI64, {1})),
            "Number of elements of source < number of ones in mask", false);
  pos = b.max(b.sub(pos, splat_like(b, 1, pos)), splat_like(b, 0, pos));
  Value src = b.convert(b.reshape(a[2].tensor, {m}), t.dtype);
  Value picked = index_gather(b, src, {pos}, {t.dtype, {n}});
  return {b.select(mask, b.reshape(picked, t.shape), self)};
}

// embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq).
Values embedding_dense_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  const TensorType& t = c.out();
  int64_t dim = t.shape[1];
  int64_t n = TensorType{kI64, a[1].tensor.shape()}.numel();
  Value idx = b.convert(b.reshape(a[1].tensor, {n}), kI64);
  Value g = b.convert(b.reshape(a[0].tensor, {n, dim}), t.dtype);
  if (a[3].i >= 0) {
    Value keep = b.compare(Compare::kNE, idx, splat_like(b, static_cast<double>(a[3].i), idx));
    g = b.select(b.broadcast_in_dim(keep, {n, dim}, {0}), g, splat_like(b, 0, g));
  }
  if (a[4].b && n > 0) {  // divide by how often each index occurs
    Value ones = splat(b, 1, t.dtype, {n});
    Value counts = index_scatter(b, b.zeros({t.dtype, {t.shape[0]}}), {idx}, ones, Combine::kAdd);
    Value per = index_gather(b, counts, {idx}, {t.dtype, {n}});
    g = b.div(g, b.broadcast_in_dim(per, {n, dim}, {0}));
  }
  return {index_scatter(b, b.zeros(t), {idx}, g, Combine::kAdd)};
}

}  // namespace

Value index_gather(Builder& b, Value self, const Values& indices, const TensorType& out) {
  if (out.numel() == 0) return b.zeros(out);
  if (!any_index(indices)) return b.reshape(self, out.shape);
  Layout l = layout(b, self, indices);
  hlo::GatherDims g;
  g.offset_dims = l.window;
  g.collapsed_slice_dims = g.start_index_map = l.dims;
  g.index_vector_dim = static_cast<int64_t>(l.batch.size());
  std::vector<int64_t> sizes = self.shape();
  for (int64_t d : l.dims) sizes[d] = 1;
  Value r = b.gather(self, l.coords, g, sizes, {self.dtype(), l.shape});
  return b.reshape(r, out.shape);
}

Value index_scatter(Builder& b, Value self, const Values& indices, Value values,
                    Combine combine) {
  if (!any_index(indices)) {
    Value v = coerce(b, values, self.type());
    return combine == Combine::kReplace ? v : combiner(combine)(b, {self, v})[0];
  }
  if (self.type().numel() == 0) return self;
  Layout l = layout(b, self, indices);
  if (TensorType{kI64, l.shape}.numel() == 0) return self;
  hlo::ScatterDims s;
  s.update_window_dims = l.window;
  s.inserted_window_dims = s.scatter_dims_to_operand_dims = l.dims;
  s.index_vector_dim = static_cast<int64_t>(l.batch.size());
  Value upd = coerce(b, values, self.dtype(), l.shape);
  return b.scatter(self, l.coords, upd, s, combiner(combine));
}

Value take_static(Builder& b, Value x, int64_t dim, const std::vector<int64_t>& idx) {
  std::vector<int64_t> shape = x.shape();
  shape[dim] = static_cast<int64_t>(idx.size());
  return index_gather(b, x, at_dim(b.constant_i64_vector(idx), dim), {x.dtype(), shape});
}

Value add_static(Builder& b, Value g, int64_t dim, const std::vector<int64_t>& idx,
                 int64_t size) {
  std::vector<int64_t> shape = g.shape();
  shape[dim] = size;
  Value zeros = b.zeros({g.dtype(), shape});
  return index_scatter(b, zeros, at_dim(b.constant_i64_vector(idx), dim), g, Combine::kAdd);
}

Value prefix_sum(Builder& b, Value x) {
  int64_t n = x.dim(0);
  Value zero = b.constant(x.dtype(), 0);
  for (int64_t s = 1; s < n; s *= 2)
    x = b.add(x, b.pad(b.slice(x, {0}, {n - s}), zero, {s}, {0}));
  return x;
}

void register_indexing_reduce(Registry& r);  // indexing_reduce.cc

void register_indexing(Registry& r) {
  r.add("aten::_unsafe_index.Tensor", [](Context& c, const Args& a) {
    return Values{index_gather(c.b, a[0].tensor, a[1].tensors, c.out())};
  });
  // Not `_index_put_impl`: its in-place form is a host op (boolean masks).
  r.add("aten::_unsafe_index_put", index_put);
  r.add("aten::index_select", index_select);
  r.add("aten::index_add", index_add);
  r.add("aten::index_copy", index_copy);
  for (const char* op : {"aten::index_fill.int_Scalar", "aten::index_fill.int_Tensor"})
    r.add(op, index_copy);
  r.add("aten::gather", gather);
  for (const char* op : {"aten::scatter.src", "aten::scatter.value", "aten::scatter.reduce",
                         "aten::scatter.value_reduce"})
    r.add(op, scatter);
  r.add("aten::scatter_add", scatter_add);
  r.add("aten::scatter_reduce.two", scatter_reduce);
  r.add("aten::take", take);
  r.add("aten::put", put);
  r.add("aten::masked_scatter", masked_scatter);
  r.add("aten::embedding_dense_backward", embedding_dense_backward);
  register_indexing_reduce(r);
}

}  // namespace torch_tpu::lowering
