// geqrf and linalg_lstsq on the Householder QR of linalg_qr.cc. lstsq solves
// full-rank systems with QR (A = QR for m >= n; the minimum-norm solution
// through Aᵀ = QR for m < n), which is the answer of every LAPACK driver
// (gels, gelsy, gelsd, gelss) for a full-rank A; residuals, rank and singular
// values follow each driver's conventions as CPU reports them. The output
// shapes come from the meta functions in csrc/aten/linalg_meta.cc.
#include <limits>

#include "linalg_common.h"

namespace torch_tpu::lowering {

namespace {

using namespace linalg;

Values geqrf(Context& c, const Args& a) {
  Value x = a[0].tensor;
  require_floating(c, x);
  Values qr = geqrf_packed(c.b, flat3(c.b, x));
  return {c.b.reshape(qr[0], c.out(0).shape), c.b.reshape(qr[1], c.out(1).shape)};
}

// Rows [lo, hi) of matrices [B, r, c].
Value rows(Builder& b, Value x, int64_t lo, int64_t hi) {
  return b.slice(x, {0, lo, 0}, {x.dim(0), hi, x.dim(2)});
}

// Leading square block [B, k, k] of matrices [B, r, c].
Value square(Builder& b, Value x, int64_t k) { return b.slice(x, {0, 0, 0}, {x.dim(0), k, k}); }

struct Solved {
  Value x;      // [B, n, k]
  Value resid;  // [B, k]: squared residuals (m > n only)
  Value diag;   // [B, min(m, n)]: R's diagonal (the rank estimate)
};

// A [B, m, n] with m >= n: x = R⁻¹ (Qᴴb)[:n]; residuals from (Qᴴb)[n:].
Solved solve_tall(Builder& b, Value a, Value rhs) {
  int64_t m = a.dim(1), n = a.dim(2);
  Values qr = geqrf_packed(b, a);
  Value q = householder_q(b, qr[0], qr[1], m);
  Value qtb = matmul(b, adjoint_last(b, q), rhs);
  Value r = square(b, qr[0], n);
  Value x = b.triangular_solve(r, rows(b, qtb, 0, n), true, /*lower=*/false, false, hlo::Transpose::kNone);
  Value tail = rows(b, qtb, n, m);
  return {x, reduce_sum(b, abs2(b, tail), {1}), diagonal(b, r)};
}

// A [B, m, n] with m < n: Aᴴ = QR, so A = RᴴQᴴ and the minimum-norm solution
// is x = Q R⁻ᴴ b.
Solved solve_wide(Builder& b, Value a, Value rhs) {
  int64_t m = a.dim(1);
  Values qr = geqrf_packed(b, adjoint_last(b, a));
  Value q = householder_q(b, qr[0], qr[1], m);
  Value r = square(b, qr[0], m);
  Value y = b.triangular_solve(r, rhs, true, /*lower=*/false, false, hlo::Transpose::kAdjoint);
  return {matmul(b, q, y), Value(), diagonal(b, r)};
}

// The number of entries of `v` [B, k] above rcond times the largest (CPU's
// rule for gelsd/gelss on singular values; on |diag R| for gelsy).
Value count_rank(Builder& b, Value v, double rcond) {
  Value mags = b.abs(v);
  Value top = reduce_max(b, mags, {1});
  Value tol = b.mul(b.broadcast_in_dim(top, mags.shape(), {0}), splat_like(b, rcond, mags));
  Value above = b.convert(b.compare(Compare::kGT, mags, tol), ElementType::kI64);
  return reduce_sum(b, above, {1});
}

// The singular values of `x` [.., m, n] through the registry's SVD.
Value singular_values(Context& c, Value x, const TensorType& s) {
  const LoweringFn* svd = Registry::get().find("aten::_linalg_svd");
  if (svd == nullptr) throw Unsupported(c.op + ": no SVD lowering");
  Args args(4);
  args[0].kind = Arg::kTensor;
  args[0].tensor = x;
  args[1].kind = args[2].kind = Arg::kBool;  // full_matrices = compute_uv = false
  TensorType none{x.dtype(), {0}};
  const std::vector<TensorType> types{none, s, none};
  Context sc{c.b, types, c.precision, c.op, c.target};
  return (*svd)(sc, args)[1];
}

struct LstsqShape {
  std::vector<int64_t> batch;  // broadcast batch of A and b
  int64_t m, n, k;
  bool vector;                 // b is [.., m]
};

LstsqShape lstsq_shape(const Context& c, Value a, Value rhs) {
  LstsqShape s;
  s.vector = rhs.rank() == a.rank() - 1;
  s.m = a.dim(a.rank() - 2);
  s.n = a.dim(a.rank() - 1);
  s.k = s.vector ? 1 : rhs.dim(rhs.rank() - 1);
  const auto& sol = c.out(0).shape;
  s.batch.assign(sol.begin(), sol.end() - (s.vector ? 1 : 2));
  return s;
}

Value as_batch(Builder& b, Value x, const std::vector<int64_t>& batch, int64_t r, int64_t cols) {
  auto shape = batch;
  shape.push_back(r);
  shape.push_back(cols);
  return b.reshape(b.broadcast_to(x, shape), {product(batch), r, cols});
}

double default_rcond(ElementType t, const LstsqShape& s) {
  bool f64 = t == ElementType::kF64 || t == ElementType::kC128;
  double eps = f64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
  return eps * static_cast<double>(std::max(s.m, s.n));
}

// |diag R| of A's own batch (gelsy's rank is not broadcast with b's batch).
Value own_diag(Builder& b, Value am, const LstsqShape& s, const Solved& r) {
  if (batch_dims(am) == s.batch) return r.diag;
  Value af = flat3(b, am);
  return diagonal(b, geqrf_packed(b, s.m >= s.n ? af : adjoint_last(b, af))[0]);
}

// The rank output: from singular values (gelsd, gelss) or R's diagonal (gelsy).
Value rank_of(Context& c, Value am, Value sv, const LstsqShape& s, const Solved& r,
              bool svd_driver, double rcond) {
  const TensorType& t = c.out(2);
  int64_t kk = std::min(s.m, s.n);
  Value v = svd_driver ? sv : own_diag(c.b, am, s, r);
  return c.b.reshape(count_rank(c.b, c.b.reshape(v, {t.numel(), kk}), rcond), t.shape);
}

// An empty system: zero solution; residuals |b|² for gelsd/gelss (CPU's tail
// rows are all of b), zero for gels.
Values lstsq_empty(Context& c, Value rhs, const LstsqShape& s, const std::string& driver) {
  Value res = c.b.zeros(c.out(1));
  if (c.out(1).numel() > 0 && driver != "gels") {
    Value bb = c.b.broadcast_to(rhs, [&] { auto v = s.batch; v.push_back(s.m); v.push_back(s.k); return v; }());
    res = c.b.reshape(reduce_sum(c.b, abs2(c.b, bb), {static_cast<int64_t>(s.batch.size())}), c.out(1).shape);
  }
  return {c.b.zeros(c.out(0)), res, c.b.zeros(c.out(2)), c.b.zeros(c.out(3))};
}

// linalg_lstsq(A, b, rcond, driver) → (solution, residuals, rank, singular_values).
Values lstsq(Context& c, const Args& a) {
  Value am = a[0].tensor, rhs = a[1].tensor;
  require_floating(c, am);
  LstsqShape s = lstsq_shape(c, am, rhs);
  std::string driver = a[3].none() ? "gelsy" : a[3].s;
  double rcond = a[2].none() || a[2].d < 0 ? default_rcond(am.dtype(), s) : a[2].d;
  if (s.vector) rhs = c.b.reshape(rhs, [&] { auto v = rhs.shape(); v.push_back(1); return v; }());
  if (product(s.batch) * s.m * s.n * s.k == 0) return lstsq_empty(c, rhs, s, driver);
  Value af = as_batch(c.b, am, s.batch, s.m, s.n), bf = as_batch(c.b, rhs, s.batch, s.m, s.k);
  Solved r = s.m >= s.n ? solve_tall(c.b, af, bf) : solve_wide(c.b, af, bf);
  bool svd_driver = driver == "gelsd" || driver == "gelss";
  Value sv = svd_driver ? singular_values(c, am, c.out(3)) : c.b.zeros(c.out(3));
  Value res = c.out(1).numel() == 0 ? c.b.zeros(c.out(1)) : c.b.reshape(r.resid, c.out(1).shape);
  Value rank = c.out(2).numel() == 0 ? c.b.zeros(c.out(2))
                                     : rank_of(c, am, sv, s, r, svd_driver, rcond);
  return {c.b.reshape(r.x, c.out(0).shape), res, rank, sv};
}

}  // namespace

void register_linalg_lstsq(Registry& r) {
  r.add("aten::geqrf", geqrf);
  r.add("aten::linalg_lstsq", lstsq);
}

}  // namespace torch_tpu::lowering
