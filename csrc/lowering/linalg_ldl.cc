// linalg_ldl_factor_ex: LAPACK's sytf2 (lower) with Bunch–Kaufman pivoting,
// step for step, so pivots (1-based, negative for 2x2 blocks) and the packed
// LD agree with CPU. One matrix at a time (a loop over the batch), each a
// loop over columns whose pivot choice is data-dependent: both the 1x1 and the
// 2x2 elimination are computed and one is selected.
#include <cmath>

#include "linalg_common.h"

namespace torch_tpu::lowering {

namespace {

using namespace linalg;

Value scalar_at(Builder& b, Value v, Value i) {
  return b.reshape(b.dynamic_slice(v, {i}, {1}), {});
}

Value col_of(Builder& b, Value a, Value j) {
  int64_t n = a.dim(0);
  return b.reshape(b.dynamic_slice(a, {i32(b, 0), j}, {n, 1}), {n});
}

Value row_of(Builder& b, Value a, Value i) {
  int64_t n = a.dim(0);
  return b.reshape(b.dynamic_slice(a, {i, i32(b, 0)}, {1, n}), {n});
}

Value elem(Builder& b, Value a, Value i, Value j) {
  return b.reshape(b.dynamic_slice(a, {i, j}, {1, 1}), {});
}

// {max, first index of it} of v [n] (LAPACK's i_amax: the first maximum).
Values arg_max(Builder& b, Value v) {
  Value idx = b.iota(TensorType{kI32, v.shape()}, 0);
  return b.reduce({v, idx}, {b.constant(v.dtype(), -1), i32(b, 0)}, {0},
                  [](Builder& w, const Values& s) {
                    Value gt = w.compare(Compare::kGT, s[2], s[0]);
                    Value eq = w.and_(w.compare(Compare::kEQ, s[2], s[0]),
                                      w.compare(Compare::kLT, s[3], s[1]));
                    Value take = w.or_(gt, eq);
                    return Values{w.select(take, s[2], s[0]), w.select(take, s[3], s[1])};
                  });
}

// The pivot decision at column k of the lower-stored a [n, n].
struct Pivot {
  Value kp, two, zero;  // i32 pivot row, i1 "2x2 block", i1 "zero pivot"
};

Pivot choose_pivot(Builder& b, Value a, Value k) {
  int64_t n = a.dim(0);
  Value rows = b.iota(TensorType{kI32, {n}}, 0), kb = b.broadcast_to(k, {n});
  Value x = col_of(b, a, k);
  Value absakk = b.abs(scalar_at(b, x, k));
  Value neg = splat_like(b, -1, x);
  Values cm = arg_max(b, b.select(b.compare(Compare::kGT, rows, kb), b.abs(x), neg));
  Value colmax = b.max(cm[0], b.constant(x.dtype(), 0)), imax = cm[1];
  Value ib = b.broadcast_to(imax, {n});
  Value r = b.select(b.compare(Compare::kLT, rows, ib), row_of(b, a, imax), col_of(b, a, imax));
  Value valid = b.and_(b.compare(Compare::kGE, rows, kb), b.compare(Compare::kNE, rows, ib));
  Value rowmax = reduce_max(b, b.select(valid, b.abs(r), splat_like(b, 0, r)), {0});
  double alpha_d = x.dtype() == ElementType::kF64 ? (1 + std::sqrt(17.0)) / 8
                                                   : (1.0f + std::sqrt(17.0f)) / 8.0f;
  Value alpha = b.constant(x.dtype(), alpha_d);
  Value zero = b.or_(b.compare(Compare::kEQ, b.max(absakk, colmax), b.constant(x.dtype(), 0)),
                     b.compare(Compare::kNE, absakk, absakk));
  Value c1 = b.compare(Compare::kGE, absakk, b.mul(alpha, colmax));
  Value c2 = b.compare(Compare::kGE, absakk, b.mul(b.mul(alpha, colmax), b.div(colmax, rowmax)));
  Value c3 = b.compare(Compare::kGE, b.abs(elem(b, a, imax, imax)), b.mul(alpha, rowmax));
  Value keep = b.or_(zero, b.or_(c1, c2));
  return {b.select(keep, k, imax), b.and_(b.not_(keep), b.not_(c3)), zero};
}

// Rows and columns kk and kp of the trailing block (>= k) interchanged.
Value interchange(Builder& b, Value a, Value k, Value kk, Value kp) {
  int64_t n = a.dim(0);
  Value full = b.select(triangle_mask(b, a.shape(), true), a, transpose_last(b, a));
  Value rows = b.iota(TensorType{kI32, {n}}, 0);
  Value kkb = b.broadcast_to(kk, {n}), kpb = b.broadcast_to(kp, {n});
  Value p = b.select(b.compare(Compare::kEQ, rows, kkb), kpb,
                     b.select(b.compare(Compare::kEQ, rows, kpb), kkb, rows));
  Value swapped = transpose_last(b, take_rows(b, transpose_last(b, take_rows(b, full, p)), p));
  TensorType idx{kI32, a.shape()};
  Value kf = b.broadcast_to(k, a.shape());
  Value trail = b.and_(b.compare(Compare::kGE, b.iota(idx, 0), kf), b.compare(Compare::kGE, b.iota(idx, 1), kf));
  return b.select(trail, swapped, a);
}

Value outer(Builder& b, Value u, Value v) {
  int64_t n = u.dim(0);
  return b.mul(b.broadcast_in_dim(u, {n, n}, {0}), b.broadcast_in_dim(v, {n, n}, {1}));
}

// Masks of rows > m (vector) and of the block rows, cols > m.
Value after(Builder& b, Value m, int64_t n) {
  return b.compare(Compare::kGT, b.iota(TensorType{kI32, {n}}, 0), b.broadcast_to(m, {n}));
}
Value block_after(Builder& b, Value m, int64_t n) {
  TensorType idx{kI32, {n, n}};
  Value mb = b.broadcast_to(m, {n, n});
  return b.and_(b.compare(Compare::kGT, b.iota(idx, 0), mb), b.compare(Compare::kGT, b.iota(idx, 1), mb));
}

// Replaces column j of a by v where `rows` holds.
Value set_col(Builder& b, Value a, Value j, Value v, Value rows) {
  int64_t n = a.dim(0);
  Value cols = b.compare(Compare::kEQ, b.iota(TensorType{kI32, {n, n}}, 1), b.broadcast_to(j, {n, n}));
  Value put = b.and_(cols, b.broadcast_in_dim(rows, {n, n}, {0}));
  return b.select(put, b.broadcast_in_dim(v, {n, n}, {0}), a);
}

// A 1x1 pivot at k: the rank-1 update (syr) and the scaled column.
Value eliminate1(Builder& b, Value a, Value k) {
  int64_t n = a.dim(0);
  Value below = after(b, k, n);
  Value x = b.select(below, col_of(b, a, k), b.zeros(TensorType{a.dtype(), {n}}));
  Value d11 = b.div(b.constant(a.dtype(), 1), elem(b, a, k, k));
  Value t = b.mul(b.broadcast_to(b.neg(d11), {n}), x);
  Value updated = b.select(block_after(b, k, n), b.add(a, outer(b, x, t)), a);
  return set_col(b, updated, k, b.mul(b.broadcast_to(d11, {n}), x), below);
}

// A 2x2 pivot at (k, k+1): the rank-2 update and the two columns of L.
Value eliminate2(Builder& b, Value a, Value k) {
  int64_t n = a.dim(0);
  Value k1 = b.add(k, i32(b, 1));
  Value below = after(b, k1, n);
  Value zeros = b.zeros(TensorType{a.dtype(), {n}});
  Value ak = b.select(below, col_of(b, a, k), zeros), ak1 = b.select(below, col_of(b, a, k1), zeros);
  Value d21 = elem(b, a, k1, k);
  Value d11 = b.div(elem(b, a, k1, k1), d21), d22 = b.div(elem(b, a, k, k), d21);
  Value t = b.div(b.constant(a.dtype(), 1), b.sub(b.mul(d11, d22), b.constant(a.dtype(), 1)));
  Value s = b.broadcast_to(b.div(t, d21), {n});
  Value wk = b.mul(s, b.sub(b.mul(b.broadcast_to(d11, {n}), ak), ak1));
  Value wk1 = b.mul(s, b.sub(b.mul(b.broadcast_to(d22, {n}), ak1), ak));
  Value upd = b.sub(b.sub(a, outer(b, ak, wk)), outer(b, ak1, wk1));
  Value updated = b.select(block_after(b, k1, n), upd, a);
  return set_col(b, set_col(b, updated, k, wk, below), k1, wk1, below);
}

// One sytf2 step: state {k, a, pivots, info} → the next.
Values ldl_step(Builder& b, const Values& s) {
  Value k = s[0], a = s[1];
  Pivot p = choose_pivot(b, a, k);
  Value one = i32(b, 1);
  Value kstep = b.select(p.two, i32(b, 2), one);
  Value kk = b.sub(b.add(k, kstep), one);
  a = interchange(b, a, k, kk, p.kp);
  Value a1 = eliminate1(b, a, k), a2 = eliminate2(b, a, k);
  a = b.select(p.zero, a, b.select(p.two, a2, a1));
  int64_t n = a.dim(0);
  Value kp1 = b.add(p.kp, one);
  Value code = b.select(p.two, b.neg(kp1), kp1);
  Value rows = b.iota(TensorType{kI32, {n}}, 0);
  Value mine = b.and_(b.compare(Compare::kGE, rows, b.broadcast_to(k, {n})),
                      b.compare(Compare::kLE, rows, b.broadcast_to(kk, {n})));
  Value piv = b.select(mine, b.broadcast_to(code, {n}), s[2]);
  Value first = b.and_(p.zero, b.compare(Compare::kEQ, s[3], i32(b, 0)));
  Value info = b.select(first, b.add(k, one), s[3]);
  return {b.add(k, kstep), a, piv, info};
}

// sytf2 of one matrix a [n, n] → {tril(LD), pivots [n], info}.
Values ldl_one(Builder& b, Value a) {
  int64_t n = a.dim(0);
  Values init{i32(b, 0), a, b.zeros(TensorType{kI32, {n}}), i32(b, 0)};
  Values out = b.while_loop(
      init, [n](Builder& w, const Values& s) { return Values{w.compare(Compare::kLT, s[0], i32(w, n))}; },
      [](Builder& w, const Values& s) { return ldl_step(w, s); });
  return {triangle(b, out[1], true), out[2], out[3]};
}

// linalg_ldl_factor_ex(self, hermitian, check_errors) → (LD, pivots, info).
Values ldl_factor_ex(Context& c, const Args& a) {
  Value x = a[0].tensor;
  require_real(c, x);
  if (a[2].b) throw Unsupported(c.op + " with check_errors=True");
  int64_t n = x.dim(x.rank() - 1), B = product(batch_dims(x));
  if (B * n == 0) return {c.b.zeros(c.out(0)), c.b.zeros(c.out(1)), c.b.zeros(c.out(2))};
  Value xs = c.b.reshape(x, {B, n, n});
  Values init{i32(c.b, 0), xs, c.b.zeros(TensorType{kI32, {B, n}}), c.b.zeros(TensorType{kI32, {B}})};
  Values out = c.b.while_loop(
      init, [B](Builder& w, const Values& s) { return Values{w.compare(Compare::kLT, s[0], i32(w, B))}; },
      [n](Builder& w, const Values& s) {
        Value z = i32(w, 0);
        Value m = w.reshape(w.dynamic_slice(s[1], {s[0], z, z}, {1, n, n}), {n, n});
        Values r = ldl_one(w, m);
        return Values{w.add(s[0], i32(w, 1)),
                      w.dynamic_update_slice(s[1], w.reshape(r[0], {1, n, n}), {s[0], z, z}),
                      w.dynamic_update_slice(s[2], w.reshape(r[1], {1, n}), {s[0], z}),
                      w.dynamic_update_slice(s[3], w.reshape(r[2], {1}), {s[0]})};
      });
  return {c.b.reshape(out[1], c.out(0).shape), c.b.reshape(out[2], c.out(1).shape),
          c.b.reshape(out[3], c.out(2).shape)};
}

}  // namespace

void register_linalg_ldl(Registry& r) { r.add("aten::linalg_ldl_factor_ex", ldl_factor_ex); }

}  // namespace torch_tpu::lowering
