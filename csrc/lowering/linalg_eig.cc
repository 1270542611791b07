// Symmetric eigendecomposition and SVD by Jacobi rotations (StableHLO has
// neither op): cyclic sweeps over all column pairs, each pair one rotation,
// until the off-diagonal part is at rounding level. eigh rotates A from both
// sides (two-sided Jacobi); svd orthogonalizes A's columns (one-sided,
// Hestenes), which keeps small singular values accurate, and completes U by
// Householder QR when it needs more columns than A has nonzero ones. Complex
// (Hermitian) matrices take the same real rotations once a phase on column q
// has made the pair's off-diagonal entry real and non-negative.
#include <cmath>
#include <limits>

#include "linalg_common.h"

namespace torch_tpu::lowering {

namespace {

using namespace linalg;

constexpr int kMaxSweeps = 40;


double epsilon(ElementType t) {
  return t == ElementType::kF64 || t == ElementType::kC128 ? std::numeric_limits<double>::epsilon()
                                : std::numeric_limits<float>::epsilon();
}

// Entry (i, j) (scalars) of x [B, r, c] → [B].
Value at(Builder& b, Value x, Value i, Value j) {
  return b.reshape(b.dynamic_slice(x, {i32(b, 0), i, j}, {x.dim(0), 1, 1}), {x.dim(0)});
}

// Rotates slices p and q of x [B, r, c] along `dim` (1 rows, 2 columns):
// x_p ← c x_p − s x_q, x_q ← s x_p + c x_q, for c, s [B].
Value rotate_pair(Builder& b, Value x, int64_t dim, Value p, Value q, Value cs, Value sn) {
  auto size = x.shape();
  size[dim] = 1;
  Value z = i32(b, 0);
  Values sp{z, z, z}, sq{z, z, z};
  sp[dim] = p;
  sq[dim] = q;
  Value xp = b.dynamic_slice(x, sp, size), xq = b.dynamic_slice(x, sq, size);
  Value cb = b.convert(b.broadcast_in_dim(cs, size, {0}), x.dtype());
  Value sb = b.convert(b.broadcast_in_dim(sn, size, {0}), x.dtype());
  Value np = b.sub(b.mul(cb, xp), b.mul(sb, xq)), nq = b.add(b.mul(sb, xp), b.mul(cb, xq));
  return b.dynamic_update_slice(b.dynamic_update_slice(x, np, sp), nq, sq);
}

// Slice q of x [B, r, c] along `dim` multiplied by f [B].
Value scale_slice(Builder& b, Value x, int64_t dim, Value q, Value f) {
  auto size = x.shape();
  size[dim] = 1;
  Value z = i32(b, 0);
  Values at{z, z, z};
  at[dim] = q;
  Value xq = b.mul(b.dynamic_slice(x, at, size), b.broadcast_in_dim(f, size, {0}));
  return b.dynamic_update_slice(x, xq, at);
}

// For a complex off-diagonal entry g [B]: {|g|, the phase g / |g| (1 where g
// is 0)}; for a real one {g, none}.
Values phase_of(Builder& b, Value g) {
  if (!hlo::is_complex(g.dtype())) return {g, Value()};
  Value mag = b.abs(g);
  Value zero = b.compare(Compare::kEQ, mag, splat_like(b, 0, mag));
  Value safe = b.convert(b.select(zero, splat_like(b, 1, mag), mag), g.dtype());
  return {mag, b.select(zero, splat_like(b, 1, g), b.div(g, safe))};
}

// The real part (a complex diagonal's entries are real up to rounding).
Value re(Builder& b, Value x) { return hlo::is_complex(x.dtype()) ? real_part(b, x) : x; }

// The rotation (c, s) that zeroes apq of the symmetric 2×2 [[app, apq],
// [apq, aqq]]; the identity where `skip`.
Values rotation(Builder& b, Value app, Value aqq, Value apq, Value skip) {
  Value one = splat_like(b, 1, apq);
  Value safe = b.select(skip, one, apq);
  Value theta = b.div(b.sub(aqq, app), b.add(safe, safe));
  Value sign = b.select(b.compare(Compare::kGE, theta, splat_like(b, 0, theta)), one, b.neg(one));
  Value root = b.sqrt(b.add(b.mul(theta, theta), one));
  Value t = b.div(sign, b.add(b.abs(theta), root));
  t = b.select(b.or_(skip, b.not_(b.is_finite(theta))), splat_like(b, 0, t), t);
  Value c = b.rsqrt(b.add(b.mul(t, t), one));
  return {c, b.mul(t, c)};
}

using PairFn = std::function<Values(Builder&, Value p, Value q, const Values& state)>;
using DoneFn = std::function<Value(Builder&, const Values& state)>;

// Cyclic sweeps of `rotate` over all pairs p < q of n, until `done` or
// kMaxSweeps.
Values sweeps(Builder& b, const Values& init, int64_t n, const PairFn& rotate, const DoneFn& done) {
  if (n < 2) return init;
  std::vector<int64_t> ps, qs;
  for (int64_t p = 0; p < n; ++p)
    for (int64_t q = p + 1; q < n; ++q) ps.push_back(p), qs.push_back(q);
  int64_t pairs = static_cast<int64_t>(ps.size());
  auto one_sweep = [&](Builder& w, const Values& s) {
    Values state{i32(w, 0)};
    state.insert(state.end(), s.begin() + 1, s.end());
    Values out = w.while_loop(
        state,
        [pairs](Builder& v, const Values& t) { return Values{v.compare(Compare::kLT, t[0], i32(v, pairs))}; },
        [&](Builder& v, const Values& t) {
          auto pick = [&](const std::vector<int64_t>& tab) {
            Value all = v.convert(v.constant_i64_vector(tab), kI32);
            return v.reshape(v.dynamic_slice(all, {t[0]}, {1}), {});
          };
          Values rest(t.begin() + 1, t.end());
          Values next = rotate(v, pick(ps), pick(qs), rest);
          next.insert(next.begin(), v.add(t[0], i32(v, 1)));
          return next;
        });
    out[0] = w.add(s[0], i32(w, 1));
    return out;
  };
  Values state{i32(b, 0)};
  state.insert(state.end(), init.begin(), init.end());
  Values out = b.while_loop(
      state,
      [&](Builder& w, const Values& s) {
        Values rest(s.begin() + 1, s.end());
        return Values{w.and_(w.compare(Compare::kLT, s[0], i32(w, kMaxSweeps)), w.not_(done(w, rest)))};
      },
      one_sweep);
  return Values(out.begin() + 1, out.end());
}

Value all_batch(Builder& b, Value pred) {
  Value bad = b.convert(b.not_(pred), kI32);
  std::vector<int64_t> dims(bad.rank());
  std::iota(dims.begin(), dims.end(), 0);
  return b.compare(Compare::kEQ, reduce_max(b, bad, dims), i32(b, 0));
}

// ---- eigh ------------------------------------------------------------------------

// The symmetric (Hermitian) matrix that the `lower` (or upper) triangle of a
// describes; a complex diagonal's imaginary part is ignored, as LAPACK does.
Value symmetrize(Builder& b, Value a, bool lower) {
  Value strict = b.select(triangle_mask(b, a.shape(), !lower), splat_like(b, 0, a), a);
  Value tri = triangle(b, a, lower);
  if (hlo::is_complex(a.dtype())) {
    Value diag = b.and_(triangle_mask(b, a.shape(), true), triangle_mask(b, a.shape(), false));
    Value r = real_part(b, tri);
    tri = b.select(diag, make_complex(b, r, splat_like(b, 0, r), a.type()), tri);
  }
  return b.add(tri, adjoint_last(b, strict));
}

// Two-sided Jacobi on symmetric [B, n, n]: {A → diagonal, V}.
Values jacobi_eigh(Builder& b, Value a) {
  int64_t B = a.dim(0), n = a.dim(1);
  double tol = epsilon(a.dtype()) * static_cast<double>(n);
  PairFn rotate = [](Builder& w, Value p, Value q, const Values& s) {
    Value x = s[0], v = s[1];
    Values g = phase_of(w, at(w, x, p, q));
    if (g[1].valid()) {  // Dᴴ A D and V D for D = diag(.., conj(phase) at q, ..)
      Value back = conj(w, g[1]);
      x = scale_slice(w, scale_slice(w, x, 2, q, back), 1, q, g[1]);
      v = scale_slice(w, v, 2, q, back);
    }
    Values cs = rotation(w, re(w, at(w, x, p, p)), re(w, at(w, x, q, q)), g[0],
                         w.compare(Compare::kEQ, g[0], splat_like(w, 0, g[0])));
    x = rotate_pair(w, rotate_pair(w, x, 2, p, q, cs[0], cs[1]), 1, p, q, cs[0], cs[1]);
    return Values{x, rotate_pair(w, v, 2, p, q, cs[0], cs[1])};
  };
  DoneFn done = [tol](Builder& w, const Values& s) {
    Value sq = abs2(w, s[0]);
    Value off = w.select(triangle_mask(w, sq.shape(), true), splat_like(w, 0, sq),
                         w.add(sq, transpose_last(w, sq)));
    Value offn = reduce_sum(w, off, {1, 2}), all = reduce_sum(w, sq, {1, 2});
    return all_batch(w, w.compare(Compare::kLE, offn, w.mul(all, splat_like(w, tol * tol, all))));
  };
  return sweeps(b, {a, eye(b, a.dtype(), {B}, n, n)}, n, rotate, done);
}

// Sorts values [B, n] (ascending or descending) and the columns of each
// matrix in `cols` [B, r, n] alike.
Values sort_with_columns(Builder& b, Value vals, const Values& cols, bool ascending) {
  Value idx = b.iota(TensorType{kI32, vals.shape()}, 1);
  Values s = b.sort({vals, idx}, 1, true, [ascending](Builder& w, const Values& v) {
    return Values{w.compare(ascending ? Compare::kLT : Compare::kGT, v[0], v[1])};
  });
  Values out{s[0]};
  for (Value m : cols) out.push_back(transpose_last(b, take_rows(b, transpose_last(b, m), s[1])));
  return out;
}

Values eigh(Context& c, const Args& a) {
  Value x = a[0].tensor;
  require_floating(c, x);
  bool lower = a[1].s != "U" && a[1].s != "u";
  int64_t n = x.dim(x.rank() - 1), B = product(batch_dims(x));
  if (B * n == 0) return {c.b.zeros(c.out(0)), c.b.zeros(c.out(1))};
  Value sym = c.b.reshape(symmetrize(c.b, x, lower), {B, n, n});
  Values ev = jacobi_eigh(c.b, sym);
  Values sorted = sort_with_columns(c.b, re(c.b, diagonal(c.b, ev[0])), {ev[1]}, true);
  Value vals = c.b.reshape(sorted[0], c.out(0).shape);
  if (!a[2].b) return {vals, c.b.zeros(c.out(1))};
  return {vals, c.b.reshape(sorted[1], c.out(1).shape)};
}

// ---- svd -------------------------------------------------------------------------

// One-sided Jacobi on [B, m, n] (m >= n): {X = U S, V}.
Values jacobi_svd(Builder& b, Value a) {
  int64_t B = a.dim(0), m = a.dim(1), n = a.dim(2);
  double tol = epsilon(a.dtype()) * static_cast<double>(std::max<int64_t>(m, 4));
  PairFn rotate = [tol](Builder& w, Value p, Value q, const Values& s) {
    Value x = s[0];
    int64_t rows = x.dim(1);
    auto col = [&](Value j) {
      Value z = i32(w, 0);
      return w.reshape(w.dynamic_slice(x, {z, z, j}, {x.dim(0), rows, 1}), {x.dim(0), rows});
    };
    Value xp = col(p), xq = col(q), v = s[1];
    Value alpha = reduce_sum(w, abs2(w, xp), {1}), beta = reduce_sum(w, abs2(w, xq), {1});
    Values g = phase_of(w, reduce_sum(w, w.mul(conj(w, xp), xq), {1}));
    if (g[1].valid()) {  // column q of X and V times conj(phase): x_pᴴ x_q real
      Value back = conj(w, g[1]);
      x = scale_slice(w, x, 2, q, back);
      v = scale_slice(w, v, 2, q, back);
    }
    Value bound = w.mul(w.sqrt(w.mul(alpha, beta)), splat_like(w, tol, alpha));
    Value skip = w.compare(Compare::kLE, w.abs(g[0]), bound);
    Values cs = rotation(w, alpha, beta, g[0], skip);
    return Values{rotate_pair(w, x, 2, p, q, cs[0], cs[1]), rotate_pair(w, v, 2, p, q, cs[0], cs[1])};
  };
  DoneFn done = [tol](Builder& w, const Values& s) {
    Value g = matmul(w, adjoint_last(w, s[0]), s[0]);
    Value d = re(w, diagonal(w, g));
    int64_t k = d.dim(1);
    std::vector<int64_t> shape{d.dim(0), k, k};
    Value scale = w.sqrt(w.mul(w.broadcast_in_dim(d, shape, {0, 1}), w.broadcast_in_dim(d, shape, {0, 2})));
    TensorType idx{kI32, shape};
    Value offdiag = w.compare(Compare::kNE, w.iota(idx, 1), w.iota(idx, 2));
    Value ok = w.compare(Compare::kLE, w.abs(g), w.mul(scale, splat_like(w, tol, scale)));
    return all_batch(w, w.or_(ok, w.not_(offdiag)));
  };
  return sweeps(b, {a, eye(b, a.dtype(), {B}, n, n)}, n, rotate, done);
}

// U's first `cols` columns from U·S [B, m, n] and S [B, n]: the normalized
// columns, completed to an orthonormal set through Householder QR.
Value complete_u(Builder& b, Value us, Value s, int64_t cols) {
  Value sb = b.broadcast_in_dim(s, us.shape(), {0, 2});
  Value positive = b.compare(Compare::kGT, sb, splat_like(b, 0, sb));
  Value safe = b.convert(b.select(positive, sb, splat_like(b, 1, sb)), us.dtype());
  Value u = b.select(positive, b.div(us, safe), splat_like(b, 0, us));
  Values qr = geqrf_packed(b, u);
  Value q = householder_q(b, qr[0], qr[1], cols);
  Value d = re(b, diagonal(b, qr[0]));  // real: geqrf's beta
  Value sign = b.select(b.compare(Compare::kLT, d, splat_like(b, 0, d)), splat_like(b, -1, d), splat_like(b, 1, d));
  int64_t k = d.dim(1);
  if (cols > k) sign = b.pad(sign, b.constant(sign.dtype(), 1), {0, 0}, {0, cols - k});
  if (cols < k) sign = b.slice(sign, {0, 0}, {sign.dim(0), cols});
  return b.mul(q, b.convert(b.broadcast_in_dim(sign, q.shape(), {0, 2}), q.dtype()));
}

// SVD of [B, m, n] with m >= n: {U [B, m, ucols], S [B, n], V [B, n, n]}.
Values svd_tall(Builder& b, Value a, int64_t ucols, bool compute_uv) {
  Values xv = jacobi_svd(b, a);
  Value s = b.sqrt(reduce_sum(b, abs2(b, xv[0]), {1}));
  Values sorted = sort_with_columns(b, s, {xv[0], xv[1]}, false);
  if (!compute_uv) return {Value(), sorted[0], Value()};
  return {complete_u(b, sorted[1], sorted[0], ucols), sorted[0], sorted[2]};
}

Values svd(Context& c, const Args& a) {
  Value x = a[0].tensor;
  require_floating(c, x);
  bool full = a[1].b, uv = a[2].b;
  auto batch = batch_dims(x);
  int64_t m = x.dim(x.rank() - 2), n = x.dim(x.rank() - 1), k = std::min(m, n), B = product(batch);
  if (B * k == 0) {
    if (!uv) return {c.b.zeros(c.out(0)), c.b.zeros(c.out(1)), c.b.zeros(c.out(2))};
    auto e = [&](const TensorType& t) {
      int64_t r = t.rank();
      return eye(c.b, t.dtype, batch_dims(c.b.zeros(t)), t.shape[r - 2], t.shape[r - 1]);
    };
    return {e(c.out(0)), c.b.zeros(c.out(1)), e(c.out(2))};
  }
  bool wide = m < n;
  Value a3 = c.b.reshape(x, {B, m, n});
  if (wide) a3 = adjoint_last(c.b, a3);
  int64_t rows = wide ? n : m;
  Values r = svd_tall(c.b, a3, full ? rows : k, uv);
  Value s = c.b.reshape(r[1], c.out(1).shape);
  if (!uv) return {c.b.zeros(c.out(0)), s, c.b.zeros(c.out(2))};
  // A = U S Vᴴ; for a wide A, Aᴴ = U' S V'ᴴ gives U = V', Vᴴ = U'ᴴ.
  Value u = wide ? r[2] : r[0];
  Value vh = adjoint_last(c.b, wide ? r[0] : r[2]);
  return {c.b.reshape(u, c.out(0).shape), s, c.b.reshape(vh, c.out(2).shape)};
}

}  // namespace

void register_linalg_eig(Registry& r) {
  r.add("aten::_linalg_eigh", eigh);
  r.add("aten::_linalg_svd", svd);
}

}  // namespace torch_tpu::lowering
