// Reductions into places named by index tensors: index_reduce, max_unpool,
// segment_reduce (and its backward) and embedding_renorm. Registered from
// register_indexing (indexing.cc), with the histograms of histogram.cc.
// Index semantics: see indexing.h.
#include <cmath>
#include <cstdint>

#include "indexing.h"
#include "reduction.h"

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;
constexpr ElementType kI64 = ElementType::kI64;

bool is_inexact(ElementType t) { return hlo::is_float(t) || hlo::is_complex(t); }

// Division as PyTorch's index_reduce/segment mean does it: true division for
// floats, rounding toward negative infinity for integers (d > 0).
Value mean_div(Builder& b, Value n, Value d) {
  if (is_inexact(n.dtype())) return b.div(n, d);
  Value q = b.div(n, d);
  Value inexact = b.compare(Compare::kNE, b.mul(q, d), n);
  Value negative = b.compare(Compare::kLT, n, splat_like(b, 0, n));
  return b.select(b.and_(inexact, negative), b.sub(q, splat_like(b, 1, q)), q);
}

// ---- index_reduce ------------------------------------------------------------

// index_reduce(self, dim, index, source, reduce, include_self): source's
// slices along `dim` combine into self's slices at `index`.
Values index_reduce(Context& c, const Args& a) {
  Builder& b = c.b;
  Value self0 = a[0].tensor;
  Value self = at_least_1d(b, self0);
  int64_t dim = wrap_dim(a[1].i, self.rank());
  int64_t n = TensorType{kI64, a[2].tensor.shape()}.numel();
  Values at(dim + 1);
  at[dim] = b.reshape(a[2].tensor, {n});
  std::vector<int64_t> shape = self.shape();
  shape[dim] = n;
  Value src = b.reshape(b.convert(a[3].tensor, self.dtype()), shape);
  const std::string& reduce = a[4].s;
  bool include_self = a[5].b;
  ElementType t = self.dtype();
  double init = reduce == "prod" ? 1 : reduce == "amax" ? lowest(t) : reduce == "amin" ? highest(t) : 0;
  // int64's largest value is not a double: spell it as an integer.
  Value fill = t == kI64 && reduce == "amin" ? b.constant_int(t, INT64_MAX) : b.constant(t, init);
  Value base = include_self ? self : index_scatter(b, self, at, fill, Combine::kReplace);
  Value r;
  if (reduce == "mean") {
    Value sum = index_scatter(b, base, at, src, Combine::kAdd);
    Value count = index_scatter(b, b.full(self.type(), include_self ? 1 : 0), at,
                                b.constant(t, 1), Combine::kAdd);
    Value none = b.compare(Compare::kEQ, count, splat_like(b, 0, count));
    r = mean_div(b, sum, b.select(none, splat_like(b, 1, count), count));
  } else {
    Combine k = reduce == "prod" ? Combine::kMul : reduce == "amax" ? Combine::kMax
              : reduce == "amin" ? Combine::kMin : throw Unsupported("index_reduce '" + reduce + "'");
    r = index_scatter(b, base, at, src, k);
  }
  return {b.reshape(r, self0.shape())};
}

// ---- max_unpool ---------------------------------------------------------------

// max_unpool2d(self, indices, output_size) / max_unpool3d(..., stride, padding):
// each (n, c) plane is zeros of the output's spatial size with self's values
// written at their flat indices (out-of-range indices are dropped).
Values max_unpool(Context& c, const Args& a) {
  Builder& b = c.b;
  const TensorType& t = c.out();
  size_t k = a[2].ints.size();
  Value x = a[0].tensor;
  int64_t planes = 1, in = 1, out = 1;
  for (int64_t d = 0; d < x.rank() - static_cast<int64_t>(k); ++d) planes *= x.dim(d);
  for (size_t d = 0; d < k; ++d) {
    in *= x.dim(x.rank() - k + d);
    out *= a[2].ints[d];
  }
  Value zeros = b.zeros({t.dtype, {planes, out}});
  if (planes * in == 0) return {b.reshape(zeros, t.shape)};
  Value idx = b.reshape(b.convert(a[1].tensor, kI64), {planes, in, 1});
  Value row = b.iota({kI64, {planes, in, 1}}, 0);
  hlo::ScatterDims s;
  s.inserted_window_dims = s.scatter_dims_to_operand_dims = {0, 1};
  s.index_vector_dim = 2;
  Value upd = b.reshape(b.convert(x, t.dtype), {planes, in});
  Value r = b.scatter(zeros, b.concatenate({row, idx}, 2), upd, s,
                      [](Builder&, const Values& v) { return Values{v[1]}; });
  return {b.reshape(r, t.shape)};
}

// ---- segment_reduce -------------------------------------------------------------
//
// Data [B..., D, R...] along `axis` splits into segments given by lengths or
// offsets [B..., S(+1)]. Segments are reduced densely: a mask [B..., S, D]
// says which positions each segment covers.

enum class Seg { kSum, kMean, kMax, kMin, kProd };

Seg seg_kind(const std::string& r) {
  if (r == "sum") return Seg::kSum;
  if (r == "mean") return Seg::kMean;
  if (r == "max") return Seg::kMax;
  if (r == "min") return Seg::kMin;
  if (r == "prod") return Seg::kProd;
  throw Unsupported("segment_reduce '" + r + "'");
}

struct Segments {
  int64_t batch = 0;   // number of leading batch dims (= axis)
  int64_t count = 0;   // S
  Value mask;          // i1 [B..., S, D]
  Value lengths;       // i64 [B..., S]
};

// Starts and ends [B..., S] to the mask [B..., S, D].
Value cover(Builder& b, Value st, Value en, int64_t size) {
  std::vector<int64_t> shape = st.shape();
  int64_t r = st.rank();
  std::vector<int64_t> keep(r);
  for (int64_t d = 0; d < r; ++d) keep[d] = d;
  shape.push_back(size);
  Value j = b.iota({kI64, shape}, r);
  return b.and_(b.compare(Compare::kGE, j, b.broadcast_in_dim(st, shape, keep)),
                b.compare(Compare::kLT, j, b.broadcast_in_dim(en, shape, keep)));
}

// From lengths or offsets; the segment dim is their last, `axis` of data.
Segments segments(Builder& b, Value data, const Arg& lengths, const Arg& offsets, int64_t axis) {
  Segments s;
  s.batch = axis;
  Value st, en;
  if (!lengths.none()) {
    s.lengths = b.convert(lengths.tensor, kI64);
    int64_t last = s.lengths.rank() - 1;
    s.count = s.lengths.dim(last);
    en = scan(b, {s.lengths}, last, {b.constant_int(kI64, 0)},
              [](Builder& r, const Values& p, const Values& q) { return Values{r.add(p[0], q[0])}; })[0];
    st = b.sub(en, s.lengths);
  } else {
    Value o = b.convert(offsets.tensor, kI64);
    std::vector<int64_t> shape = o.shape(), lo(shape.size(), 0), hi = shape, lo1(shape.size(), 0);
    s.count = shape.back() - 1;
    hi.back() = s.count;
    lo1.back() = 1;
    st = b.slice(o, lo, hi);
    en = b.slice(o, lo1, shape);
    s.lengths = b.sub(en, st);
  }
  s.mask = cover(b, st, en, data.dim(axis));
  return s;
}

// `v` [B..., S, ...] or [B..., D, R...] broadcast to the expanded shape
// [B..., S, D, R...]; `seg_dim` says whether v has the S dim (else D).
Value expand(Builder& b, Value v, const std::vector<int64_t>& shape, int64_t batch, bool has_s,
             bool has_d) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < batch; ++d) dims.push_back(d);
  if (has_s) dims.push_back(batch);
  if (has_d) dims.push_back(batch + 1);
  for (int64_t d = batch + 2; d < static_cast<int64_t>(shape.size()); ++d)
    if (static_cast<int64_t>(dims.size()) < v.rank()) dims.push_back(d);
  return b.broadcast_in_dim(v, shape, dims);
}

std::vector<int64_t> expanded_shape(Value data, const Segments& s) {
  std::vector<int64_t> shape(data.shape().begin(), data.shape().begin() + s.batch);
  shape.push_back(s.count);
  shape.insert(shape.end(), data.shape().begin() + s.batch, data.shape().end());
  return shape;
}

double seg_identity(Seg k) {
  switch (k) {
    case Seg::kMax: return -INFINITY;
    case Seg::kMin: return INFINITY;
    case Seg::kProd: return 1;
    default: return 0;
  }
}

// CPU reduces a 16-bit segment in order, starting from `acc` (initial or the
// identity), rounding after each element as c10::Half arithmetic does: a loop
// over the data dim `d` of x (masked positions hold the identity).
Value in_order(Builder& b, Value x, int64_t d, Value acc, bool prod) {
  ElementType t = x.dtype(), f32 = ElementType::kF32;
  std::vector<int64_t> sizes = x.shape();
  sizes[d] = 1;
  Values out = b.while_loop(
      {b.constant_int(kI64, 0), b.convert(acc, f32), b.convert(x, f32)},
      [n = x.dim(d)](Builder& w, const Values& st) {
        return Values{w.compare(Compare::kLT, st[0], w.constant_int(kI64, n))};
      },
      [d, t, prod, sizes](Builder& w, const Values& st) {
        Values starts(sizes.size(), w.constant_int(kI64, 0));
        starts[d] = st[0];
        Value xi = w.reshape(w.dynamic_slice(st[2], starts, sizes), st[1].shape());
        Value next = round_like(w, prod ? w.mul(st[1], xi) : w.add(st[1], xi), t);
        return Values{w.add(st[0], w.constant_int(kI64, 1)), next, st[2]};
      });
  return b.convert(out[1], t);
}

// segment_reduce(data, reduce, lengths?, indices?, offsets?, axis, unsafe, initial?).
Values segment_reduce(Context& c, const Args& a) {
  Builder& b = c.b;
  Value data = a[0].tensor;
  Seg k = seg_kind(a[1].s);
  int64_t axis = wrap_dim(a[5].i, data.rank());
  Segments s = segments(b, data, a[2], a[4], axis);
  std::vector<int64_t> shape = expanded_shape(data, s);
  ElementType t = data.dtype();
  bool has_init = !a[7].none();
  Value mask = expand(b, s.mask, shape, s.batch, true, true);
  Value x = expand(b, data, shape, s.batch, false, true);
  Value fill = splat(b, seg_identity(k), t, shape);
  x = b.select(mask, x, fill);
  int64_t d = s.batch + 1;
  Value r;
  Value init = has_init ? b.convert(a[7].tensor, t) : Value();
  bool ordered = is_half(t) && k != Seg::kMax && k != Seg::kMin;
  if (ordered) {
    std::vector<int64_t> rs = shape;
    rs.erase(rs.begin() + d);
    Value start = has_init ? init : b.constant(t, k == Seg::kProd ? 1 : 0);
    r = in_order(b, x, d, b.broadcast_in_dim(start, rs, {}), k == Seg::kProd);
    has_init = false;  // already the start
  } else if (k == Seg::kMax || k == Seg::kMin) r = reduce_extreme(b, x, {d}, k == Seg::kMax);
  else if (k == Seg::kProd)
    r = b.reduce({x}, {b.constant(t, 1)}, {d},
                 [](Builder& q, const Values& v) { return Values{q.mul(v[0], v[1])}; })[0];
  else r = reduce_sum(b, x, {d});
  if (has_init) {
    init = b.broadcast_in_dim(init, r.shape(), {});
    if (k == Seg::kMax) r = nan_max(b, r, init);
    else if (k == Seg::kMin) r = nan_min(b, r, init);
    else if (k == Seg::kProd) r = b.mul(r, init);
    else r = b.add(r, init);
  }
  if (k == Seg::kMean) {
    Value len = b.convert(expand(b, s.lengths, r.shape(), s.batch, true, false), t);
    Value empty = b.compare(Compare::kEQ, len, splat_like(b, 0, len));
    Value m = b.div(r, b.select(empty, splat_like(b, 1, len), len));
    Value none = !a[7].none() ? r : splat_like(b, NAN, r);
    r = b.select(empty, none, b.select(is_nan(b, r), r, m));
  }
  return {r};
}

// _segment_reduce_backward(grad, output, data, reduce, lengths?, offsets?, axis, initial?).
Values segment_reduce_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  Value data = a[2].tensor;
  ElementType t = data.dtype();
  Seg k = seg_kind(a[3].s);
  int64_t axis = wrap_dim(a[6].i, data.rank());
  Segments s = segments(b, data, a[4], a[5], axis);
  std::vector<int64_t> shape = expanded_shape(data, s);
  Value mask = expand(b, s.mask, shape, s.batch, true, true);
  Value x = expand(b, data, shape, s.batch, false, true);
  Value g = b.convert(a[0].tensor, t), out = b.convert(a[1].tensor, t);
  Value ge = expand(b, g, shape, s.batch, true, false), oe = expand(b, out, shape, s.batch, true, false);
  Value zero = splat(b, 0, t, shape), one = splat(b, 1, t, shape);
  int64_t d = s.batch + 1;
  Value contrib;
  if (k == Seg::kSum) {
    contrib = ge;
  } else if (k == Seg::kMean) {
    Value len = b.convert(expand(b, s.lengths, shape, s.batch, true, false), t);
    contrib = b.div(ge, b.max(len, one));
  } else if (k == Seg::kMax || k == Seg::kMin) {
    Value hit = b.or_(b.compare(Compare::kEQ, x, oe), b.and_(is_nan(b, x), is_nan(b, oe)));
    hit = b.and_(hit, mask);
    Value cnt = reduce_sum(b, b.select(hit, one, zero), {d});
    Value cnt_e = expand(b, cnt, shape, s.batch, true, false);
    contrib = b.select(hit, b.div(ge, cnt_e), zero);
  } else {  // prod: g * out / x, or the product of the others where x is 0
    Value is_zero = b.and_(mask, b.compare(Compare::kEQ, x, zero));
    Value zeros = reduce_sum(b, b.select(is_zero, one, zero), {d});
    Value nonzero_x = b.select(b.and_(mask, b.not_(is_zero)), x, one);
    Value others = b.reduce({nonzero_x}, {b.constant(t, 1)}, {d},
                            [](Builder& q, const Values& v) { return Values{q.mul(v[0], v[1])}; })[0];
    if (!a[7].none()) others = b.mul(others, b.broadcast_in_dim(b.convert(a[7].tensor, t), others.shape(), {}));
    Value only = b.compare(Compare::kEQ, expand(b, zeros, shape, s.batch, true, false), one);
    Value excl = b.select(only, expand(b, others, shape, s.batch, true, false), zero);
    contrib = b.select(is_zero, b.mul(ge, excl), b.div(b.mul(ge, oe), x));
  }
  contrib = b.select(mask, contrib, zero);
  return {b.convert(reduce_sum(b, contrib, {s.batch}), c.out().dtype)};
}

// ---- embedding_renorm ---------------------------------------------------------------

// embedding_renorm(self, indices, max_norm, norm_type): rows named by indices
// whose p-norm exceeds max_norm are scaled by max_norm / (norm + 1e-7).
Values embedding_renorm(Context& c, const Args& a) {
  Builder& b = c.b;
  Value w = a[0].tensor;
  ElementType t = w.dtype(), ct = t == ElementType::kF64 ? t : ElementType::kF32;
  int64_t rows = w.dim(0);
  int64_t n = TensorType{kI64, a[1].tensor.shape()}.numel();
  Value x = b.convert(w, ct);
  double p = a[3].d;
  Value norm;
  if (std::isinf(p)) {
    norm = reduce_max(b, b.abs(x), {1});
  } else if (p == 1) {
    norm = reduce_sum(b, b.abs(x), {1});
  } else if (p == 2) {
    norm = b.sqrt(reduce_sum(b, b.mul(x, x), {1}));
  } else if (p == 0) {
    Value nz = b.compare(Compare::kNE, x, splat_like(b, 0, x));
    norm = reduce_sum(b, b.select(nz, splat_like(b, 1, x), splat_like(b, 0, x)), {1});
  } else {
    Value pw = b.pow(b.abs(x), splat_like(b, p, x));
    Value s = reduce_sum(b, pw, {1});
    norm = b.pow(s, splat_like(b, 1.0 / p, s));
  }
  norm = b.convert(b.convert(norm, t), ElementType::kF64);  // read back in self's type
  Value max_norm = splat_like(b, a[2].d, norm);
  // CPU multiplies the row by the scale as a Python number, which a 16-bit
  // row reads in its own type.
  Value scale = round_like(b, b.convert(b.div(max_norm, b.add(norm, splat_like(b, 1e-7, norm))), ct), t);
  Value touched = b.zeros({ElementType::kPred, {rows}});
  if (n > 0) {
    Value idx = b.reshape(a[1].tensor, {n});
    touched = index_scatter(b, touched, {idx}, b.constant_int(ElementType::kPred, 1),
                            Combine::kReplace);
  }
  Value apply = b.and_(touched, b.compare(Compare::kGT, norm, max_norm));
  Value scaled = b.convert(b.mul(x, b.broadcast_in_dim(scale, x.shape(), {0})), t);
  return {b.select(b.broadcast_in_dim(apply, w.shape(), {0}), scaled, w)};
}

}  // namespace

void register_histogram(Registry& r);  // histogram.cc

void register_indexing_reduce(Registry& r) {
  r.add("aten::index_reduce", index_reduce);
  r.add("aten::max_unpool2d", max_unpool);
  r.add("aten::max_unpool3d", max_unpool);
  r.add("aten::segment_reduce", segment_reduce);
  r.add("aten::_segment_reduce_backward", segment_reduce_backward);
  r.add("aten::embedding_renorm", embedding_renorm);
  register_histogram(r);
}

}  // namespace torch_tpu::lowering
