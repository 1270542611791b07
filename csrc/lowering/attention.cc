// Variable-length (packed) attention: aten::_flash_attention_forward and
// _flash_attention_backward in their varlen form (3-D q/k/v of packed tokens,
// cum_seq_q/cum_seq_k the sequence offsets), as FlashAttention defines them.
// torch.nn.attention.varlen (TorchTitan's `varlen` attention backend) calls
// them. Dense, not blocked: every head scores all (query, key) pairs of the
// packed batch and masks those of different sequences or outside the window,
// so memory grows with T_q·T_k per head. Scores, softmax and accumulations
// are f32; for 16-bit inputs the probabilities (and the score gradients)
// enter their matmuls rounded to the input type, as FlashAttention's kernels
// feed them to the tensor cores.
#include <cmath>
#include <limits>

#include "helpers.h"

namespace torch_tpu::lowering {
namespace {

using hlo::Compare;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Where each packed token sits: its sequence and its position and that
// sequence's length. A token outside every sequence (before cum_seq[0] or
// from cum_seq[-1] on) is not `valid`.
struct Tokens {
  Value seq, pos, len, valid;  // [T]: i32, i32, i32, pred
};

Tokens tokens(Builder& b, Value cum_seq, int64_t total) {
  const int64_t n = cum_seq.shape().at(0);  // sequences + 1
  const std::vector<int64_t> grid{total, n};
  Value cu = b.broadcast_in_dim(b.convert(cum_seq, ElementType::kI32), grid, {1});
  Value t = b.iota(TensorType{ElementType::kI32, grid}, 0);
  Value started = b.compare(Compare::kLE, cu, t);  // offset b at or before t
  Value start = reduce_max(b, b.select(started, cu, splat_like(b, 0, cu)), {1});
  Value end = reduce_min(b, b.select(started, splat_like(b, INT32_MAX, cu), cu), {1});
  Value seq = b.sub(reduce_sum(b, b.convert(started, ElementType::kI32), {1}),
                    b.full(TensorType{ElementType::kI32, {total}}, 1));
  Value index = b.iota(TensorType{ElementType::kI32, {total}}, 0);
  Value valid = b.and_(b.compare(Compare::kGE, seq, splat_like(b, 0, seq)),
                       b.compare(Compare::kLT, seq, splat_like(b, static_cast<double>(n - 1), seq)));
  return {seq, b.sub(index, start), b.sub(end, start), valid};
}

struct Problem {
  int64_t tq, tk, nk, groups, head, head_v;
  double scale;
  int64_t left, right;  // the window around the diagonal; -1: unbounded
};

// pred [Tq, Tk]: query i may attend to key j. FlashAttention aligns the
// causal diagonal and the window to the bottom right of each sequence's
// (len_q × len_k) block: key position j pairs with query position
// i + len_k - len_q.
Value allowed(Builder& b, const Problem& p, const Tokens& q, const Tokens& k) {
  const std::vector<int64_t> grid{p.tq, p.tk};
  auto rows = [&](Value v) { return b.broadcast_in_dim(v, grid, {0}); };
  auto cols = [&](Value v) { return b.broadcast_in_dim(v, grid, {1}); };
  Value ok = b.and_(b.and_(rows(q.valid), cols(k.valid)),
                    b.compare(Compare::kEQ, rows(q.seq), cols(k.seq)));
  // How far key j lies right of query i's diagonal.
  Value off = b.sub(b.sub(cols(k.pos), rows(q.pos)), b.sub(cols(k.len), rows(q.len)));
  if (p.right >= 0)
    ok = b.and_(ok, b.compare(Compare::kLE, off, splat_like(b, static_cast<double>(p.right), off)));
  if (p.left >= 0)
    ok = b.and_(ok, b.compare(Compare::kGE, off, splat_like(b, -static_cast<double>(p.left), off)));
  return ok;
}

Problem problem(const Context& c, Value q, Value k, Value v, const Arg& scale, const Arg& left,
                const Arg& right, bool is_causal) {
  const auto& qs = q.shape();
  const auto& ks = k.shape();
  const auto& vs = v.shape();
  if (qs.size() != 3 || ks.size() != 3 || vs.size() != 3)
    throw Unsupported(c.op + ": only the variable-length form (3-D packed query, key and value "
                      "with cum_seq_q and cum_seq_k) is lowered");
  if (qs[1] % ks[1] != 0)
    throw InvalidArgument(c.op + ": the number of query heads (" + std::to_string(qs[1]) +
                          ") must be a multiple of the number of key/value heads (" +
                          std::to_string(ks[1]) + ")");
  Problem p{qs[0], ks[0], ks[1], qs[1] / ks[1], qs[2], vs[2], 0, -1, -1};
  p.scale = scale.none() ? 1.0 / std::sqrt(static_cast<double>(p.head)) : scale.d;
  p.left = left.none() ? -1 : left.i;
  p.right = is_causal ? 0 : (right.none() ? -1 : right.i);
  return p;
}

// [T, Nk·G, H] → [T, Nk, G, H] as f32 (query head h uses key/value head h / G).
Value grouped(Builder& b, Value x, const Problem& p) {
  const auto& s = x.shape();
  return b.convert(b.reshape(x, {s[0], p.nk, s[1] / p.nk, s[2]}), ElementType::kF32);
}

// Probabilities in the precision FlashAttention multiplies them in.
Value as_operand(Builder& b, Value x, ElementType input) { return round_like(b, x, input); }

// Masked, scaled scores [Nk, Tq, G, Tk] (f32; -inf where not allowed).
Value scores(Builder& b, const Problem& p, Value q4, Value k, Value mask) {
  Value s = b.dot_general(q4, k, {1}, {1}, {3}, {2}, ElementType::kF32, "HIGHEST");
  s = b.mul(s, splat_like(b, p.scale, s));
  Value m = b.broadcast_in_dim(mask, s.shape(), {1, 3});
  return b.select(m, s, splat_like(b, -kInf, s));
}

// [Nk, Tq, G] ↔ [Nq, Tq], the logsumexp's layout.
Value lse_out(Builder& b, Value lse, const Problem& p) {
  return b.reshape(b.transpose(lse, {0, 2, 1}), {p.nk * p.groups, p.tq});
}
Value lse_in(Builder& b, Value lse, const Problem& p) {
  return b.transpose(b.reshape(lse, {p.nk, p.groups, p.tq}), {0, 2, 1});
}

// p = exp(s - lse): 0 where masked and in rows with no key (lse = +inf).
Value probabilities(Builder& b, Value s, Value lse) {
  return b.exp(b.sub(s, b.broadcast_in_dim(lse, s.shape(), {0, 1, 2})));
}

void require_varlen(const Context& c, const Arg& cum_seq_q, const Arg& cum_seq_k,
                    const Arg& dropout_p) {
  if (cum_seq_q.none() || cum_seq_k.none())
    throw Unsupported(c.op + ": only the variable-length form (cum_seq_q and cum_seq_k given) "
                      "is lowered");
  if (dropout_p.d != 0.0) throw Unsupported(c.op + ": dropout_p > 0");
}

Values flash_forward(Context& c, const Args& a) {
  // (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
  //  is_causal, return_debug_mask, scale, window_size_left,
  //  window_size_right, seqused_k, alibi_slopes, block_table, num_splits)
  Builder& b = c.b;
  require_varlen(c, a[3], a[4], a[7]);
  if (a[9].b) throw Unsupported(c.op + ": return_debug_mask");
  for (size_t i : {13, 14, 15})
    if (!a[i].none()) throw Unsupported(c.op + ": seqused_k, alibi_slopes and block_table");
  const Problem p = problem(c, a[0].tensor, a[1].tensor, a[2].tensor, a[10], a[11], a[12], a[8].b);
  const ElementType in = a[0].tensor.dtype();
  Value q4 = grouped(b, a[0].tensor, p);
  Value k = b.convert(a[1].tensor, ElementType::kF32);
  Value v = b.convert(a[2].tensor, ElementType::kF32);
  Value mask = allowed(b, p, tokens(b, a[3].tensor, p.tq), tokens(b, a[4].tensor, p.tk));
  Value s = scores(b, p, q4, k, mask);  // [Nk, Tq, G, Tk]

  Value top = reduce_max(b, s, {3});
  Value finite_top = b.select(b.is_finite(top), top, splat_like(b, 0, top));
  Value sum = reduce_sum(b, b.exp(b.sub(s, b.broadcast_in_dim(finite_top, s.shape(), {0, 1, 2}))), {3});
  Value lse = b.select(b.compare(Compare::kGT, sum, splat_like(b, 0, sum)),
                       b.add(finite_top, b.log(sum)), splat_like(b, kInf, sum));
  Value prob = as_operand(b, probabilities(b, s, lse), in);
  // [Nk, Tq, G, Tk] · [Tk, Nk, Hv] → [Nk, Tq, G, Hv] → [Tq, Nq, Hv]
  Value o = b.dot_general(prob, v, {0}, {1}, {3}, {0}, ElementType::kF32, "HIGHEST");
  o = b.reshape(b.transpose(o, {1, 0, 2, 3}), {p.tq, p.nk * p.groups, p.head_v});
  return {b.convert(o, c.out(0).dtype), lse_out(b, lse, p), b.zeros(c.out(2)), b.zeros(c.out(3)),
          b.zeros(c.out(4))};
}

Values flash_backward(Context& c, const Args& a) {
  // (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k,
  //  max_q, max_k, dropout_p, is_causal, rng_state, unused, scale,
  //  window_size_left, window_size_right)
  Builder& b = c.b;
  require_varlen(c, a[6], a[7], a[10]);
  const Problem p = problem(c, a[1].tensor, a[2].tensor, a[3].tensor, a[14], a[15], a[16], a[11].b);
  const ElementType in = a[1].tensor.dtype();
  Value q4 = grouped(b, a[1].tensor, p);
  Value k = b.convert(a[2].tensor, ElementType::kF32);
  Value v = b.convert(a[3].tensor, ElementType::kF32);
  Value dout4 = grouped(b, a[0].tensor, p);  // [Tq, Nk, G, Hv]
  Value out4 = grouped(b, a[4].tensor, p);
  Value mask = allowed(b, p, tokens(b, a[6].tensor, p.tq), tokens(b, a[7].tensor, p.tk));
  Value s = scores(b, p, q4, k, mask);
  Value prob = probabilities(b, s, lse_in(b, a[5].tensor, p));  // [Nk, Tq, G, Tk]

  // dV = Pᵀ·dO: [Nk, Tk, Hv]
  Value dv = b.dot_general(as_operand(b, prob, in), dout4, {0}, {1}, {1, 2}, {0, 2},
                           ElementType::kF32, "HIGHEST");
  // dP = dO·Vᵀ: [Nk, Tq, G, Tk]; D = rowsum(dO ∘ O): [Nk, Tq, G]
  Value dp = b.dot_general(dout4, v, {1}, {1}, {3}, {2}, ElementType::kF32, "HIGHEST");
  Value d = b.transpose(reduce_sum(b, b.mul(dout4, out4), {3}), {1, 0, 2});
  Value ds = b.mul(prob, b.sub(dp, b.broadcast_in_dim(d, dp.shape(), {0, 1, 2})));
  ds = as_operand(b, b.mul(ds, splat_like(b, p.scale, ds)), in);
  // dQ = dS·K: [Nk, Tq, G, H] → [Tq, Nq, H]; dK = dSᵀ·Q: [Nk, Tk, H]
  Value dq = b.dot_general(ds, k, {0}, {1}, {3}, {0}, ElementType::kF32, "HIGHEST");
  dq = b.reshape(b.transpose(dq, {1, 0, 2, 3}), {p.tq, p.nk * p.groups, p.head});
  Value dk = b.dot_general(ds, q4, {0}, {1}, {1, 2}, {0, 2}, ElementType::kF32, "HIGHEST");
  return {b.convert(dq, c.out(0).dtype), b.convert(b.transpose(dk, {1, 0, 2}), c.out(1).dtype),
          b.convert(b.transpose(dv, {1, 0, 2}), c.out(2).dtype)};
}

}  // namespace

void register_attention(Registry& r) {
  r.add("aten::_flash_attention_forward", flash_forward);
  r.add("aten::_flash_attention_backward", flash_backward);
}

}  // namespace torch_tpu::lowering
