// linalg_ldl_factor_ex: LAPACK's sytf2 (lower) with Bunch–Kaufman pivoting,
// step for step, so pivots (1-based, negative for 2x2 blocks) and the packed
// LD agree with CPU; linalg_ldl_solve: LAPACK's sytrs (lower) on them. One
// matrix at a time (a loop over the batch), each a loop over columns whose
// pivot choice is data-dependent: both the 1x1 and the 2x2 elimination are
// computed and one is selected.
//
// Complex matrices: symmetric ones (hermitian=False) as zsytf2/zsytrs, the
// same steps in complex arithmetic with pivots compared by cabs1; Hermitian
// ones as zhetf2/zhetrs, which keep the diagonal real, compare a diagonal
// entry by |its real part| and conjugate what the transpose reads (`herm`).
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
  int64_t n = a.dim(1);
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

Pivot choose_pivot(Builder& b, Value a, Value k, bool herm) {
  int64_t n = a.dim(0);
  // A diagonal entry's magnitude: a Hermitian one's is |its real part|.
  auto diagonal_mag = [&](Value v) { return herm ? b.abs(real_part(b, v)) : cabs1(b, v); };
  Value rows = b.iota(TensorType{kI32, {n}}, 0), kb = b.broadcast_to(k, {n});
  Value x = col_of(b, a, k), mag = cabs1(b, x);
  ElementType real = mag.dtype();
  Value absakk = diagonal_mag(scalar_at(b, x, k));
  Value neg = splat_like(b, -1, mag);
  Values cm = arg_max(b, b.select(b.compare(Compare::kGT, rows, kb), mag, neg));
  Value colmax = b.max(cm[0], b.constant(real, 0)), imax = cm[1];
  Value ib = b.broadcast_to(imax, {n});
  Value r = b.select(b.compare(Compare::kLT, rows, ib), row_of(b, a, imax), col_of(b, a, imax));
  Value valid = b.and_(b.compare(Compare::kGE, rows, kb), b.compare(Compare::kNE, rows, ib));
  Value rowmax = reduce_max(b, b.select(valid, cabs1(b, r), splat_like(b, 0, mag)), {0});
  double alpha_d = real == ElementType::kF64 ? (1 + std::sqrt(17.0)) / 8
                                             : (1.0f + std::sqrt(17.0f)) / 8.0f;
  Value alpha = b.constant(real, alpha_d);
  Value zero = b.or_(b.compare(Compare::kEQ, b.max(absakk, colmax), b.constant(real, 0)),
                     b.compare(Compare::kNE, absakk, absakk));
  Value c1 = b.compare(Compare::kGE, absakk, b.mul(alpha, colmax));
  Value c2 = b.compare(Compare::kGE, absakk, b.mul(b.mul(alpha, colmax), b.div(colmax, rowmax)));
  Value c3 = b.compare(Compare::kGE, diagonal_mag(elem(b, a, imax, imax)), b.mul(alpha, rowmax));
  Value keep = b.or_(zero, b.or_(c1, c2));
  return {b.select(keep, k, imax), b.and_(b.not_(keep), b.not_(c3)), zero};
}

// Rows and columns kk and kp of the trailing block (>= k) interchanged.
Value interchange(Builder& b, Value a, Value k, Value kk, Value kp, bool herm) {
  int64_t n = a.dim(0);
  Value upper = herm ? adjoint_last(b, a) : transpose_last(b, a);
  Value full = b.select(triangle_mask(b, a.shape(), true), a, upper);
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

// u vᵀ; u vᴴ for a Hermitian update.
Value outer(Builder& b, Value u, Value v, bool herm = false) {
  int64_t n = u.dim(0);
  if (herm) v = conj(b, v);
  return b.mul(b.broadcast_in_dim(u, {n, n}, {0}), b.broadcast_in_dim(v, {n, n}, {1}));
}

// a with its diagonal's imaginary parts zeroed (zhetf2 keeps it real).
Value real_diagonal(Builder& b, Value a) {
  TensorType idx{kI32, a.shape()};
  Value on = b.compare(Compare::kEQ, b.iota(idx, 0), b.iota(idx, 1));
  return b.select(on, b.convert(real_part(b, a), a.dtype()), a);
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

// A 1x1 pivot at k: the rank-1 update (syr, her) and the scaled column.
Value eliminate1(Builder& b, Value a, Value k, bool herm) {
  int64_t n = a.dim(0);
  Value below = after(b, k, n);
  Value x = b.select(below, col_of(b, a, k), b.zeros(TensorType{a.dtype(), {n}}));
  Value d11 = b.div(b.constant(a.dtype(), 1), elem(b, a, k, k));
  Value t = b.mul(b.broadcast_to(b.neg(d11), {n}), x);
  Value updated = b.select(block_after(b, k, n), b.add(a, outer(b, x, t, herm)), a);
  return set_col(b, updated, k, b.mul(b.broadcast_to(d11, {n}), x), below);
}

// A 2x2 pivot at (k, k+1): the rank-2 update and the two columns of L.
Value eliminate2(Builder& b, Value a, Value k, bool herm) {
  int64_t n = a.dim(0);
  Value k1 = b.add(k, i32(b, 1));
  Value below = after(b, k1, n);
  Value zeros = b.zeros(TensorType{a.dtype(), {n}});
  Value ak = b.select(below, col_of(b, a, k), zeros), ak1 = b.select(below, col_of(b, a, k1), zeros);
  Value wk, wk1, d21 = elem(b, a, k1, k), one = b.constant(a.dtype(), 1);
  auto bn = [&](Value v) { return b.broadcast_to(v, {n}); };
  auto inv_det = [&](Value d11, Value d22) { return b.div(one, b.sub(b.mul(d11, d22), one)); };
  if (herm) {  // zhetf2: the block scaled by |d21|, its diagonal real
    Value d = b.convert(b.sqrt(abs2(b, d21)), a.dtype());
    Value d11 = b.div(b.convert(real_part(b, elem(b, a, k1, k1)), a.dtype()), d);
    Value d22 = b.div(b.convert(real_part(b, elem(b, a, k, k)), a.dtype()), d);
    Value u = b.div(d21, d), s = bn(b.div(inv_det(d11, d22), d));
    wk = b.mul(s, b.sub(b.mul(bn(d11), ak), b.mul(bn(u), ak1)));
    wk1 = b.mul(s, b.sub(b.mul(bn(d22), ak1), b.mul(bn(conj(b, u)), ak)));
  } else {
    Value d11 = b.div(elem(b, a, k1, k1), d21), d22 = b.div(elem(b, a, k, k), d21);
    Value s = bn(b.div(inv_det(d11, d22), d21));
    wk = b.mul(s, b.sub(b.mul(bn(d11), ak), ak1));
    wk1 = b.mul(s, b.sub(b.mul(bn(d22), ak1), ak));
  }
  Value upd = b.sub(b.sub(a, outer(b, ak, wk, herm)), outer(b, ak1, wk1, herm));
  Value updated = b.select(block_after(b, k1, n), upd, a);
  return set_col(b, set_col(b, updated, k, wk, below), k1, wk1, below);
}

// One sytf2 (hetf2) step: state {k, a, pivots, info} → the next.
Values ldl_step(Builder& b, const Values& s, bool herm) {
  Value k = s[0], a = herm ? real_diagonal(b, s[1]) : s[1];
  Pivot p = choose_pivot(b, a, k, herm);
  Value one = i32(b, 1);
  Value kstep = b.select(p.two, i32(b, 2), one);
  Value kk = b.sub(b.add(k, kstep), one);
  a = interchange(b, a, k, kk, p.kp, herm);
  Value a1 = eliminate1(b, a, k, herm), a2 = eliminate2(b, a, k, herm);
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

// sytf2 (hetf2) of one matrix a [n, n] → {tril(LD), pivots [n], info}.
Values ldl_one(Builder& b, Value a, bool herm) {
  int64_t n = a.dim(0);
  Values init{i32(b, 0), a, b.zeros(TensorType{kI32, {n}}), i32(b, 0)};
  Values out = b.while_loop(
      init, [n](Builder& w, const Values& s) { return Values{w.compare(Compare::kLT, s[0], i32(w, n))}; },
      [herm](Builder& w, const Values& s) { return ldl_step(w, s, herm); });
  Value ld = herm ? real_diagonal(b, out[1]) : out[1];
  return {triangle(b, ld, true), out[2], out[3]};
}

// linalg_ldl_factor_ex(self, hermitian, check_errors) → (LD, pivots, info).
Values ldl_factor_ex(Context& c, const Args& a) {
  Value x = a[0].tensor;
  require_floating(c, x);
  bool herm = a[1].b && hlo::is_complex(x.dtype());  // real: symmetric either way
  if (a[2].b) throw Unsupported(c.op + " with check_errors=True");
  int64_t n = x.dim(x.rank() - 1), B = product(batch_dims(x));
  if (B * n == 0) return {c.b.zeros(c.out(0)), c.b.zeros(c.out(1)), c.b.zeros(c.out(2))};
  Value xs = c.b.reshape(x, {B, n, n});
  Values init{i32(c.b, 0), xs, c.b.zeros(TensorType{kI32, {B, n}}), c.b.zeros(TensorType{kI32, {B}})};
  Values out = c.b.while_loop(
      init, [B](Builder& w, const Values& s) { return Values{w.compare(Compare::kLT, s[0], i32(w, B))}; },
      [n, herm](Builder& w, const Values& s) {
        Value z = i32(w, 0);
        Value m = w.reshape(w.dynamic_slice(s[1], {s[0], z, z}, {1, n, n}), {n, n});
        Values r = ldl_one(w, m, herm);
        return Values{w.add(s[0], i32(w, 1)),
                      w.dynamic_update_slice(s[1], w.reshape(r[0], {1, n, n}), {s[0], z, z}),
                      w.dynamic_update_slice(s[2], w.reshape(r[1], {1, n}), {s[0], z}),
                      w.dynamic_update_slice(s[3], w.reshape(r[2], {1}), {s[0]})};
      });
  return {c.b.reshape(out[1], c.out(0).shape), c.b.reshape(out[2], c.out(1).shape),
          c.b.reshape(out[3], c.out(2).shape)};
}

// ---- ldl_solve (sytrs, lower) --------------------------------------------------

// x with rows i and j interchanged.
Value swap_rows(Builder& b, Value x, Value i, Value j) {
  int64_t n = x.dim(0);
  Value rows = b.iota(TensorType{kI32, {n}}, 0);
  Value ib = b.broadcast_to(i, {n}), jb = b.broadcast_to(j, {n});
  Value p = b.select(b.compare(Compare::kEQ, rows, ib), jb, b.select(b.compare(Compare::kEQ, rows, jb), ib, rows));
  return take_rows(b, x, p);
}

Value set_row(Builder& b, Value x, Value i, Value v) {
  return b.dynamic_update_slice(x, b.reshape(v, {1, x.dim(1)}), {i, i32(b, 0)});
}

// Column j of the factor, zero except below row m.
Value factor_col(Builder& b, Value ld, Value j, Value m) {
  Value c = col_of(b, ld, j);
  return b.select(after(b, m, ld.dim(0)), c, splat_like(b, 0, c));
}

// x - col ⊗ x[i] (LAPACK's ger with alpha = -1).
Value ger(Builder& b, Value x, Value col, Value i) {
  Value xi = row_of(b, x, i);
  int64_t n = x.dim(0), m = x.dim(1);
  return b.add(x, b.mul(b.broadcast_in_dim(col, {n, m}, {0}), b.broadcast_in_dim(b.neg(xi), {n, m}, {1})));
}

// Row i of x minus colᵀ x (LAPACK's gemv with alpha = -1, beta = 1);
// minus colᴴ x for a Hermitian factor.
Value gemv_row(Builder& b, Value x, Value col, Value i, bool herm) {
  int64_t n = x.dim(0), m = x.dim(1);
  if (herm) col = conj(b, col);
  Value dot = reduce_sum(b, b.mul(x, b.broadcast_in_dim(col, {n, m}, {0})), {0});
  return set_row(b, x, i, b.sub(row_of(b, x, i), dot));
}

// Forward step k of L D y = b: state {k, x} → the next.
Values solve_forward(Builder& b, Value ld, Value piv, const Values& s, bool herm) {
  Value k = s[0], x = s[1], one = i32(b, 1), k1 = b.add(k, one);
  Value p = scalar_at(b, piv, k);
  Value two = b.compare(Compare::kLT, p, i32(b, 0));
  Value x1 = swap_rows(b, x, k, b.sub(p, one));
  x1 = ger(b, x1, factor_col(b, ld, k, k), k);
  Value r = b.div(b.constant(x.dtype(), 1), elem(b, ld, k, k));
  x1 = set_row(b, x1, k, b.mul(b.broadcast_to(r, {x.dim(1)}), row_of(b, x1, k)));
  Value x2 = swap_rows(b, x, k1, b.sub(b.neg(p), one));
  x2 = ger(b, ger(b, x2, factor_col(b, ld, k, k1), k), factor_col(b, ld, k1, k1), k1);
  // The block's lower entry, and its upper one (the conjugate if Hermitian)
  // that row k is divided by.
  Value akm1k = elem(b, ld, k1, k), upper = herm ? conj(b, akm1k) : akm1k;
  Value akm1 = b.div(elem(b, ld, k, k), upper), ak = b.div(elem(b, ld, k1, k1), akm1k);
  Value denom = b.sub(b.mul(akm1, ak), b.constant(x.dtype(), 1));
  int64_t m = x.dim(1);
  auto bc = [&](Value v) { return b.broadcast_to(v, {m}); };
  Value bkm1 = b.div(row_of(b, x2, k), bc(upper)), bk = b.div(row_of(b, x2, k1), bc(akm1k));
  x2 = set_row(b, x2, k, b.div(b.sub(b.mul(bc(ak), bkm1), bk), bc(denom)));
  x2 = set_row(b, x2, k1, b.div(b.sub(b.mul(bc(akm1), bk), bkm1), bc(denom)));
  return {b.add(k, b.select(two, i32(b, 2), one)), b.select(two, x2, x1)};
}

// Backward step k of Lᵀ x = y (Lᴴ if Hermitian; k descending): state {k, x}
// → the next.
Values solve_backward(Builder& b, Value ld, Value piv, const Values& s, bool herm) {
  Value k = s[0], x = s[1], one = i32(b, 1), km1 = b.sub(k, one);
  Value p = scalar_at(b, piv, k);
  Value two = b.compare(Compare::kLT, p, i32(b, 0));
  Value y = gemv_row(b, x, factor_col(b, ld, k, k), k, herm);
  Value y2 = gemv_row(b, y, factor_col(b, ld, km1, k), km1, herm);
  y = b.select(two, y2, y);
  Value kp = b.select(two, b.sub(b.neg(p), one), b.sub(p, one));
  return {b.sub(k, b.select(two, i32(b, 2), one)), swap_rows(b, y, k, kp)};
}

// Loop state {k, x, ld, pivots}: the factor travels through the loop.
Value ldl_solve_one(Builder& b, Value ld, Value piv, Value x, bool herm) {
  int64_t n = ld.dim(0);
  using Step = Values (*)(Builder&, Value, Value, const Values&, bool);
  auto body = [herm](Step step) {
    return [step, herm](Builder& w, const Values& s) {
      Values next = step(w, s[2], s[3], {s[0], s[1]}, herm);
      return Values{next[0], next[1], s[2], s[3]};
    };
  };
  Value y = b.while_loop(
      {i32(b, 0), x, ld, piv},
      [n](Builder& w, const Values& s) { return Values{w.compare(Compare::kLT, s[0], i32(w, n))}; },
      body(solve_forward))[1];
  return b.while_loop(
      {i32(b, n - 1), y, ld, piv},
      [](Builder& w, const Values& s) { return Values{w.compare(Compare::kGE, s[0], i32(w, 0))}; },
      body(solve_backward))[1];
}

// linalg_ldl_solve(LD, pivots, B, hermitian) → X, batches broadcast.
Values ldl_solve(Context& c, const Args& a) {
  Value ld = a[0].tensor, piv = a[1].tensor, rhs = a[2].tensor;
  require_floating(c, ld);
  bool herm = a[3].b && hlo::is_complex(ld.dtype());
  const auto& shape = c.out().shape;
  int64_t r = static_cast<int64_t>(shape.size()), n = shape[r - 2], m = shape[r - 1];
  std::vector<int64_t> batch(shape.begin(), shape.end() - 2);
  int64_t B = product(batch);
  if (B * n * m == 0) return {c.b.zeros(c.out())};
  auto with = [&](std::vector<int64_t> tail) { auto v = batch; v.insert(v.end(), tail.begin(), tail.end()); return v; };
  Value lds = c.b.reshape(c.b.broadcast_to(ld, with({n, n})), {B, n, n});
  Value ps = c.b.reshape(c.b.broadcast_to(c.b.convert(piv, kI32), with({n})), {B, n});
  Value xs = c.b.reshape(c.b.broadcast_to(rhs, with({n, m})), {B, n, m});
  Value out = c.b.while_loop(
      {i32(c.b, 0), xs, lds, ps},
      [B](Builder& w, const Values& s) { return Values{w.compare(Compare::kLT, s[0], i32(w, B))}; },
      [n, m, herm](Builder& w, const Values& s) {
        Value z = i32(w, 0);
        Value l1 = w.reshape(w.dynamic_slice(s[2], {s[0], z, z}, {1, n, n}), {n, n});
        Value p1 = w.reshape(w.dynamic_slice(s[3], {s[0], z}, {1, n}), {n});
        Value x1 = w.reshape(w.dynamic_slice(s[1], {s[0], z, z}, {1, n, m}), {n, m});
        Value y = w.reshape(ldl_solve_one(w, l1, p1, x1, herm), {1, n, m});
        return Values{w.add(s[0], i32(w, 1)), w.dynamic_update_slice(s[1], y, {s[0], z, z}), s[2], s[3]};
      })[1];
  return {c.b.reshape(out, c.out().shape)};
}

}  // namespace

void register_linalg_ldl(Registry& r) {
  r.add("aten::linalg_ldl_factor_ex", ldl_factor_ex);
  r.add("aten::linalg_ldl_solve", ldl_solve);
}

}  // namespace torch_tpu::lowering
