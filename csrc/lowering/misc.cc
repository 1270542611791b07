// Ops that fit no larger family: functional copy, set membership and
// searching (isin, bucketize, searchsorted, histc), trace, cross products,
// pixel/channel shuffles, triangle index factories, renorm and weight norm.
// Bicubic and grid sampling are in misc_sampling.cc, FFTs in fft.cc; all
// register through register_misc.
#include <algorithm>
#include <cmath>

#include "helpers.h"
#include "indexing.h"

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;
constexpr ElementType kI64 = ElementType::kI64;

Value reduce_any(Builder& b, Value pred, const std::vector<int64_t>& dims) {
  Value init = b.constant_int(ElementType::kPred, 0);
  return b.reduce({pred}, {init}, dims,
                  [](Builder& r, const Values& v) { return Values{r.or_(v[0], v[1])}; })[0];
}

// aten::copy(self, src, non_blocking): src in self's dtype and shape.
Values copy(Context& c, const Args& a) { return {coerce(c.b, a[1].tensor, c.out())}; }

// isin.{Tensor_Tensor, Tensor_Scalar, Scalar_Tensor}(elements, test, *,
// assume_unique, invert): every element against every test value, then any.
Values isin(Context& c, const Args& a) {
  ElementType t = result_type(a, {0, 1});
  Value e = c.b.convert(a[0].tensor, t), s = c.b.convert(a[1].tensor, t);
  int64_t n = 1, m = 1;
  for (int64_t d : e.shape()) n *= d;
  for (int64_t d : s.shape()) m *= d;
  Value lhs = c.b.broadcast_in_dim(c.b.reshape(e, {n}), {n, m}, {0});
  Value rhs = c.b.broadcast_in_dim(c.b.reshape(s, {m}), {n, m}, {1});
  Value found = reduce_any(c.b, c.b.compare(Compare::kEQ, lhs, rhs), {1});
  if (a[3].b) found = c.b.not_(found);
  return {c.b.reshape(found, c.out().shape)};
}

// How many boundaries lie before each value: the lower (upper) bound of a
// binary search counts the entries b with !(b >= x) (!(b > x)). A count
// needs no order, so searchsorted's `sorter` changes nothing here.
Value count_before(Context& c, Value seq, Value x, bool right) {
  ElementType t = promote_types(seq.dtype(), x.dtype());
  seq = c.b.convert(seq, t);
  x = c.b.convert(x, t);
  int64_t k = seq.dim(seq.rank() - 1);
  std::vector<int64_t> shape = x.shape(), xdims, sdims;
  shape.push_back(k);
  for (int64_t i = 0; i < x.rank(); ++i) xdims.push_back(i);
  // A 1-d sequence serves every value; else leading dims pair up.
  for (int64_t i = 0; i < seq.rank(); ++i)
    sdims.push_back(i == seq.rank() - 1 ? x.rank() : i);
  Value bx = c.b.broadcast_in_dim(x, shape, xdims);
  Value bs = c.b.broadcast_in_dim(seq, shape, sdims);
  Value after = c.b.compare(right ? Compare::kGT : Compare::kGE, bs, bx);
  Value before = c.b.convert(c.b.not_(after), c.out().dtype);
  return reduce_sum(c.b, before, {x.rank()});
}

// bucketize.{Tensor, Scalar}(self, boundaries, *, out_int32, right).
Values bucketize(Context& c, const Args& a) {
  return {count_before(c, a[1].tensor, a[0].tensor, a[3].b)};
}

// searchsorted.{Tensor, Scalar}(sorted_sequence, self, *, out_int32, right,
// side, sorter).
Values searchsorted(Context& c, const Args& a) {
  bool right = a[3].b || (a[4].kind == Arg::kString && a[4].s == "right");
  return {count_before(c, a[0].tensor, a[1].tensor, right)};
}

// linspace(lo, hi, n) as CPU computes it: from the start for the first half,
// from the end for the second.
Value edges(Builder& b, Value lo, Value hi, int64_t n) {
  TensorType t{lo.dtype(), {n}};
  Value i = b.convert(b.iota(t, 0), lo.dtype());
  Value step = b.div(b.sub(hi, lo), b.constant(lo.dtype(), static_cast<double>(n - 1)));
  Value lo_n = b.broadcast_in_dim(lo, {n}, {}), hi_n = b.broadcast_in_dim(hi, {n}, {});
  Value step_n = b.broadcast_in_dim(step, {n}, {});
  Value from_start = b.add(lo_n, b.mul(step_n, i));
  Value back = b.sub(splat_like(b, static_cast<double>(n - 1), i), i);
  Value from_end = b.sub(hi_n, b.mul(step_n, back));
  Value first_half = b.compare(Compare::kLT, i, splat_like(b, static_cast<double>(n / 2), i));
  return b.select(first_half, from_start, from_end);
}

// histc(self, bins, min, max): min == max means the data's range (widened
// by one each way when that is empty too); bins are the linspace edges.
Values histc(Context& c, const Args& a) {
  Value x = a[0].tensor;
  ElementType t = x.dtype();
  int64_t n = 1, bins = a[1].i;
  for (int64_t d : x.shape()) n *= d;
  Value flat = c.b.reshape(x, {n});
  Value lo = c.b.convert(a[2].tensor, t), hi = c.b.convert(a[3].tensor, t);
  Value same = c.b.compare(Compare::kEQ, lo, hi);
  if (n > 0) {
    lo = c.b.select(same, reduce_min(c.b, flat, {0}), lo);
    hi = c.b.select(same, reduce_max(c.b, flat, {0}), hi);
  }
  Value empty = c.b.compare(Compare::kEQ, lo, hi);
  lo = c.b.select(empty, c.b.sub(lo, c.b.constant(t, 1)), lo);
  hi = c.b.select(empty, c.b.add(hi, c.b.constant(t, 1)), hi);
  Value e = edges(c.b, lo, hi, bins + 1);
  Value at_or_past = c.b.compare(Compare::kLE, c.b.broadcast_in_dim(e, {n, bins + 1}, {1}),
                                 c.b.broadcast_in_dim(flat, {n, bins + 1}, {0}));
  Value pos = reduce_sum(c.b, c.b.convert(at_or_past, kI64), {1});
  pos = c.b.sub(pos, splat_like(c.b, 1, pos));
  pos = c.b.min(pos, splat_like(c.b, static_cast<double>(bins - 1), pos));
  Value inside = c.b.and_(c.b.compare(Compare::kGE, flat, c.b.broadcast_in_dim(lo, {n}, {})),
                          c.b.compare(Compare::kLE, flat, c.b.broadcast_in_dim(hi, {n}, {})));
  pos = c.b.select(inside, pos, splat_like(c.b, -1, pos));
  Value bin = c.b.iota(TensorType{kI64, {n, bins}}, 1);
  Value hit = c.b.compare(Compare::kEQ, c.b.broadcast_in_dim(pos, {n, bins}, {0}), bin);
  Value counts = reduce_sum(c.b, c.b.convert(hit, ElementType::kF32), {0});
  return {c.b.convert(counts, c.out().dtype)};
}

// trace(self): the main diagonal's sum, accumulated like a sum.
Values trace(Context& c, const Args& a) {
  Value x = a[0].tensor;
  ElementType acc = accumulation_type(c.out().dtype);
  TensorType t{kI64, x.shape()};
  Value diag = c.b.compare(Compare::kEQ, c.b.iota(t, 0), c.b.iota(t, 1));
  Value v = c.b.convert(x, acc);
  v = c.b.select(diag, v, splat_like(c.b, 0, v));
  return {c.b.convert(reduce_sum(c.b, v, {0, 1}), c.out().dtype)};
}

// linalg_cross(self, other, dim).
Values linalg_cross(Context& c, const Args& a) {
  const TensorType& t = c.out();
  int64_t dim = wrap_dim(a[2].i, static_cast<int64_t>(t.shape.size()));
  Value x = coerce(c.b, a[0].tensor, t), y = coerce(c.b, a[1].tensor, t);
  auto part = [&](Value v, int64_t i) {
    std::vector<int64_t> lo(t.shape.size(), 0), hi = t.shape;
    lo[dim] = i;
    hi[dim] = i + 1;
    return c.b.slice(v, lo, hi);
  };
  Values r;
  for (int64_t i = 0; i < 3; ++i) {
    int64_t j = (i + 1) % 3, k = (i + 2) % 3;
    r.push_back(c.b.sub(c.b.mul(part(x, j), part(y, k)), c.b.mul(part(x, k), part(y, j))));
  }
  return {c.b.concatenate(r, dim)};
}

// pixel_shuffle(self, r): [*, C*r*r, H, W] -> [*, C, H*r, W*r].
Values pixel_shuffle(Context& c, const Args& a) {
  Value x = a[0].tensor;
  int64_t r = a[1].i, n = x.rank(), ch = x.dim(n - 3) / (r * r);
  std::vector<int64_t> s(x.shape().begin(), x.shape().end() - 3), perm;
  for (int64_t i = 0; i < n - 3; ++i) perm.push_back(i);
  s.insert(s.end(), {ch, r, r, x.dim(n - 2), x.dim(n - 1)});
  int64_t l = n - 3;
  perm.insert(perm.end(), {l, l + 3, l + 1, l + 4, l + 2});
  return {c.b.reshape(c.b.transpose(c.b.reshape(x, s), perm), c.out().shape)};
}

// pixel_unshuffle(self, r): [*, C, H*r, W*r] -> [*, C*r*r, H, W].
Values pixel_unshuffle(Context& c, const Args& a) {
  Value x = a[0].tensor;
  int64_t r = a[1].i, n = x.rank();
  std::vector<int64_t> s(x.shape().begin(), x.shape().end() - 3), perm;
  for (int64_t i = 0; i < n - 3; ++i) perm.push_back(i);
  s.insert(s.end(), {x.dim(n - 3), x.dim(n - 2) / r, r, x.dim(n - 1) / r, r});
  int64_t l = n - 3;
  perm.insert(perm.end(), {l, l + 2, l + 4, l + 1, l + 3});
  return {c.b.reshape(c.b.transpose(c.b.reshape(x, s), perm), c.out().shape)};
}

// channel_shuffle(self, groups): [N, g*k, *] -> [N, k*g, *] (transposed groups).
Values channel_shuffle(Context& c, const Args& a) {
  Value x = a[0].tensor;
  int64_t g = a[1].i, n = x.rank();
  std::vector<int64_t> s = {x.dim(0), g, x.dim(1) / g}, perm = {0, 2, 1};
  for (int64_t i = 2; i < n; ++i) {
    s.push_back(x.dim(i));
    perm.push_back(i + 1);
  }
  return {c.b.reshape(c.b.transpose(c.b.reshape(x, s), perm), c.out().shape)};
}

// {triu,tril}_indices(row, col, offset, ...): computed here, a constant.
LoweringFn triangle_indices(bool upper) {
  return [upper](Context& c, const Args& a) {
    std::vector<int64_t> rows, cols;
    for (int64_t i = 0; i < a[0].i; ++i)
      for (int64_t j = 0; j < a[1].i; ++j)
        if (upper ? j - i >= a[2].i : j - i <= a[2].i) {
          rows.push_back(i);
          cols.push_back(j);
        }
    if (rows.empty()) return Values{c.b.zeros(c.out())};
    rows.insert(rows.end(), cols.begin(), cols.end());
    Value v = c.b.reshape(c.b.constant_i64_vector(rows), c.out().shape);
    return Values{c.b.convert(v, c.out().dtype)};
  };
}

// The p-norm of x over `dims` (p = 0, inf, -inf, or any other value),
// accumulated in x's type.
Value p_norm(Builder& b, Value x, double p, const std::vector<int64_t>& dims) {
  Value ax = b.abs(x);
  if (std::isinf(p)) return p > 0 ? reduce_max(b, ax, dims) : reduce_min(b, ax, dims);
  if (p == 0) return reduce_sum(b, b.convert(b.compare(Compare::kNE, ax, splat_like(b, 0, ax)),
                                             x.dtype()), dims);
  if (p == 1) return reduce_sum(b, ax, dims);
  if (p == 2) return b.sqrt(reduce_sum(b, b.mul(ax, ax), dims));
  Value s = reduce_sum(b, b.pow(ax, splat_like(b, p, ax)), dims);
  return b.pow(s, splat_like(b, 1.0 / p, s));
}

std::vector<int64_t> all_but(int64_t rank, int64_t dim) {
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < rank; ++i)
    if (i != dim) dims.push_back(i);
  return dims;
}

// renorm(self, p, dim, maxnorm): slices along dim whose p-norm exceeds
// maxnorm are scaled to it (with PyTorch's 1e-7 guard).
Values renorm(Context& c, const Args& a) {
  Value x = a[0].tensor;
  ElementType acc = accumulation_type(x.dtype());
  int64_t dim = wrap_dim(a[2].i, x.rank());
  Value xf = c.b.convert(x, acc), ax = c.b.abs(xf);
  std::vector<int64_t> dims = all_but(x.rank(), dim);
  // p (> 0, checked by PyTorch) is a program input: pick inf or the power sum.
  Value p = c.b.convert(a[1].tensor, acc);
  Value sum = reduce_sum(c.b, c.b.pow(ax, c.b.broadcast_in_dim(p, ax.shape(), {})), dims);
  Value norm = c.b.pow(sum, c.b.broadcast_in_dim(c.b.div(c.b.constant(acc, 1), p), sum.shape(), {}));
  Value inf = c.b.compare(Compare::kEQ, p, c.b.constant(acc, INFINITY));
  norm = c.b.select(c.b.broadcast_in_dim(inf, norm.shape(), {}), reduce_max(c.b, ax, dims), norm);
  Value maxnorm = c.b.broadcast_in_dim(c.b.convert(a[3].tensor, acc), norm.shape(), {});
  Value scale = c.b.div(maxnorm, c.b.add(norm, splat_like(c.b, 1e-7, norm)));
  scale = c.b.select(c.b.compare(Compare::kGT, norm, maxnorm), scale, splat_like(c.b, 1, norm));
  scale = c.b.convert(scale, x.dtype());
  return {c.b.mul(x, c.b.broadcast_in_dim(scale, x.shape(), {dim}))};
}

// _weight_norm_interface(v, g, dim) -> (v * g / |v|, |v|), the norm taken
// over every dim but `dim` and kept as g's shape.
Values weight_norm(Context& c, const Args& a) {
  Value v = a[0].tensor, g = a[1].tensor;
  ElementType acc = accumulation_type(v.dtype());
  int64_t dim = wrap_dim(a[2].i, v.rank());
  Value vf = c.b.convert(v, acc);
  Value norm = c.b.sqrt(reduce_sum(c.b, c.b.mul(vf, vf), all_but(v.rank(), dim)));
  Value norm_b = c.b.broadcast_in_dim(norm, v.shape(), {dim});
  Value gf = c.b.broadcast_in_dim(c.b.reshape(c.b.convert(g, acc), {v.dim(dim)}), v.shape(), {dim});
  Value w = c.b.mul(vf, c.b.div(gf, norm_b));
  return {c.b.convert(w, c.out(0).dtype), c.b.convert(c.b.reshape(norm, c.out(1).shape),
                                                      c.out(1).dtype)};
}

// _weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim).
Values weight_norm_backward(Context& c, const Args& a) {
  Value gw = a[0].tensor, v = a[1].tensor;
  ElementType acc = accumulation_type(v.dtype());
  int64_t dim = wrap_dim(a[4].i, v.rank());
  int64_t k = v.dim(dim);
  auto along = [&](Value s) {
    return c.b.broadcast_in_dim(c.b.reshape(c.b.convert(s, acc), {k}), v.shape(), {dim});
  };
  Value gwf = c.b.convert(gw, acc), vf = c.b.convert(v, acc);
  Value norm = c.b.reshape(c.b.convert(a[3].tensor, acc), {k});
  Value dot = reduce_sum(c.b, c.b.mul(gwf, vf), all_but(v.rank(), dim));
  Value grad_g = c.b.div(dot, norm);
  Value g = along(a[2].tensor), nb = along(norm);
  Value coef = along(c.b.div(grad_g, norm));
  Value grad_v = c.b.mul(c.b.div(g, nb), c.b.sub(gwf, c.b.mul(vf, coef)));
  return {c.b.convert(grad_v, c.out(0).dtype),
          c.b.convert(c.b.reshape(grad_g, c.out(1).shape), c.out(1).dtype)};
}

// ---- distances ---------------------------------------------------------------

// d dist / d x1 for diff = x1 - x2 (CPU's per-p rules), times the gradient.
Value dist_grad(Builder& b, Value diff, Value dist, Value grad, double p) {
  Value zero = splat_like(b, 0, diff);
  Value sgn = b.unary("stablehlo.sign", diff), ad = b.abs(diff);
  Value dist_zero = b.compare(Compare::kEQ, dist, zero);
  if (p == 0) return zero;
  if (p == 1) return b.mul(grad, sgn);
  if (std::isinf(p))
    return b.mul(b.mul(grad, sgn), b.convert(b.compare(Compare::kEQ, ad, dist), diff.dtype()));
  if (p == 2) return b.select(dist_zero, zero, b.div(b.mul(grad, diff), dist));
  Value pm1 = splat_like(b, p - 1, diff);
  Value r;
  if (p < 2) {
    r = b.div(b.mul(b.mul(sgn, b.pow(ad, pm1)), grad), b.pow(dist, pm1));
    if (p < 1) dist_zero = b.or_(dist_zero, b.compare(Compare::kEQ, diff, zero));
  } else {
    r = b.div(b.mul(b.mul(diff, b.pow(ad, splat_like(b, p - 2, diff))), grad), b.pow(dist, pm1));
  }
  return b.select(dist_zero, zero, r);
}

// x1 [B.., P, M] and x2 [B.., R, M] broadcast to [B.., P, R, M].
std::pair<Value, Value> pairs(Builder& b, Value x1, Value x2) {
  int64_t n = x1.rank();
  std::vector<int64_t> shape = x1.shape(), d1, d2;
  shape.insert(shape.end() - 1, x2.dim(n - 2));
  for (int64_t i = 0; i < n; ++i) {
    d1.push_back(i < n - 1 ? i : n);
    d2.push_back(i < n - 2 ? i : i + 1);
  }
  return {b.broadcast_in_dim(x1, shape, d1), b.broadcast_in_dim(x2, shape, d2)};
}

Value with_batch(Builder& b, Value x, const std::vector<int64_t>& batch) {
  std::vector<int64_t> shape = batch;
  shape.insert(shape.end(), x.shape().end() - 2, x.shape().end());
  return b.broadcast_to(x, shape);
}

// _cdist_forward(x1, x2, p, compute_mode).
Values cdist(Context& c, const Args& a) {
  const auto& out = c.out().shape;
  std::vector<int64_t> batch(out.begin(), out.end() - 2);
  auto [x1, x2] = pairs(c.b, with_batch(c.b, a[0].tensor, batch), with_batch(c.b, a[1].tensor, batch));
  Value diff = c.b.sub(x1, x2);
  return {p_norm(c.b, diff, a[2].d, {diff.rank() - 1})};
}

// _cdist_backward(grad, x1, x2, p, cdist) -> grad of x1.
Values cdist_backward(Context& c, const Args& a) {
  std::vector<int64_t> batch(c.out().shape.begin(), c.out().shape.end() - 2);
  auto [x1, x2] = pairs(c.b, with_batch(c.b, a[1].tensor, batch), with_batch(c.b, a[2].tensor, batch));
  Value diff = c.b.sub(x1, x2);
  int64_t n = diff.rank();
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < n - 1; ++i) keep.push_back(i);
  Value dist = c.b.broadcast_in_dim(a[4].tensor, diff.shape(), keep);
  Value grad = c.b.broadcast_in_dim(a[0].tensor, diff.shape(), keep);
  return {reduce_sum(c.b, dist_grad(c.b, diff, dist, grad, a[3].d), {n - 2})};
}

// The row pairs i < j of an n-row matrix, in pdist's order.
std::pair<std::vector<int64_t>, std::vector<int64_t>> row_pairs(int64_t n) {
  std::vector<int64_t> is, js;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) {
      is.push_back(i);
      js.push_back(j);
    }
  return {is, js};
}

// _pdist_forward(self, p).
Values pdist(Context& c, const Args& a) {
  auto [is, js] = row_pairs(a[0].tensor.dim(0));
  if (is.empty()) return {c.b.zeros(c.out())};
  Value x = a[0].tensor;
  Value diff = c.b.sub(take_static(c.b, x, 0, is), take_static(c.b, x, 0, js));
  return {p_norm(c.b, diff, a[1].d, {1})};
}

// _pdist_backward(grad, self, p, pdist).
Values pdist_backward(Context& c, const Args& a) {
  Value x = a[1].tensor;
  auto [is, js] = row_pairs(x.dim(0));
  if (is.empty()) return {c.b.zeros(c.out())};
  Value diff = c.b.sub(take_static(c.b, x, 0, is), take_static(c.b, x, 0, js));
  Value dist = c.b.broadcast_in_dim(a[3].tensor, diff.shape(), {0});
  Value grad = c.b.broadcast_in_dim(a[0].tensor, diff.shape(), {0});
  Value g = dist_grad(c.b, diff, dist, grad, a[2].d);
  return {c.b.sub(add_static(c.b, g, 0, is, x.dim(0)), add_static(c.b, g, 0, js, x.dim(0)))};
}

// ---- im2col / col2im ---------------------------------------------------------

// The sliding-window geometry of F.unfold / F.fold over the last two dims.
struct Windows {
  std::vector<int64_t> k, dil, pad, stride, in, out;  // 2 each
  int64_t count() const { return k[0] * k[1]; }
};

Windows windows(const Args& a, size_t first, const std::vector<int64_t>& in) {
  Windows w{a[first].ints, a[first + 1].ints, a[first + 2].ints, a[first + 3].ints, in, {}};
  for (int i = 0; i < 2; ++i)
    w.out.push_back((in[i] + 2 * w.pad[i] - w.dil[i] * (w.k[i] - 1) - 1) / w.stride[i] + 1);
  return w;
}

Value batched(Builder& b, Value x, int64_t rank) {
  if (x.rank() == rank) return x;
  std::vector<int64_t> s = x.shape();
  s.insert(s.begin(), 1);
  return b.reshape(x, s);
}

// im2col(self, kernel_size, dilation, padding, stride): [N, C, H, W] ->
// [N, C*kh*kw, L], one strided slice of the padded input per kernel tap.
Values im2col(Context& c, const Args& a) {
  Value x = batched(c.b, a[0].tensor, 4);
  int64_t n = x.dim(0), ch = x.dim(1);
  Windows w = windows(a, 1, {x.dim(2), x.dim(3)});
  Value xp = c.b.pad(x, c.b.constant(x.dtype(), 0), {0, 0, w.pad[0], w.pad[1]},
                     {0, 0, w.pad[0], w.pad[1]});
  Values taps;
  for (int64_t i = 0; i < w.k[0]; ++i)
    for (int64_t j = 0; j < w.k[1]; ++j) {
      int64_t h0 = i * w.dil[0], w0 = j * w.dil[1];
      Value t = c.b.slice(xp, {0, 0, h0, w0},
                          {n, ch, h0 + (w.out[0] - 1) * w.stride[0] + 1,
                           w0 + (w.out[1] - 1) * w.stride[1] + 1},
                          {1, 1, w.stride[0], w.stride[1]});
      taps.push_back(c.b.reshape(t, {n, ch, 1, w.out[0] * w.out[1]}));
    }
  return {c.b.reshape(c.b.concatenate(taps, 2), c.out().shape)};
}

// col2im(self, output_size, kernel_size, dilation, padding, stride): the
// adjoint of im2col; each tap is spread back with interior padding.
Values col2im(Context& c, const Args& a) {
  Value x = batched(c.b, a[0].tensor, 3);
  Windows w = windows(a, 2, a[1].ints);
  int64_t n = x.dim(0), ch = x.dim(1) / w.count();
  Value cols = c.b.reshape(x, {n, ch, w.count(), w.out[0], w.out[1]});
  ElementType acc = accumulation_type(x.dtype());
  int64_t hp = w.in[0] + 2 * w.pad[0], wp = w.in[1] + 2 * w.pad[1];
  Value sum = c.b.zeros(TensorType{acc, {n, ch, hp, wp}});
  Value zero = c.b.constant(acc, 0);
  for (int64_t i = 0; i < w.k[0]; ++i)
    for (int64_t j = 0; j < w.k[1]; ++j) {
      int64_t t = i * w.k[1] + j, h0 = i * w.dil[0], w0 = j * w.dil[1];
      Value tap = c.b.reshape(c.b.slice(cols, {0, 0, t, 0, 0}, {n, ch, t + 1, w.out[0], w.out[1]}),
                              {n, ch, w.out[0], w.out[1]});
      int64_t h_hi = hp - h0 - (w.out[0] - 1) * w.stride[0] - 1;
      int64_t w_hi = wp - w0 - (w.out[1] - 1) * w.stride[1] - 1;
      sum = c.b.add(sum, c.b.pad(c.b.convert(tap, acc), zero, {0, 0, h0, w0}, {0, 0, h_hi, w_hi},
                                 {0, 0, w.stride[0] - 1, w.stride[1] - 1}));
    }
  Value y = c.b.slice(sum, {0, 0, w.pad[0], w.pad[1]},
                      {n, ch, w.pad[0] + w.in[0], w.pad[1] + w.in[1]});
  return {c.b.reshape(c.b.convert(y, c.out().dtype), c.out().shape)};
}

}  // namespace

void register_fft(Registry& r);
void register_misc_sampling(Registry& r);

void register_misc(Registry& r) {
  r.add("aten::copy", copy);
  for (const char* o : {"Tensor_Tensor", "Tensor_Scalar", "Scalar_Tensor"})
    r.add(std::string("aten::isin.") + o, isin);
  r.add("aten::bucketize.Tensor", bucketize);
  r.add("aten::bucketize.Scalar", bucketize);
  r.add("aten::searchsorted.Tensor", searchsorted);
  r.add("aten::searchsorted.Scalar", searchsorted);
  r.add("aten::histc", histc);
  r.add("aten::trace", trace);
  r.add("aten::linalg_cross", linalg_cross);
  r.add("aten::pixel_shuffle", pixel_shuffle);
  r.add("aten::pixel_unshuffle", pixel_unshuffle);
  r.add("aten::channel_shuffle", channel_shuffle);
  r.add("aten::triu_indices", triangle_indices(true));
  r.add("aten::tril_indices", triangle_indices(false));
  r.add("aten::renorm", renorm);
  r.add("aten::_weight_norm_interface", weight_norm);
  r.add("aten::_weight_norm_interface_backward", weight_norm_backward);
  r.add("aten::_cdist_forward", cdist);
  r.add("aten::_cdist_backward", cdist_backward);
  r.add("aten::_pdist_forward", pdist);
  r.add("aten::_pdist_backward", pdist_backward);
  r.add("aten::im2col", im2col);
  r.add("aten::col2im", col2im);
  register_misc_sampling(r);
  register_fft(r);
}

}  // namespace torch_tpu::lowering
