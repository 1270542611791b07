// Matrix functions: linalg_matrix_exp by scaling and squaring. A is scaled by
// 2^-s so that its 1-norm is within a bound, the exponential of the scaled
// matrix is a degree-18 Taylor polynomial (Horner form, truncation error
// below the dtype's rounding), and the result is squared s times, s per
// matrix.
// Products are full f32/f64 contractions; 16-bit inputs compute in f32.
#include <cmath>

#include "linalg_common.h"

namespace torch_tpu::lowering {

namespace {

using namespace linalg;

constexpr int kTaylorDegree = 18;
constexpr int kMaxSquarings = 64;

// The largest ‖x‖₁ at which the degree-18 Taylor polynomial is accurate to
// the dtype's rounding; CPU PyTorch scales to these same bounds, so the two
// square equally often and their rounding errors grow alike.
double taylor_bound(ElementType t) { return t == ElementType::kF64 ? 1.09 : 3.01; }

// Per matrix of x [B, n, n]: the number of halvings s that bring ‖x‖₁ within
// the Taylor bound.
Value squarings(Builder& b, Value x) {
  Value norm = reduce_max(b, reduce_sum(b, b.abs(x), {1}), {1});
  Value half = splat_like(b, taylor_bound(x.dtype()), norm);
  Value s = b.ceil(b.div(b.log(b.div(norm, half)), splat_like(b, std::log(2.0), norm)));
  s = b.select(b.is_finite(s), s, b.select(b.compare(Compare::kGT, norm, half),
                                            splat_like(b, kMaxSquarings, s), splat_like(b, 0, s)));
  return b.convert(b.clamp(splat_like(b, 0, s), s, splat_like(b, kMaxSquarings, s)), kI32);
}

Value taylor_exp(Builder& b, Value x) {
  Value id = eye(b, x.dtype(), {x.dim(0)}, x.dim(1), x.dim(1));
  Value p = id;
  for (int k = kTaylorDegree; k >= 1; --k)
    p = b.add(id, b.div(matmul(b, x, p), splat_like(b, k, p)));
  return p;
}

Value matrix_exp_flat(Builder& b, Value x) {
  int64_t B = x.dim(0);
  Value s = squarings(b, x);
  Value scale = b.pow(splat(b, 2, x.dtype(), {B}), b.neg(b.convert(s, x.dtype())));
  Value p = taylor_exp(b, b.mul(x, b.broadcast_in_dim(scale, x.shape(), {0})));
  std::vector<int64_t> all{0};
  Value most = reduce_max(b, s, all);
  Values out = b.while_loop(
      {b.constant(kI32, 0), most, s, p},
      [](Builder& w, const Values& st) { return Values{w.compare(Compare::kLT, st[0], st[1])}; },
      [](Builder& w, const Values& st) {
        Value live = w.compare(Compare::kLT, w.broadcast_to(st[0], st[2].shape()), st[2]);
        Value sq = matmul(w, st[3], st[3]);
        Value next = w.select(w.broadcast_in_dim(live, st[3].shape(), {0}), sq, st[3]);
        return Values{w.add(st[0], w.constant(kI32, 1)), st[1], st[2], next};
      });
  return out[3];
}

Values matrix_exp(Context& c, const Args& a) {
  Value x = a[0].tensor;
  require_real(c, x);
  int64_t r = x.rank(), n = x.dim(r - 1), B = 1;
  for (int64_t d = 0; d < r - 2; ++d) B *= x.dim(d);
  if (B * n == 0) return {x};
  ElementType compute = x.dtype() == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
  Value e = matrix_exp_flat(c.b, c.b.reshape(c.b.convert(x, compute), {B, n, n}));
  return {c.b.convert(c.b.reshape(e, x.shape()), x.dtype())};
}

}  // namespace

void register_linalg_matfn(Registry& r) {
  r.add("aten::linalg_matrix_exp", matrix_exp);
}

}  // namespace torch_tpu::lowering
