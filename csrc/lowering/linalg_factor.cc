// LU with partial pivoting, written as a loop over columns (StableHLO has no
// LU op), and what follows from it: lu_unpack, lu_solve, solve, inv, det,
// slogdet. Pivots are 1-based i32 and info is the first zero pivot, as
// LAPACK gives them. Each step's rank-1 update is elementwise, so the factor
// is exact f32/f64 whatever the matmul precision mode.
#include "linalg_common.h"

namespace torch_tpu::lowering {

namespace {

using namespace linalg;
using hlo::Transpose;



// [B] → [B, m] along dim 0.
Value rows_of(Builder& b, Value v, int64_t m) {
  return b.broadcast_in_dim(v, {v.dim(0), m}, {0});
}

// x [B, m, ...] restricted to the row where mask [B, m] holds, summed: [B, ...].
Value pick(Builder& b, Value x, Value mask) {
  Value full = b.broadcast_in_dim(mask, x.shape(), {0, 1});
  return reduce_sum(b, b.select(full, x, splat_like(b, 0, x)), {1});
}

// Swaps entries j (scalar) and p [B] of the rows of x [B, m, ...].
Value swap_rows(Builder& b, Value x, Value j, Value p) {
  int64_t m = x.dim(1);
  Value row = b.iota(TensorType{kI32, {x.dim(0), m}}, 1);
  Value is_j = b.compare(Compare::kEQ, row, b.broadcast_to(j, row.shape()));
  Value is_p = b.compare(Compare::kEQ, row, rows_of(b, p, m));
  std::vector<int64_t> keep(x.rank());
  std::iota(keep.begin(), keep.end(), 0);
  keep.erase(keep.begin() + 1);
  Value at_j = b.broadcast_in_dim(pick(b, x, is_j), x.shape(), keep);
  Value at_p = b.broadcast_in_dim(pick(b, x, is_p), x.shape(), keep);
  Value mj = b.broadcast_in_dim(is_j, x.shape(), {0, 1}), mp = b.broadcast_in_dim(is_p, x.shape(), {0, 1});
  return b.select(mj, at_p, b.select(mp, at_j, x));
}

// The first row >= j of largest |col| (LAPACK's i?amax: |re| + |im| for
// complex), j if none compares.
Value pivot_row(Builder& b, Value col, Value j) {
  int64_t m = col.dim(1);
  Value row = b.iota(TensorType{kI32, col.shape()}, 1);
  Value below = b.compare(Compare::kGE, row, b.broadcast_to(j, row.shape()));
  Value size = cabs1(b, col);
  Value mag = b.select(below, size, splat_like(b, -1, size));
  Value top = rows_of(b, reduce_max(b, mag, {1}), m);
  Value none = splat_like(b, static_cast<double>(m), row);
  Value p = reduce_min(b, b.select(b.compare(Compare::kEQ, mag, top), row, none), {1});
  return b.select(b.compare(Compare::kGE, p, splat_like(b, static_cast<double>(m), p)),
                  b.broadcast_to(j, p.shape()), p);
}

struct LuState {
  Value a, piv, perm, info;  // [B, m, n], [B, k], [B, m], [B] (i32, 0-based)
};

// Column j's elimination: pivot, swap, scale, rank-1 update of the rest.
LuState lu_step(Builder& b, Value j, const LuState& s, bool pivot) {
  int64_t B = s.a.dim(0), m = s.a.dim(1), n = s.a.dim(2);
  Value zero = i32(b, 0);
  Value col = b.reshape(b.dynamic_slice(s.a, {zero, zero, j}, {B, m, 1}), {B, m});
  Value p = pivot ? pivot_row(b, col, j) : b.broadcast_to(j, {B});
  Value a = swap_rows(b, s.a, j, p);
  Value perm = b.reshape(swap_rows(b, b.reshape(s.perm, {B, m, 1}), j, p), {B, m});
  Value urow = b.reshape(b.dynamic_slice(a, {zero, j, zero}, {B, 1, n}), {B, n});
  Value d = b.reshape(b.dynamic_slice(urow, {zero, j}, {B, 1}), {B});
  col = b.reshape(b.dynamic_slice(a, {zero, zero, j}, {B, m, 1}), {B, m});
  Value singular = b.compare(Compare::kEQ, d, splat_like(b, 0, d));
  Value safe = b.select(singular, splat_like(b, 1, d), d);
  Value l = b.div(col, rows_of(b, safe, m));
  TensorType idx{kI32, {B, m, n}};
  Value row = b.iota(idx, 1), cidx = b.iota(idx, 2), jb = b.broadcast_to(j, idx.shape);
  Value below = b.compare(Compare::kGT, row, jb);
  Value lb = b.broadcast_in_dim(l, {B, m, n}, {0, 1});
  Value update = b.sub(a, b.mul(lb, b.broadcast_in_dim(urow, {B, m, n}, {0, 2})));
  a = b.select(b.and_(below, b.compare(Compare::kGT, cidx, jb)), update,
               b.select(b.and_(below, b.compare(Compare::kEQ, cidx, jb)), lb, a));
  Value piv = b.dynamic_update_slice(s.piv, b.reshape(p, {B, 1}), {zero, j});
  Value first = b.and_(singular, b.compare(Compare::kEQ, s.info, splat_like(b, 0, s.info)));
  Value info = b.select(first, b.add(b.broadcast_to(j, {B}), splat(b, 1, kI32, {B})), s.info);
  return {a, piv, perm, info};
}

// Factors flattened matrices [B, m, n]; pivots/perm stay 0-based.
LuState lu_loop(Builder& b, Value a, bool pivot) {
  int64_t B = a.dim(0), m = a.dim(1), n = a.dim(2), k = std::min(m, n);
  Values init{i32(b, 0), a, b.zeros(TensorType{kI32, {B, k}}),
              b.iota(TensorType{kI32, {B, m}}, 1), b.zeros(TensorType{kI32, {B}})};
  Values out = b.while_loop(
      init,
      [k](Builder& w, const Values& s) { return Values{w.compare(Compare::kLT, s[0], i32(w, k))}; },
      [pivot](Builder& w, const Values& s) {
        LuState next = lu_step(w, s[0], {s[1], s[2], s[3], s[4]}, pivot);
        return Values{w.add(s[0], i32(w, 1)), next.a, next.piv, next.perm, next.info};
      });
  return {out[1], out[2], out[3], out[4]};
}

// LU of A [.., m, n] with batch shape restored; `piv` 0-based.
LuState lu_factor(Builder& b, Value a, bool pivot = true) {
  auto batch = batch_dims(a);
  int64_t m = a.dim(a.rank() - 2), n = a.dim(a.rank() - 1), k = std::min(m, n);
  auto with = [&](std::vector<int64_t> tail) {
    auto s = batch;
    s.insert(s.end(), tail.begin(), tail.end());
    return s;
  };
  int64_t B = product(batch);
  if (B * m * n == 0) {
    Value perm = b.iota(TensorType{kI32, with({m})}, a.rank() - 2);
    return {a, b.zeros(TensorType{kI32, with({k})}), perm, b.zeros(TensorType{kI32, batch})};
  }
  LuState s = lu_loop(b, b.reshape(a, {B, m, n}), pivot);
  return {b.reshape(s.a, a.shape()), b.reshape(s.piv, with({k})), b.reshape(s.perm, with({m})),
          b.reshape(s.info, batch)};
}

Value one_based(Builder& b, Value piv) { return b.add(piv, splat_like(b, 1, piv)); }

// The row permutation [.., m] that 1-based LAPACK pivots [.., k] describe.
Value perm_of_pivots(Builder& b, Value pivots, int64_t m) {
  auto batch = batch_dims(pivots, 1);
  int64_t B = product(batch), k = pivots.dim(pivots.rank() - 1);
  std::vector<int64_t> pshape = batch;
  pshape.push_back(m);
  if (B * k == 0) return b.iota(TensorType{kI32, pshape}, pshape.size() - 1);
  Value piv = b.sub(b.reshape(b.convert(pivots, kI32), {B, k}), splat(b, 1, kI32, {B, k}));
  Values out = b.while_loop(
      {i32(b, 0), piv, b.iota(TensorType{kI32, {B, m, 1}}, 1)},
      [k](Builder& w, const Values& s) { return Values{w.compare(Compare::kLT, s[0], i32(w, k))}; },
      [](Builder& w, const Values& s) {
        Value p = w.reshape(w.dynamic_slice(s[1], {i32(w, 0), s[0]}, {s[1].dim(0), 1}), {s[1].dim(0)});
        return Values{w.add(s[0], i32(w, 1)), s[1], swap_rows(w, s[2], s[0], p)};
      });
  return b.reshape(out[2], pshape);
}

// The permutation matrix P [.., m, m] with A = P L U: P[perm[i], i] = 1.
Value perm_matrix(Builder& b, Value perm, ElementType dtype) {
  int64_t r = perm.rank() + 1, m = perm.dim(r - 2);
  auto shape = perm.shape();
  shape.push_back(m);
  std::vector<int64_t> dims(r - 1);
  std::iota(dims.begin(), dims.end(), 0);
  dims.back() = r - 1;
  Value at = b.broadcast_in_dim(perm, shape, dims);
  return b.convert(b.compare(Compare::kEQ, at, b.iota(TensorType{kI32, shape}, r - 2)), dtype);
}

// The inverse permutation: inv[perm[i]] = i.
Value inverse_perm(Builder& b, Value perm) {
  int64_t r = perm.rank() + 1;
  auto shape = perm.shape();
  shape.push_back(perm.dim(r - 2));
  std::vector<int64_t> dims(r - 1);
  std::iota(dims.begin(), dims.end(), 0);
  dims.back() = r - 1;
  Value hit = b.compare(Compare::kEQ, b.broadcast_in_dim(perm, shape, dims), b.iota(TensorType{kI32, shape}, r - 2));
  Value i = b.iota(TensorType{kI32, shape}, r - 1);
  return reduce_sum(b, b.select(hit, i, splat_like(b, 0, i)), {r - 1});
}

// L (unit lower, [.., m, k]) and U (upper, [.., k, n]) of a packed factor.
Values unpack_lu(Builder& b, Value lu) {
  int64_t r = lu.rank(), m = lu.dim(r - 2), n = lu.dim(r - 1), k = std::min(m, n);
  std::vector<int64_t> zero(r, 0);
  auto lshape = lu.shape(), ushape = lu.shape();
  lshape[r - 1] = k;
  ushape[r - 2] = k;
  Value l = b.slice(lu, zero, lshape), u = b.slice(lu, zero, ushape);
  Value strict = b.select(triangle_mask(b, lshape, false), splat_like(b, 0, l), l);
  return {b.add(strict, eye(b, lu.dtype(), batch_dims(lu), m, k)), triangle(b, u, false)};
}

// A X = rhs (or Aᴴ X = rhs) from the packed LU and 0-based perm, all
// batch-broadcast alike.
Value lu_solve_left(Builder& b, Value lu, Value perm, Value rhs, bool adjoint) {
  Value l = triangle(b, lu, true), u = triangle(b, lu, false);
  if (!adjoint) {
    Value y = b.triangular_solve(l, take_rows(b, rhs, perm), true, true, true, Transpose::kNone);
    return b.triangular_solve(u, y, true, false, false, Transpose::kNone);
  }
  Value y = b.triangular_solve(u, rhs, true, false, false, Transpose::kAdjoint);
  Value z = b.triangular_solve(l, y, true, true, true, Transpose::kAdjoint);
  return take_rows(b, z, inverse_perm(b, perm));
}

// Solves with `left`/`adjoint` as linalg_lu_solve means them; rhs [.., n, p]
// already has the result's batch shape. X op(A) = B is op(A)ᴴ Xᴴ = Bᴴ.
Value lu_solve(Builder& b, Value lu, Value perm, Value rhs, bool left, bool adjoint) {
  const auto& shape = rhs.shape();
  if (product(shape) == 0) return rhs;
  std::vector<int64_t> pshape(shape.begin(), shape.end() - 2);
  pshape.push_back(lu.dim(lu.rank() - 1));
  Value lub = batch_to(b, lu, shape);
  Value pb = b.broadcast_to(perm, pshape);
  if (left) return lu_solve_left(b, lub, pb, rhs, adjoint);
  return adjoint_last(b, lu_solve_left(b, lub, pb, adjoint_last(b, rhs), !adjoint));
}

// PyTorch factors Aᵀ rather than A for real det and slogdet when A is
// contiguous (saving a copy into column-major order), and their backward
// formulas read the LU output that way (solve, and complex A, factor A
// itself). Tensors arrive here without strides, so the contiguous case, by
// far the common one, is assumed.
LuState factor_of(Builder& b, Value a) {
  return lu_factor(b, hlo::is_complex(a.dtype()) ? a : transpose_last(b, a));
}

// ---- lowerings -----------------------------------------------------------------

Values lu_factor_ex(Context& c, const Args& a) {
  require_floating(c, a[0].tensor);
  LuState s = lu_factor(c.b, a[0].tensor, a[1].b);
  return {s.a, one_based(c.b, s.piv), s.info};
}

Values linalg_lu(Context& c, const Args& a) {
  require_floating(c, a[0].tensor);
  LuState s = lu_factor(c.b, a[0].tensor, a[1].b);
  Values lu = unpack_lu(c.b, s.a);
  Value p = a[1].b ? perm_matrix(c.b, s.perm, c.out(0).dtype) : c.b.zeros(c.out(0));
  return {p, lu[0], lu[1]};
}

Values lu_unpack(Context& c, const Args& a) {
  Value lu = a[0].tensor;
  require_floating(c, lu);
  Values out{c.b.zeros(c.out(0)), c.b.zeros(c.out(1)), c.b.zeros(c.out(2))};
  if (a[2].b) {
    Values lu_parts = unpack_lu(c.b, lu);
    out[1] = lu_parts[0];
    out[2] = lu_parts[1];
  }
  if (a[3].b) {
    Value perm = perm_of_pivots(c.b, a[1].tensor, lu.dim(lu.rank() - 2));
    out[0] = perm_matrix(c.b, perm, c.out(0).dtype);
  }
  return out;
}

Values linalg_lu_solve(Context& c, const Args& a) {
  Value lu = a[0].tensor;
  require_floating(c, lu);
  Value perm = perm_of_pivots(c.b, a[1].tensor, lu.dim(lu.rank() - 1));
  Value rhs = batch_to(c.b, a[2].tensor, c.out().shape);
  return {lu_solve(c.b, lu, perm, rhs, a[3].b, a[4].b)};
}

Values inv_ex(Context& c, const Args& a) {
  Value x = a[0].tensor;
  require_floating(c, x);
  LuState s = lu_factor(c.b, x);
  Value id = eye(c.b, x.dtype(), batch_dims(x), x.dim(x.rank() - 1), x.dim(x.rank() - 1));
  return {lu_solve(c.b, s.a, s.perm, id, true, false), s.info};
}

// _linalg_solve_ex(A, B, left, check_errors) → (X, LU, pivots, info).
Values solve_ex(Context& c, const Args& a) {
  Value x = a[0].tensor, rhs = a[1].tensor;
  require_floating(c, x);
  LuState s = lu_factor(c.b, x);
  bool vector = rhs.rank() == 1 ||
                (rhs.rank() == x.rank() - 1 && rhs.shape() == batch_dims(x, 1));
  auto shape = c.out(0).shape;
  if (vector) shape.push_back(1);
  if (vector) rhs = c.b.reshape(rhs, [&] { auto s2 = rhs.shape(); s2.push_back(1); return s2; }());
  Value sol = lu_solve(c.b, s.a, s.perm, batch_to(c.b, rhs, shape), a[2].b, false);
  if (vector) sol = c.b.reshape(sol, c.out(0).shape);
  return {sol, s.a, one_based(c.b, s.piv), s.info};
}

// (-1)^(number of row swaps) as `dtype` [..].
Value perm_sign(Builder& b, Value piv, ElementType dtype) {
  int64_t r = piv.rank();
  Value moved = b.compare(Compare::kNE, piv, b.iota(TensorType{kI32, piv.shape()}, r - 1));
  Value swaps = reduce_sum(b, b.convert(moved, kI32), {r - 1});
  Value odd = b.rem(swaps, splat_like(b, 2, swaps));
  return b.convert(b.sub(splat_like(b, 1, odd), b.mul(odd, splat_like(b, 2, odd))), dtype);
}

Values det(Context& c, const Args& a) {
  Value x = a[0].tensor;
  require_floating(c, x);
  LuState s = factor_of(c.b, x);
  Value d = diagonal(c.b, s.a);
  Value v = c.b.mul(reduce_prod(c.b, d, {d.rank() - 1}), perm_sign(c.b, s.piv, x.dtype()));
  return {v, s.a, one_based(c.b, s.piv)};
}

Values slogdet(Context& c, const Args& a) {
  Value x = a[0].tensor;
  require_floating(c, x);
  LuState s = factor_of(c.b, x);
  Value d = diagonal(c.b, s.a);
  int64_t last = d.rank() - 1;
  Value sign = c.b.unary("stablehlo.sign", d);  // d / |d| for complex
  sign = c.b.mul(reduce_prod(c.b, sign, {last}), perm_sign(c.b, s.piv, x.dtype()));
  Value logabs = reduce_sum(c.b, c.b.log(c.b.abs(d)), {last});
  return {sign, logabs, s.a, one_based(c.b, s.piv)};
}

}  // namespace

void register_linalg_qr(Registry& r);
void register_linalg_eig(Registry& r);
void register_linalg_matfn(Registry& r);
void register_linalg_lstsq(Registry& r);  // linalg_lstsq.cc: geqrf, linalg_lstsq
void register_linalg_ldl(Registry& r);    // linalg_ldl.cc

// LU and its uses here; QR, least squares, LDL, the eigensolvers and matrix
// functions register from their files.
void register_linalg_factorizations(Registry& r) {
  r.add("aten::linalg_lu_factor_ex", lu_factor_ex);
  r.add("aten::linalg_lu", linalg_lu);
  r.add("aten::lu_unpack", lu_unpack);
  r.add("aten::linalg_lu_solve", linalg_lu_solve);
  r.add("aten::linalg_inv_ex", inv_ex);
  r.add("aten::_linalg_solve_ex", solve_ex);
  r.add("aten::_linalg_det", det);
  r.add("aten::_linalg_slogdet", slogdet);
  register_linalg_qr(r);
  register_linalg_eig(r);
  register_linalg_matfn(r);
  register_linalg_lstsq(r);
  register_linalg_ldl(r);
}

}  // namespace torch_tpu::lowering
