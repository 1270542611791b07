// Dense attention as one op: aten::_scaled_dot_product_fused_attention_
// overrideable and its backward, the kernels PyTorch's
// scaled_dot_product_attention calls for a PrivateUse1 device whose
// `_fused_sdp_choice` says "overrideable" (aten/sdpa_choice.cc). Inputs are
// (B, Hq, L, E) query and (B, Hk, S, E) key / (B, Hk, S, Ev) value (3-D
// without B); Hq a multiple of Hk (grouped-query attention: query head h
// reads key/value head h / (Hq / Hk)); an optional additive bias that
// broadcasts to (B, Hq, L, S) (PyTorch has turned a boolean mask into
// 0 / -inf); `is_causal` as the math path has it: query i sees keys j <= i
// (upper left). Matmuls use the TPU numerics of every matmul (precise_dot at
// the op's precision); scores, softmax and sums are f32; for 16-bit inputs
// the probabilities (and score gradients) enter their matmuls rounded to the
// input type, as fused attention kernels feed them. A row that sees no key
// gets zeros (PyTorch's _safe_softmax) and logsumexp +inf.
#include <cmath>
#include <limits>

#include "helpers.h"
#include "precision.h"

namespace torch_tpu::lowering {
namespace {

using hlo::Compare;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Shape {
  bool batched;               // 4-D inputs
  int64_t b, hk, g, l, s, e, ev;
  double scale;
};

Shape shape_of(const Context& c, Value q, Value k, Value v, const Arg& scale) {
  const auto& qs = q.shape();
  const auto& ks = k.shape();
  const auto& vs = v.shape();
  const size_t n = qs.size();
  if ((n != 3 && n != 4) || ks.size() != n || vs.size() != n)
    throw InvalidArgument(c.op + ": query, key and value must all be 3-D or all 4-D");
  const bool batched = n == 4;
  const int64_t b = batched ? qs[0] : 1;
  const int64_t hq = qs[n - 3], hk = ks[n - 3];
  if ((batched && (ks[0] != b || vs[0] != b)) || vs[n - 3] != hk || vs[n - 2] != ks[n - 2] ||
      ks[n - 1] != qs[n - 1])
    throw InvalidArgument(c.op + ": key and value must match the query's batch and head size and "
                          "each other's heads and length");
  if (hk == 0 || hq % hk != 0)
    throw InvalidArgument(c.op + ": the number of query heads (" + std::to_string(hq) +
                          ") must be a multiple of the number of key/value heads (" +
                          std::to_string(hk) + ")");
  Shape p{batched, b, hk, hq / hk, qs[n - 2], ks[n - 2], qs[n - 1], vs[n - 1], 0};
  p.scale = scale.none() ? 1.0 / std::sqrt(static_cast<double>(p.e)) : scale.d;
  return p;
}

// (B, Hq, L, X) (or (Hq, L, X)) → (B, Hk, G, L, X) and back.
Value grouped(Builder& b, Value x, const Shape& p) {
  return b.reshape(x, {p.b, p.hk, p.g, p.l, x.shape().back()});
}
Value ungrouped(Builder& b, Value x, const Shape& p) {
  const int64_t last = x.shape().back();
  if (p.batched) return b.reshape(x, {p.b, p.hk * p.g, p.l, last});
  return b.reshape(x, {p.hk * p.g, p.l, last});
}
// (B, Hk, S, X) (or (Hk, S, X)) → (B, Hk, S, X).
Value batched(Builder& b, Value x, const Shape& p) {
  return p.batched ? x : b.reshape(x, {1, p.hk, p.s, x.shape().back()});
}
Value unbatched(Builder& b, Value x, const Shape& p) {
  return p.batched ? x : b.reshape(x, {p.hk, p.s, x.shape().back()});
}

// A 16-bit operand as the dot takes it (rounded to the input type), or f32.
Value operand(Builder& b, Value x, ElementType input) {
  bool half = input == ElementType::kBF16 || input == ElementType::kF16;
  return b.convert(x, half ? input : x.dtype());
}

std::vector<int64_t> scores_shape(const Shape& p) { return {p.b, p.hk, p.g, p.l, p.s}; }

// The bias as (B, Hk, G, L, S) f32, from any shape that broadcasts to
// (B, Hq, L, S) (or (Hq, L, S)).
Value bias_in(Builder& b, Value bias, const Shape& p) {
  const int64_t full = p.batched ? 4 : 3;
  const int64_t r = static_cast<int64_t>(bias.shape().size());
  std::vector<int64_t> target = {p.b, p.hk * p.g, p.l, p.s};
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < r; ++i) dims.push_back(4 - r + i);
  if (r > full) throw InvalidArgument("attention bias of rank " + std::to_string(r) + " for " +
                                      std::to_string(full) + "-D attention");
  Value x = b.broadcast_in_dim(b.convert(bias, ElementType::kF32), target, dims);
  return b.reshape(x, scores_shape(p));
}

// The bias gradient: `ds` (B, Hk, G, L, S) summed down to the bias's shape.
Value bias_out(Builder& b, Value ds, Value bias, const Shape& p, ElementType out) {
  const auto& bs = bias.shape();
  const int64_t r = static_cast<int64_t>(bs.size());
  Value x = b.reshape(ds, {p.b, p.hk * p.g, p.l, p.s});
  std::vector<int64_t> sum;
  for (int64_t i = 0; i < 4; ++i) {
    int64_t j = i - (4 - r);
    if (j < 0 || (bs[j] == 1 && x.shape()[i] != 1)) sum.push_back(i);
  }
  x = reduce_sum(b, x, sum);
  return b.convert(b.reshape(x, bs), out);
}

// Scaled scores with bias and causal mask: (B, Hk, G, L, S) f32.
Value scores(Context& c, const Shape& p, Value q5, Value k4, const Arg& bias, bool causal) {
  Builder& b = c.b;
  // (B, Hk, G, L, E) · (B, Hk, S, E) → (B, Hk, G, L, S)
  Value s = b.convert(precise_dot(c, q5, k4, {{0, 1}, {0, 1}, {4}, {3}}, true), ElementType::kF32);
  s = b.mul(s, splat_like(b, p.scale, s));
  if (!bias.none()) s = b.add(s, bias_in(b, bias.tensor, p));
  if (causal) {
    const std::vector<int64_t> grid = scores_shape(p);
    Value i = b.iota(TensorType{ElementType::kI32, grid}, 3);
    Value j = b.iota(TensorType{ElementType::kI32, grid}, 4);
    s = b.select(b.compare(Compare::kLE, j, i), s, splat_like(b, -kInf, s));
  }
  return s;
}

// logsumexp over keys, +inf for a row whose every score is -inf:
// (B, Hk, G, L).
Value logsumexp(Builder& b, Value s) {
  Value top = reduce_max(b, s, {4});
  Value finite = b.select(b.is_finite(top), top, splat_like(b, 0, top));
  Value sum = reduce_sum(b, b.exp(b.sub(s, b.broadcast_in_dim(finite, s.shape(), {0, 1, 2, 3}))), {4});
  return b.select(b.compare(Compare::kGT, sum, splat_like(b, 0, sum)), b.add(finite, b.log(sum)),
                  splat_like(b, kInf, sum));
}

// exp(s - lse): 0 where masked and in rows with no key (lse = +inf).
Value probabilities(Builder& b, Value s, Value lse) {
  return b.exp(b.sub(s, b.broadcast_in_dim(lse, s.shape(), {0, 1, 2, 3})));
}

Value lse_out(Builder& b, Value lse, const Shape& p) {
  return b.reshape(lse, {p.b, p.hk * p.g, p.l});
}

Values forward(Context& c, const Args& a) {
  // (query, key, value, attn_bias, dropout_p, is_causal, return_debug_mask, scale)
  Builder& b = c.b;
  if (a[4].d != 0.0) throw Unsupported(c.op + ": dropout_p > 0");
  if (a[6].b) throw Unsupported(c.op + ": return_debug_mask");
  const Shape p = shape_of(c, a[0].tensor, a[1].tensor, a[2].tensor, a[7]);
  const ElementType in = a[0].tensor.dtype();
  Value q5 = grouped(b, a[0].tensor, p);
  Value k4 = batched(b, a[1].tensor, p);
  Value v4 = batched(b, a[2].tensor, p);
  Value s = scores(c, p, q5, k4, a[3], a[5].b);
  Value lse = logsumexp(b, s);
  Value prob = operand(b, probabilities(b, s, lse), in);
  // (B, Hk, G, L, S) · (B, Hk, S, Ev) → (B, Hk, G, L, Ev)
  Value o = precise_dot(c, prob, operand(b, v4, in), {{0, 1}, {0, 1}, {4}, {2}}, true);
  return {b.convert(ungrouped(b, o, p), c.out(0).dtype), lse_out(b, lse, p), b.zeros(c.out(2)),
          b.zeros(c.out(3))};
}

Values backward(Context& c, const Args& a) {
  // (grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp,
  //  cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
  //  philox_offset, scale)
  Builder& b = c.b;
  if (a[12].d != 0.0) throw Unsupported(c.op + ": dropout_p > 0");
  const Shape p = shape_of(c, a[1].tensor, a[2].tensor, a[3].tensor, a[16]);
  const ElementType in = a[1].tensor.dtype();
  Value q5 = grouped(b, a[1].tensor, p);
  Value k4 = batched(b, a[2].tensor, p);
  Value v4 = batched(b, a[3].tensor, p);
  Value dout5 = grouped(b, a[0].tensor, p);  // (B, Hk, G, L, Ev)
  Value out5 = grouped(b, a[6].tensor, p);
  Value lse = b.reshape(a[7].tensor, {p.b, p.hk, p.g, p.l});
  Value prob = probabilities(b, scores(c, p, q5, k4, a[4], a[13].b), lse);

  // dV = Pᵀ·dO: (B, Hk, S, Ev)
  Value dv = precise_dot(c, operand(b, prob, in), dout5, {{0, 1}, {0, 1}, {2, 3}, {2, 3}}, true);
  // dP = dO·Vᵀ: (B, Hk, G, L, S); D = rowsum(dO ∘ O): (B, Hk, G, L)
  Value dp = b.convert(precise_dot(c, dout5, v4, {{0, 1}, {0, 1}, {4}, {3}}, true), ElementType::kF32);
  Value d = reduce_sum(b, b.mul(b.convert(dout5, ElementType::kF32), b.convert(out5, ElementType::kF32)), {4});
  Value ds = b.mul(prob, b.sub(dp, b.broadcast_in_dim(d, dp.shape(), {0, 1, 2, 3})));
  Value dss = operand(b, b.mul(ds, splat_like(b, p.scale, ds)), in);
  // dQ = dS·K: (B, Hk, G, L, E); dK = dSᵀ·Q: (B, Hk, S, E)
  Value dq = precise_dot(c, dss, k4, {{0, 1}, {0, 1}, {4}, {2}}, true);
  Value dk = precise_dot(c, dss, q5, {{0, 1}, {0, 1}, {2, 3}, {2, 3}}, true);
  Values grads{b.convert(ungrouped(b, dq, p), c.out(0).dtype),
               b.convert(unbatched(b, dk, p), c.out(1).dtype),
               b.convert(unbatched(b, dv, p), c.out(2).dtype)};
  if (!a[4].none()) grads.push_back(bias_out(b, ds, a[4].tensor, p, c.out(3).dtype));
  return grads;
}

}  // namespace

void register_sdpa(Registry& r) {
  r.add("aten::_scaled_dot_product_fused_attention_overrideable", forward);
  r.add("aten::_scaled_dot_product_fused_attention_overrideable_backward", backward);
}

}  // namespace torch_tpu::lowering
