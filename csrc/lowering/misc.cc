// Ops that fit no larger family: functional copy, set membership and
// searching (isin, bucketize, searchsorted, histc), trace, cross products,
// pixel/channel shuffles, triangle index factories, renorm, weight norm,
// distances (cdist, pdist), im2col/col2im and embedding bags,
// with their backward ops. Bicubic and grid sampling are in
// misc_sampling.cc, FFTs in fft.cc; all register through register_misc.
#include <algorithm>
#include <cmath>
#include <tuple>

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

// The bin of each element as CPU's histc finds it: linear interpolation,
// trunc((x - lo) * bins / (hi - lo)), in the input dtype's arithmetic (each
// 16-bit step rounds, as c10::Half and c10::BFloat16 operators do), the
// last edge falling into the last bin.
Value histc_bin(Builder& b, Value x, Value lo, Value hi, int64_t bins) {
  ElementType t = x.dtype(), ct = accumulation_type(t);
  auto r = [&](Value v) { return round_like(b, v, t); };
  Value l = b.broadcast_in_dim(b.convert(lo, ct), x.shape(), {});
  Value h = b.broadcast_in_dim(b.convert(hi, ct), x.shape(), {});
  Value scaled = r(b.mul(r(b.sub(b.convert(x, ct), l)), r(splat(b, static_cast<double>(bins), ct, x.shape()))));
  Value pos = b.convert(r(b.div(scaled, r(b.sub(h, l)))), kI64);
  return b.min(pos, splat_like(b, static_cast<double>(bins - 1), pos));
}

// histc(self, bins, min, max): min == max means the data's range (widened
// by one each way when that is empty too).
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
  Value pos = histc_bin(c.b, flat, lo, hi, bins);
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
  // Complex slices are measured by their elements' magnitudes.
  bool complex = hlo::is_complex(x.dtype());
  ElementType acc = accumulation_type(complex ? part_type(x.dtype()) : x.dtype());
  int64_t dim = wrap_dim(a[2].i, x.rank());
  Value ax = c.b.convert(c.b.abs(x), acc);
  std::vector<int64_t> dims = all_but(x.rank(), dim);
  // p (> 0, checked by PyTorch) is a program input: pick inf or the power sum.
  Value p = c.b.convert(a[1].tensor, acc);
  Value sum = reduce_sum(c.b, c.b.pow(ax, c.b.broadcast_in_dim(p, ax.shape(), {})), dims);
  Value inv_p = c.b.div(c.b.constant(acc, 1), p);
  Value norm = c.b.pow(sum, c.b.broadcast_in_dim(inv_p, sum.shape(), {}));
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
  auto [x1, x2] =
      pairs(c.b, with_batch(c.b, a[0].tensor, batch), with_batch(c.b, a[1].tensor, batch));
  Value diff = c.b.sub(x1, x2);
  return {p_norm(c.b, diff, a[2].d, {diff.rank() - 1})};
}

// _cdist_backward(grad, x1, x2, p, cdist) -> grad of x1.
Values cdist_backward(Context& c, const Args& a) {
  if (a[0].tensor.type().numel() == 0 || a[1].tensor.type().numel() == 0 ||
      a[2].tensor.type().numel() == 0)
    return {c.b.zeros(c.out())};  // as CPU: nothing to differentiate
  std::vector<int64_t> batch(c.out().shape.begin(), c.out().shape.end() - 2);
  auto [x1, x2] =
      pairs(c.b, with_batch(c.b, a[1].tensor, batch), with_batch(c.b, a[2].tensor, batch));
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

// ---- embedding bags ----------------------------------------------------------
//
// _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
// per_sample_weights, include_last_offset, padding_idx) -> (output,
// offset2bag, bag_size, max_indices). Modes: 0 sum, 1 mean, 2 max. Output
// shapes are the meta function's (the CUDA layout); values follow CPU where
// the shapes agree: bag_size is zero in sum mode, empty bags give zeros.

enum BagMode { kSum = 0, kMean = 1, kMax = 2 };

// Rows of table [V, D] at i64 idx [n] -> [n, D] (positions clamped).
Value rows(Builder& b, Value table, Value idx) {
  int64_t n = idx.dim(0), d = table.dim(1);
  hlo::GatherDims g;
  g.offset_dims = {1};
  g.collapsed_slice_dims = g.start_index_map = {0};
  g.index_vector_dim = 1;
  return b.gather(table, b.reshape(idx, {n, 1}), g, {1, d}, TensorType{table.dtype(), {n, d}});
}

// acc [R, ...] with updates [n, ...] combined into rows idx [n]; rows out of
// range are dropped (how excluded entries are skipped).
Value into_rows(Builder& b, Value acc, Value idx, Value updates, bool max = false) {
  hlo::ScatterDims d;
  for (int64_t i = 1; i < updates.rank(); ++i) d.update_window_dims.push_back(i);
  d.inserted_window_dims = d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = 1;
  return b.scatter(acc, b.reshape(idx, {idx.dim(0), 1}), updates, d,
                   [max](Builder& r, const Values& v) {
                     return Values{max ? r.max(v[0], v[1]) : r.add(v[0], v[1])};
                   });
}

// Which bag each index falls in, and whether it counts (not padding_idx).
struct Bags {
  Value idx, bag, keep;  // i64 [n], i64 [n], i1 [n]
  int64_t count = 0;
};

// Row `v` where the index counts, else a row past any table (dropped).
Value kept(Builder& b, const Bags& g, Value v) {
  return b.select(g.keep, v, splat_like(b, static_cast<double>(1LL << 40), v));
}

Bags bags(Builder& b, Value indices, Value offsets, int64_t count, int64_t padding_idx) {
  Bags r;
  r.count = count;
  r.idx = b.convert(indices, kI64);
  int64_t n = r.idx.dim(0);
  Value offs = b.convert(b.slice(offsets, {0}, {count}), kI64);
  Value pos = b.iota(TensorType{kI64, {n, count}}, 0);
  Value started = b.compare(Compare::kLE, b.broadcast_in_dim(offs, {n, count}, {1}), pos);
  r.bag = reduce_sum(b, b.convert(started, kI64), {1});
  r.bag = b.sub(r.bag, splat_like(b, 1, r.bag));
  r.keep = b.compare(Compare::kGE, r.bag, splat_like(b, 0, r.bag));
  if (padding_idx >= 0)
    r.keep = b.and_(r.keep, b.compare(Compare::kNE, r.idx,
                                      splat_like(b, static_cast<double>(padding_idx), r.idx)));
  if (offsets.dim(0) > count) {  // include_last_offset: the last offset ends the last bag
    Value end = b.broadcast_in_dim(
        b.reshape(b.convert(b.slice(offsets, {count}, {count + 1}), kI64), {}), {n}, {});
    r.keep = b.and_(r.keep, b.compare(Compare::kLT, b.iota(TensorType{kI64, {n}}, 0), end));
  }
  return r;
}

// Kept indices per bag, as `t` (first `count` of a longer output are set).
Value bag_sizes(Builder& b, const Bags& g, const TensorType& t) {
  Value ones = b.full(TensorType{kI64, {g.bag.dim(0)}}, 1);
  Value n = into_rows(b, b.zeros(TensorType{kI64, {g.count}}), kept(b, g, g.bag), ones);
  n = b.pad(n, b.constant_int(kI64, 0), {0}, {t.shape[0] - g.count});
  return b.convert(n, t.dtype);
}

// Max mode: the extremes per bag and feature, and which weight row gave each
// (the first in order on ties, as CPU).
std::pair<Value, Value> bag_max(Builder& b, const Bags& g, Value vals, Value empty) {
  int64_t n = vals.dim(0), d = vals.dim(1);
  TensorType out{vals.dtype(), {g.count, d}};
  Value m = into_rows(b, b.full(out, lowest(vals.dtype())), kept(b, g, g.bag), vals, true);
  m = b.select(empty, b.zeros(out), m);
  Value is_max = b.compare(Compare::kEQ, vals, rows(b, m, g.bag));
  // The first position holding the max: a min-scatter of positions (n = none).
  Value pos = b.iota(TensorType{kI64, {n, d}}, 0);
  pos = b.select(is_max, pos, splat_like(b, static_cast<double>(n), pos));
  hlo::ScatterDims sd;
  sd.update_window_dims = {1};
  sd.inserted_window_dims = sd.scatter_dims_to_operand_dims = {0};
  sd.index_vector_dim = 1;
  Value first = b.scatter(b.full(TensorType{kI64, {g.count, d}}, static_cast<double>(n)),
                          b.reshape(kept(b, g, g.bag), {n, 1}), pos, sd,
                          [](Builder& r, const Values& v) { return Values{r.min(v[0], v[1])}; });
  first = b.min(first, splat_like(b, static_cast<double>(n - 1), first));
  hlo::GatherDims gd;
  gd.collapsed_slice_dims = gd.start_index_map = {0};
  gd.index_vector_dim = 2;
  Value which = b.gather(g.idx, b.reshape(first, {g.count, d, 1}), gd, {1},
                         TensorType{kI64, {g.count, d}});
  return {m, b.select(empty, b.zeros(which.type()), which)};
}

Values embedding_bag(Context& c, const Args& a) {
  Value weight = a[0].tensor;
  int64_t mode = a[4].i, count = c.out(0).shape[0];
  Bags g = bags(c.b, a[1].tensor, a[2].tensor, count, a[8].i);
  ElementType acc = accumulation_type(weight.dtype());
  Value vals = rows(c.b, c.b.convert(weight, acc), g.idx);
  if (!a[6].none())
    vals = c.b.mul(vals, c.b.broadcast_in_dim(c.b.convert(a[6].tensor, acc), vals.shape(), {0}));
  Value sizes = bag_sizes(c.b, g, c.out(2));
  Value n = c.b.convert(c.b.slice(sizes, {0}, {count}), acc);
  Value n2d = c.b.broadcast_in_dim(n, {count, weight.dim(1)}, {0});
  Value out, max_indices;
  if (mode == kMax) {
    Value empty = c.b.compare(Compare::kEQ, n2d, splat_like(c.b, 0, n2d));
    std::tie(out, max_indices) = bag_max(c.b, g, vals, empty);
  } else {
    out = into_rows(c.b, c.b.zeros(TensorType{acc, {count, weight.dim(1)}}), kept(c.b, g, g.bag),
                    vals);
    if (mode == kMean) out = c.b.div(out, c.b.max(n2d, splat_like(c.b, 1, n2d)));
    if (mode == kSum) sizes = c.b.zeros(c.out(2));
    max_indices = c.out(3).shape == c.out(2).shape ? sizes : c.b.zeros(c.out(3));
  }
  return {c.b.convert(out, c.out(0).dtype), c.b.convert(g.bag, c.out(1).dtype), sizes,
          c.b.convert(max_indices, c.out(3).dtype)};
}

// How often each index occurs among all of them (scale_grad_by_freq).
Value frequency(Builder& b, Value idx) {
  int64_t n = idx.dim(0);
  Value same = b.compare(Compare::kEQ, b.broadcast_in_dim(idx, {n, n}, {0}),
                         b.broadcast_in_dim(idx, {n, n}, {1}));
  return reduce_sum(b, b.convert(same, kI64), {1});
}

// _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size,
// maximum_indices, num_weights, scale_grad_by_freq, mode,
// per_sample_weights, padding_idx).
Values embedding_bag_dense_backward(Context& c, const Args& a) {
  Value grad = c.b.convert(a[0].tensor, accumulation_type(a[0].tensor.dtype()));
  int64_t v = a[5].i, d = grad.dim(1), count = grad.dim(0), mode = a[7].i;
  Value zeros = c.b.zeros(TensorType{grad.dtype(), {v, d}});
  Value sizes = c.b.slice(c.b.convert(a[3].tensor, kI64), {0}, {count});
  Value gw;
  if (mode == kMax) {
    Value mi = c.b.convert(a[4].tensor, kI64);
    Value live = c.b.broadcast_in_dim(c.b.compare(Compare::kGT, sizes, splat_like(c.b, 0, sizes)),
                                      {count, d}, {0});
    mi = c.b.select(live, mi, splat_like(c.b, static_cast<double>(v), mi));  // dropped
    Value feature = c.b.iota(TensorType{kI64, {count, d}}, 1);
    Value at = c.b.concatenate(
        {c.b.reshape(mi, {count, d, 1}), c.b.reshape(feature, {count, d, 1})}, 2);
    hlo::ScatterDims sd;
    sd.inserted_window_dims = sd.scatter_dims_to_operand_dims = {0, 1};
    sd.index_vector_dim = 2;
    gw = c.b.scatter(zeros, at, grad, sd,
                     [](Builder& r, const Values& x) { return Values{r.add(x[0], x[1])}; });
  } else {
    Bags g;
    g.idx = c.b.convert(a[1].tensor, kI64);
    g.bag = c.b.convert(a[2].tensor, kI64);
    g.keep = c.b.compare(Compare::kNE, g.idx, splat_like(c.b, static_cast<double>(a[9].i), g.idx));
    Value vals = rows(c.b, grad, g.bag);
    if (!a[8].none())
      vals = c.b.mul(vals, c.b.broadcast_in_dim(c.b.convert(a[8].tensor, grad.dtype()),
                                                vals.shape(), {0}));
    if (mode == kMean) {
      Value n = c.b.convert(rows(c.b, c.b.reshape(sizes, {count, 1}), g.bag), grad.dtype());
      vals = c.b.div(vals, c.b.broadcast_in_dim(c.b.reshape(n, {n.dim(0)}), vals.shape(), {0}));
    }
    if (a[6].b) {
      Value f = c.b.convert(frequency(c.b, g.idx), grad.dtype());
      vals = c.b.div(vals, c.b.broadcast_in_dim(f, vals.shape(), {0}));
    }
    gw = into_rows(c.b, zeros, kept(c.b, g, g.idx), vals);
  }
  return {c.b.convert(gw, c.out().dtype)};
}

// _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size,
// maximum_indices, num_weights, scale_grad_by_freq, mode, sparse,
// per_sample_weights, padding_idx): the dense backward.
Values embedding_bag_backward(Context& c, const Args& a) {
  if (a[9].b) throw Unsupported("_embedding_bag_backward: sparse gradients are not lowered");
  Args d = {a[0], a[1], a[3], a[4], a[5], a[6], a[7], a[8], a[10], a[11]};
  return embedding_bag_dense_backward(c, d);
}

// _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets,
// offset2bag, mode, padding_idx): grad of the bag . weight row, per index.
Values embedding_bag_psw_backward(Context& c, const Args& a) {
  ElementType acc = accumulation_type(a[0].tensor.dtype());
  Value idx = c.b.convert(a[2].tensor, kI64), bag = c.b.convert(a[4].tensor, kI64);
  Value g = rows(c.b, c.b.convert(a[0].tensor, acc), bag);
  Value w = rows(c.b, c.b.convert(a[1].tensor, acc), idx);
  Value r = reduce_sum(c.b, c.b.mul(g, w), {1});
  if (a[6].i >= 0) {
    Value pad = splat_like(c.b, static_cast<double>(a[6].i), idx);
    r = c.b.select(c.b.compare(Compare::kEQ, idx, pad), splat_like(c.b, 0, r), r);
  }
  return {c.b.convert(r, c.out().dtype)};
}

}  // namespace

void register_fft(Registry& r);
void register_misc_sampling(Registry& r);

void register_misc(Registry& r) {
  r.add("aten::copy", copy);
  // torch.tpu.ops.optimization_barrier: an identity XLA may not move
  // computation across, fuse through or deduplicate.
  r.add("tpu::_optimization_barrier", [](Context& c, const Args& a) {
    return c.b.op("stablehlo.optimization_barrier", a[0].tensors,
                  std::vector<TensorType>(c.outputs.begin(), c.outputs.end()));
  });
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
  r.add("aten::_embedding_bag", embedding_bag);
  r.add("aten::_embedding_bag_forward_only", embedding_bag);
  r.add("aten::_embedding_bag_backward", embedding_bag_backward);
  r.add("aten::_embedding_bag_dense_backward", embedding_bag_dense_backward);
  r.add("aten::_embedding_bag_per_sample_weights_backward", embedding_bag_psw_backward);
  register_misc_sampling(r);
  register_fft(r);
}

}  // namespace torch_tpu::lowering
