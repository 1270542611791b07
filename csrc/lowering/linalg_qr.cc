// Householder QR as a loop over columns (StableHLO has no QR op): geqrf in
// LAPACK's packed form (R on and above the diagonal, the reflectors' tails
// below it, tau), and the products of those reflectors: householder_product,
// ormqr, linalg_qr. Real and complex: a reflector is H = I - tau v vᴴ, and
// geqrf leaves R's diagonal real, as LAPACK's ?larfg does. Matrix-vector products are elementwise multiplies and
// sums, so the results are full f32/f64 whatever the matmul precision mode.
#include "linalg_common.h"

namespace torch_tpu::lowering {

namespace {

using namespace linalg;

// Column j (scalar) of x [B, m, n] → [B, m].
Value column(Builder& b, Value x, Value j) {
  Value z = i32(b, 0);
  return b.reshape(b.dynamic_slice(x, {z, z, j}, {x.dim(0), x.dim(1), 1}), {x.dim(0), x.dim(1)});
}

// Entry j of v [B, m] → [B].
Value entry(Builder& b, Value v, Value j) {
  return b.reshape(b.dynamic_slice(v, {i32(b, 0), j}, {v.dim(0), 1}), {v.dim(0)});
}

Value per_row(Builder& b, Value v, int64_t m) { return b.broadcast_in_dim(v, {v.dim(0), m}, {0}); }

// c - tau v (vᴴ c) for v [B, m], tau [B], c [B, m, p].
Value reflect(Builder& b, Value v, Value tau, Value c) {
  const auto& s = c.shape();
  Value vb = b.broadcast_in_dim(v, s, {0, 1});
  Value w = reduce_sum(b, b.mul(conj(b, vb), c), {1});
  Value tw = b.mul(w, b.broadcast_in_dim(tau, w.shape(), {0}));
  return b.sub(c, b.mul(vb, b.broadcast_in_dim(tw, s, {0, 2})));
}

// Reflector j's vector from packed column `col` [B, m]: 0 above j, 1 at j.
Value reflector(Builder& b, Value col, Value j) {
  Value row = b.iota(TensorType{kI32, col.shape()}, 1), jb = b.broadcast_to(j, row.shape());
  Value one = b.select(b.compare(Compare::kEQ, row, jb), splat_like(b, 1, col), splat_like(b, 0, col));
  return b.select(b.compare(Compare::kGT, row, jb), col, one);
}

// H_j of packed reflectors v [B, m, >=k] and tau [B, k] applied to c [B, m, p]
// for j = k-1 .. 0 (descending: H_0 ⋯ H_{k-1} c = Q c) or, as H_jᴴ (conj(tau)),
// 0 .. k-1 (Qᴴ c).
Value apply_reflectors(Builder& b, Value v, Value tau, Value c, bool descending) {
  int64_t k = tau.dim(1);
  if (k * c.dim(0) * c.dim(1) * c.dim(2) == 0) return c;
  Values out = b.while_loop(
      {i32(b, 0), v, tau, c},
      [k](Builder& w, const Values& s) { return Values{w.compare(Compare::kLT, s[0], i32(w, k))}; },
      [k, descending](Builder& w, const Values& s) {
        Value j = descending ? w.sub(i32(w, k - 1), s[0]) : s[0];
        Value vj = reflector(w, column(w, s[1], j), j), tau = entry(w, s[2], j);
        if (!descending) tau = conj(w, tau);
        return Values{w.add(s[0], i32(w, 1)), s[1], s[2], reflect(w, vj, tau, s[3])};
      });
  return out[3];
}

// One geqrf step (LAPACK's ?larfg + ?larf) at column j of a [B, m, n]: beta
// is real, -sign(Re alpha) ‖(alpha, tail)‖, and Hᴴ is applied to the rest.
Values geqrf_step(Builder& b, Value j, Value a, Value taus) {
  int64_t B = a.dim(0), m = a.dim(1), n = a.dim(2);
  Value col = column(b, a, j);
  Value row = b.iota(TensorType{kI32, {B, m}}, 1), jb = b.broadcast_to(j, row.shape());
  Value below = b.compare(Compare::kGT, row, jb);
  Value alpha = entry(b, col, j);
  Value sq = abs2(b, col);
  Value tail = reduce_sum(b, b.select(below, sq, splat_like(b, 0, sq)), {1});
  Value skip = b.compare(Compare::kEQ, tail, splat_like(b, 0, tail));
  Value re = alpha;
  if (hlo::is_complex(alpha.dtype())) {
    re = real_part(b, alpha);
    Value im = imag_part(b, alpha);
    skip = b.and_(skip, b.compare(Compare::kEQ, im, splat_like(b, 0, im)));
  }
  Value norm = b.sqrt(b.add(abs2(b, alpha), tail));
  Value neg = b.compare(Compare::kGE, re, splat_like(b, 0, re));
  Value beta = b.convert(b.select(neg, b.neg(norm), norm), alpha.dtype());
  beta = b.select(skip, alpha, beta);
  Value tau = b.select(skip, splat_like(b, 0, alpha), b.div(b.sub(beta, alpha), beta));
  Value denom = b.select(skip, splat_like(b, 1, alpha), b.sub(alpha, beta));
  Value v = reflector(b, b.div(col, per_row(b, denom, m)), j);
  TensorType idx{kI32, {B, m, n}};
  Value cidx = b.iota(idx, 2), jc = b.broadcast_to(j, idx.shape);
  Value rest = reflect(b, v, conj(b, tau), a);
  Value packed = b.broadcast_in_dim(b.select(below, v, per_row(b, beta, m)), idx.shape, {0, 1});
  Value on_col = b.and_(b.compare(Compare::kEQ, cidx, jc), b.compare(Compare::kGE, b.iota(idx, 1), jc));
  a = b.select(b.compare(Compare::kGT, cidx, jc), rest, b.select(on_col, packed, a));
  taus = b.dynamic_update_slice(taus, b.reshape(tau, {B, 1}), {i32(b, 0), j});
  return {a, taus};
}

// geqrf of [B, m, n] → {packed, tau [B, k]}.
Values geqrf_flat(Builder& b, Value a) {
  int64_t k = std::min(a.dim(1), a.dim(2));
  if (k * a.dim(0) == 0) return {a, b.zeros(TensorType{a.dtype(), {a.dim(0), k}})};
  Values out = b.while_loop(
      {i32(b, 0), a, b.zeros(TensorType{a.dtype(), {a.dim(0), k}})},
      [k](Builder& w, const Values& s) { return Values{w.compare(Compare::kLT, s[0], i32(w, k))}; },
      [](Builder& w, const Values& s) {
        Values next = geqrf_step(w, s[0], s[1], s[2]);
        return Values{w.add(s[0], i32(w, 1)), next[0], next[1]};
      });
  return {out[1], out[2]};
}

Value unflat(Builder& b, Value x, const std::vector<int64_t>& batch) {
  auto shape = batch;
  shape.insert(shape.end(), x.shape().begin() + 1, x.shape().end());
  return b.reshape(x, shape);
}

// Q's first `cols` columns from packed reflectors [B, m, n] and tau [B, k].
Value q_of(Builder& b, Value packed, Value tau, int64_t cols) {
  Value id = eye(b, packed.dtype(), {packed.dim(0)}, packed.dim(1), cols);
  return apply_reflectors(b, packed, tau, id, true);
}

Values householder_product(Context& c, const Args& a) {
  Value v = a[0].tensor;
  require_floating(c, v);
  Value tau = c.b.reshape(a[1].tensor, {product(batch_dims(v)), a[1].tensor.dim(a[1].tensor.rank() - 1)});
  Value q = q_of(c.b, flat3(c.b, v), tau, v.dim(v.rank() - 1));
  return {c.b.reshape(q, c.out().shape)};
}

// ormqr(A, tau, C, left, transpose): op(Q) C or C op(Q), op(Q) = Qᴴ when
// `transpose` (Qᵀ for real).
Values ormqr(Context& c, const Args& a) {
  Value v = a[0].tensor, cm = a[2].tensor;
  require_floating(c, v);
  bool left = a[3].b, trans = a[4].b;
  auto batch = batch_dims(cm);
  Value vf = flat3(c.b, batch_to(c.b, v, cm.shape()));
  auto tshape = batch;
  tshape.push_back(a[1].tensor.dim(a[1].tensor.rank() - 1));
  Value tau = c.b.reshape(c.b.broadcast_to(a[1].tensor, tshape), {product(batch), tshape.back()});
  Value x = flat3(c.b, left ? cm : adjoint_last(c.b, cm));
  // C Q = (Qᴴ Cᴴ)ᴴ: a right product is a left one with the transpose flipped.
  bool descending = left ? !trans : trans;
  Value y = apply_reflectors(c.b, vf, tau, x, descending);
  if (!left) y = adjoint_last(c.b, y);
  return {c.b.reshape(y, c.out().shape)};
}

Values linalg_qr(Context& c, const Args& a) {
  Value x = a[0].tensor;
  require_floating(c, x);
  const std::string& mode = a[1].s;
  auto batch = batch_dims(x);
  int64_t m = x.dim(x.rank() - 2), n = x.dim(x.rank() - 1), k = std::min(m, n);
  Values qr = geqrf_flat(c.b, flat3(c.b, x));
  int64_t rrows = mode == "complete" ? m : k;
  Value r = c.b.slice(qr[0], {0, 0, 0}, {qr[0].dim(0), rrows, n});
  r = unflat(c.b, triangle(c.b, r, false), batch);
  if (mode == "r") return {c.b.zeros(c.out(0)), r};
  Value q = q_of(c.b, qr[0], qr[1], mode == "complete" ? m : k);
  return {unflat(c.b, q, batch), r};
}

}  // namespace

namespace linalg {
Values geqrf_packed(Builder& b, Value a) { return geqrf_flat(b, a); }
Value householder_q(Builder& b, Value packed, Value tau, int64_t cols) {
  return q_of(b, packed, tau, cols);
}
}  // namespace linalg

// aten::geqrf itself is not registered: PyTorch has no meta function for it,
// which the tpu kernel needs for output shapes (linalg_lstsq lacks one too).
void register_linalg_qr(Registry& r) {
  r.add("aten::linalg_householder_product", householder_product);
  r.add("aten::ormqr", ormqr);
  r.add("aten::linalg_qr", linalg_qr);
}

}  // namespace torch_tpu::lowering
