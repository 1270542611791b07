// Helpers shared by the hand-written matrix factorizations (linalg_decomp.cc,
// linalg_factor.cc, linalg_qr.cc, linalg_eig.cc). Matrices are the last two
// dims; leading dims are a batch.
#pragma once

#include <numeric>

#include "helpers.h"

namespace torch_tpu::lowering::linalg {

using hlo::Compare;

constexpr ElementType kI32 = ElementType::kI32;

// An i32 scalar constant (loop counters, dynamic_slice starts).
inline Value i32(Builder& b, int64_t v) { return b.constant(kI32, static_cast<double>(v)); }

inline int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t d : v) p *= d;
  return p;
}

// Real or complex floating point (the factorizations written for both).
inline void require_floating(const Context& c, Value x) {
  if (!hlo::is_float(x.dtype()) && !hlo::is_complex(x.dtype()))
    throw Unsupported(c.op + " on " + x.type().str() + " (floating point or complex only)");
}

// i1 mask of the lower (row >= col) or upper triangle of matrices `shape`.
inline Value triangle_mask(Builder& b, const std::vector<int64_t>& shape, bool lower) {
  int64_t r = static_cast<int64_t>(shape.size());
  TensorType idx{ElementType::kI32, shape};
  Value row = b.iota(idx, r - 2), col = b.iota(idx, r - 1);
  return b.compare(lower ? Compare::kGE : Compare::kLE, row, col);
}

inline Value triangle(Builder& b, Value x, bool lower) {
  return b.select(triangle_mask(b, x.shape(), lower), x, splat_like(b, 0, x));
}

// Swaps the last two dims.
inline Value transpose_last(Builder& b, Value x) {
  std::vector<int64_t> perm(x.rank());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[x.rank() - 1], perm[x.rank() - 2]);
  return b.transpose(x, perm);
}

// The conjugate transpose of the last two dims (the transpose for real x).
inline Value adjoint_last(Builder& b, Value x) { return conj(b, transpose_last(b, x)); }

// |x|² in x's real type.
inline Value abs2(Builder& b, Value x) {
  if (!hlo::is_complex(x.dtype())) return b.mul(x, x);
  Value re = real_part(b, x), im = imag_part(b, x);
  return b.add(b.mul(re, re), b.mul(im, im));
}

// LAPACK's pivot magnitude (cabs1, what i?amax compares): |re| + |im| in x's
// real type; |x| for real x.
inline Value cabs1(Builder& b, Value x) {
  if (!hlo::is_complex(x.dtype())) return b.abs(x);
  return b.add(b.abs(real_part(b, x)), b.abs(imag_part(b, x)));
}

// x's batch dims broadcast to those of `like`, its matrix dims kept.
inline Value batch_to(Builder& b, Value x, const std::vector<int64_t>& like) {
  std::vector<int64_t> shape(like.begin(), like.end() - 2);
  shape.push_back(x.dim(x.rank() - 2));
  shape.push_back(x.dim(x.rank() - 1));
  return b.broadcast_to(x, shape);
}

// The identity's first `cols` columns, as `dtype` matrices of `batch` + [m, cols].
inline Value eye(Builder& b, ElementType dtype, std::vector<int64_t> batch, int64_t m, int64_t cols) {
  batch.push_back(m);
  batch.push_back(cols);
  TensorType idx{ElementType::kI32, batch};
  int64_t r = static_cast<int64_t>(batch.size());
  Value diag = b.compare(Compare::kEQ, b.iota(idx, r - 2), b.iota(idx, r - 1));
  return b.convert(diag, dtype);
}

// The leading (batch) dims of a value whose last `inner` dims are not batch.
inline std::vector<int64_t> batch_dims(Value x, int64_t inner = 2) {
  return {x.shape().begin(), x.shape().end() - inner};
}

// x [.., r, c] as [B, r, c].
inline Value flat3(Builder& b, Value x) {
  int64_t r = x.rank();
  return b.reshape(x, {product(batch_dims(x)), x.dim(r - 2), x.dim(r - 1)});
}

// A full-precision batched matmul [B.., m, k] x [B.., k, n] (never the
// bf16 schemes: a factorization at bf16 precision is useless).
inline Value matmul(Builder& b, Value x, Value y) {
  int64_t r = x.rank();
  std::vector<int64_t> batch(r - 2);
  std::iota(batch.begin(), batch.end(), 0);
  return b.dot_general(x, y, batch, batch, {r - 1}, {r - 2}, x.dtype(), "HIGHEST");
}

// Reduce with multiplication over `dims`.
inline Value reduce_prod(Builder& b, Value x, const std::vector<int64_t>& dims) {
  Value one = b.constant(x.dtype(), 1);
  return b.reduce({x}, {one}, dims, [](Builder& w, const Values& s) {
    return Values{w.mul(s[0], s[1])};
  })[0];
}

// The diagonal of square-or-not matrices [B.., m, n] → [B.., min(m, n)].
inline Value diagonal(Builder& b, Value x) {
  int64_t r = x.rank(), k = std::min(x.dim(r - 2), x.dim(r - 1));
  Value sq = b.slice(x, std::vector<int64_t>(r, 0), [&] {
    auto lim = x.shape();
    lim[r - 2] = lim[r - 1] = k;
    return lim;
  }());
  Value masked = b.select(b.compare(Compare::kEQ, b.iota(TensorType{ElementType::kI32, sq.shape()}, r - 2),
                                    b.iota(TensorType{ElementType::kI32, sq.shape()}, r - 1)),
                          sq, splat_like(b, 0, sq));
  return reduce_sum(b, masked, {r - 1});
}

// Rows of x [B.., m, n] reordered: out[.., i, :] = x[.., idx[.., i], :] for
// i32 indices idx [B.., m'] (a gather over the flattened batch).
inline Value take_rows(Builder& b, Value x, Value idx) {
  int64_t r = x.rank(), m = x.dim(r - 2), n = x.dim(r - 1), mo = idx.dim(r - 2);
  int64_t batch = 1;
  for (int64_t d = 0; d < r - 2; ++d) batch *= x.dim(d);
  auto shape = x.shape();
  shape[r - 2] = mo;
  if (batch * m * n * mo == 0) return b.zeros(TensorType{x.dtype(), shape});
  Value flat = b.reshape(x, {batch * m, n});
  Value base = b.mul(b.iota(TensorType{ElementType::kI32, {batch, mo}}, 0),
                     splat(b, static_cast<double>(m), ElementType::kI32, {batch, mo}));
  Value rows = b.add(b.reshape(b.convert(idx, ElementType::kI32), {batch, mo}), base);
  hlo::GatherDims g;
  g.offset_dims = {1};
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  Value got = b.gather(flat, b.reshape(rows, {batch * mo, 1}), g, {1, n},
                       TensorType{x.dtype(), {batch * mo, n}});
  return b.reshape(got, shape);
}

// Householder QR of [B, m, n] in LAPACK's packed form: {packed, tau [B, k]}
// (linalg_qr.cc).
Values geqrf_packed(Builder& b, Value a);
// The first `cols` columns of Q = H_0 ⋯ H_{k-1} from packed reflectors.
Value householder_q(Builder& b, Value packed, Value tau, int64_t cols);

}  // namespace torch_tpu::lowering::linalg
