// Factorizations and solves that StableHLO has natively: Cholesky and
// triangular solves, and what follows from them (cholesky_inverse, the
// cholesky_solve helper), for real and complex dtypes (a complex A is
// Hermitian: A = L Lᴴ). LU, QR and the eigensolvers are hand-written loops in linalg_factor.cc,
// linalg_qr.cc and linalg_eig.cc.
#include "linalg_common.h"

namespace torch_tpu::lowering {

namespace {

using namespace linalg;
using hlo::Transpose;

// 0 when the factorization succeeded, else 1 + the first row of L that is
// not finite. LAPACK's info is the order of the first leading minor that is
// not positive definite; XLA:CPU fills a failed factor with NaN entirely, so
// there the order reads as 1: info > 0 is exact, its value is a lower bound.
Value cholesky_info(Builder& b, Value l, const TensorType& info) {
  int64_t r = l.rank(), n = l.dim(r - 1);
  TensorType rows{ElementType::kI32, std::vector<int64_t>(l.shape().begin(), l.shape().end() - 1)};
  Value finite = hlo::is_complex(l.dtype())
                     ? b.and_(b.is_finite(real_part(b, l)), b.is_finite(imag_part(b, l)))
                     : b.is_finite(l);
  Value bad = b.convert(b.not_(finite), ElementType::kI32);
  Value bad_row = reduce_max(b, bad, {r - 1});
  Value order = b.add(b.iota(rows, r - 2), splat(b, 1, ElementType::kI32, rows.shape));
  Value none = splat(b, static_cast<double>(n + 1), ElementType::kI32, rows.shape);
  Value first = reduce_min(b, b.select(b.convert(bad_row, ElementType::kPred), order, none), {r - 2});
  Value ok = b.compare(Compare::kGT, first, splat_like(b, static_cast<double>(n), first));
  return b.convert(b.select(ok, splat_like(b, 0, first), first), info.dtype);
}

// The lower Cholesky factor, its upper triangle zeroed. LAPACK reads only
// the real part of a complex diagonal; so does this.
Value cholesky_lower(Context& c, Value a) {
  require_floating(c, a);
  if (hlo::is_complex(a.dtype())) {
    Value diag = c.b.and_(triangle_mask(c.b, a.shape(), true), triangle_mask(c.b, a.shape(), false));
    a = c.b.select(diag, make_complex(c.b, real_part(c.b, a), splat_like(c.b, 0, real_part(c.b, a)), a.type()), a);
  }
  return triangle(c.b, c.b.cholesky(a, /*lower=*/true), true);
}

// linalg_cholesky_ex(A, upper, check_errors) → (L or Lᵀ, info).
Values cholesky_ex(Context& c, const Args& a) {
  Value l = cholesky_lower(c, a[0].tensor);
  Value info = cholesky_info(c.b, l, c.out(1));
  return {a[1].b ? adjoint_last(c.b, l) : l, info};
}

Values cholesky(Context& c, const Args& a) {
  Value l = cholesky_lower(c, a[0].tensor);
  return {a.size() > 1 && a[1].b ? adjoint_last(c.b, l) : l};
}

// linalg_solve_triangular(A, B, upper, left, unitriangular).
Values solve_triangular(Context& c, const Args& a) {
  require_floating(c, a[0].tensor);
  const auto& shape = c.out().shape;
  Value m = batch_to(c.b, a[0].tensor, shape), rhs = c.b.broadcast_to(a[1].tensor, shape);
  return {c.b.triangular_solve(m, rhs, /*left_side=*/a[3].b, /*lower=*/!a[2].b,
                               /*unit_diagonal=*/a[4].b, Transpose::kNone)};
}

// triangular_solve(B, A, upper, transpose, unitriangular) → (X, A broadcast);
// `transpose` is Aᵀ, not conjugated, for complex A as on CPU.
Values triangular_solve(Context& c, const Args& a) {
  require_floating(c, a[1].tensor);
  Value rhs = c.b.broadcast_to(a[0].tensor, c.out(0).shape);
  Value m = c.b.broadcast_to(a[1].tensor, c.out(1).shape);
  Value x = c.b.triangular_solve(m, rhs, true, /*lower=*/!a[2].b, a[4].b,
                               a[3].b ? Transpose::kTranspose : Transpose::kNone);
  return {x, m};
}

// A⁻¹ B for A = L Lᴴ (lower) or Uᴴ U (upper), given the factor.
Value cholesky_solve(Builder& b, Value factor, Value rhs, bool upper) {
  Value y = b.triangular_solve(factor, rhs, true, !upper, false, upper ? Transpose::kAdjoint : Transpose::kNone);
  return b.triangular_solve(factor, y, true, !upper, false, upper ? Transpose::kNone : Transpose::kAdjoint);
}

Values cholesky_solve_helper(Context& c, const Args& a) {
  require_floating(c, a[1].tensor);
  return {cholesky_solve(c.b, a[1].tensor, a[0].tensor, a[2].b)};
}

Values cholesky_inverse(Context& c, const Args& a) {
  Value f = a[0].tensor;
  require_floating(c, f);
  TensorType t = f.type();
  Value eye = c.b.convert(triangle_mask(c.b, t.shape, true), t.dtype);
  eye = c.b.mul(eye, c.b.convert(triangle_mask(c.b, t.shape, false), t.dtype));
  return {cholesky_solve(c.b, f, eye, a.size() > 1 && a[1].b)};
}

}  // namespace

void register_linalg_decompositions(Registry& r) {
  r.add("aten::linalg_cholesky_ex", cholesky_ex);
  r.add("aten::cholesky", cholesky);
  r.add("aten::linalg_solve_triangular", solve_triangular);
  r.add("aten::triangular_solve", triangular_solve);
  r.add("aten::_cholesky_solve_helper", cholesky_solve_helper);
  r.add("aten::cholesky_inverse", cholesky_inverse);
}

}  // namespace torch_tpu::lowering
