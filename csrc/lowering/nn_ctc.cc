// CTC loss: _ctc_loss and _ctc_loss_backward (the IntList overloads that
// ctc_loss reaches with host lengths). The lengths are static; the alpha
// (forward) and beta (backward) recursions run as while loops over time on
// [N, 2 * max_target + 1] states, every sample at once: a sample past its
// input length keeps its state. Registered from register_nn (nn.cc).
#include <algorithm>
#include <cmath>

#include "helpers.h"

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;
constexpr ElementType kI64 = ElementType::kI64;

// The extended targets: blank, l1, blank, l2, ..., blank per sample.
struct Ctc {
  int64_t t = 0, n = 0, classes = 0, states = 0;
  std::vector<int64_t> input_lengths, target_lengths;
  Value onehot;  // i1 [N, S', C]: state s emits class c
  Value skip;    // i1 [N, S']: state s may come from s - 2 (its label differs)
  Value lp;      // [T, N, S']: log_probs at each state's class
};

// Target index of each (sample, label position) in `targets` (2-d: row-major
// positions of [N, max]; 1-d: concatenated), clamped into range.
Value labels(Builder& b, Value targets, const std::vector<int64_t>& tl, int64_t max_len) {
  int64_t n = static_cast<int64_t>(tl.size());
  std::vector<int64_t> pos;
  int64_t offset = 0, total = TensorType{kI64, targets.shape()}.numel();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < max_len; ++k) {
      int64_t p = targets.rank() == 2 ? i * targets.dim(1) + k : offset + k;
      pos.push_back(std::clamp<int64_t>(p, 0, std::max<int64_t>(total - 1, 0)));
    }
    offset += tl[i];
  }
  Value flat = b.reshape(b.convert(targets, kI64), {total});
  if (total == 0 || max_len == 0) return b.zeros({kI64, {n, max_len}});
  hlo::GatherDims g;
  g.collapsed_slice_dims = g.start_index_map = {0};
  g.index_vector_dim = 1;
  Value idx = b.reshape(b.constant_i64_vector(pos), {n * max_len, 1});
  Value r = b.gather(flat, idx, g, {1}, {kI64, {n * max_len}});
  return b.reshape(r, {n, max_len});
}

// `states` is log_alpha's last dim as PyTorch sizes it: 2 * max(target_lengths) + 1.
Ctc ctc(Builder& b, Value log_probs, Value targets, const Arg& il, const Arg& tl, int64_t blank,
        int64_t states) {
  Ctc c;
  c.t = log_probs.dim(0);
  c.n = log_probs.dim(1);
  c.classes = log_probs.dim(2);
  c.input_lengths = il.ints;
  c.target_lengths = tl.ints;
  int64_t max_len = (states - 1) / 2;
  c.states = states;
  Value lab = labels(b, targets, tl.ints, max_len);  // [N, L]
  // Interleave with blanks: state 2k+1 is label k.
  Value blanks = b.full({kI64, {c.n, max_len, 1}}, static_cast<double>(blank));
  Value pairs = b.concatenate({blanks, b.reshape(lab, {c.n, max_len, 1})}, 2);
  Value ext = b.concatenate({b.reshape(pairs, {c.n, 2 * max_len}),
                             b.full({kI64, {c.n, 1}}, static_cast<double>(blank))}, 1);
  std::vector<int64_t> cube{c.n, c.states, c.classes};
  c.onehot = b.compare(Compare::kEQ, b.broadcast_in_dim(ext, cube, {0, 1}), b.iota({kI64, cube}, 2));
  Value before = b.pad(b.slice(ext, {0, 0}, {c.n, c.states - 2 > 0 ? c.states - 2 : 0}),
                       b.constant_int(kI64, -1), {0, std::min<int64_t>(2, c.states)}, {0, 0});
  c.skip = b.compare(Compare::kNE, before, ext);
  std::vector<int64_t> big{c.t, c.n, c.states, c.classes};
  Value lpb = b.broadcast_in_dim(log_probs, big, {0, 1, 3});
  Value sel = b.select(b.broadcast_in_dim(c.onehot, big, {1, 2, 3}), lpb, splat_like(b, 0, lpb));
  c.lp = reduce_sum(b, sel, {3});
  return c;
}

Value neg_inf(Builder& b, Value like) { return splat_like(b, -INFINITY, like); }

// log(exp(p) + exp(q) + exp(r)) as PyTorch computes it (max shifted, -inf max → 0).
Value logsumexp3(Builder& b, Value p, Value q, Value r) {
  Value m = b.max(b.max(p, q), r);
  m = b.select(b.compare(Compare::kEQ, m, neg_inf(b, m)), splat_like(b, 0, m), m);
  Value s = b.add(b.add(b.exp(b.sub(p, m)), b.exp(b.sub(q, m))), b.exp(b.sub(r, m)));
  return b.add(b.log(s), m);
}

// x shifted along dim 1 by `k` (positive: toward higher s), filled with -inf.
Value shift(Builder& b, Value x, int64_t k) {
  int64_t n = x.dim(0), s = x.dim(1), m = std::min<int64_t>(std::abs(k), s);
  if (k > 0) return b.pad(b.slice(x, {0, 0}, {n, s - m}), b.constant(x.dtype(), -INFINITY), {0, m}, {0, 0});
  return b.pad(b.slice(x, {0, m}, {n, s}), b.constant(x.dtype(), -INFINITY), {0, 0}, {0, m});
}

// Row t of a [T, N, S'] value.
Value row(Builder& b, Value x, Value t) {
  Value z = b.constant_int(kI64, 0);
  return b.reshape(b.dynamic_slice(x, {t, z, z}, {1, x.dim(1), x.dim(2)}), {x.dim(1), x.dim(2)});
}

Value put_row(Builder& b, Value x, Value r, Value t) {
  Value z = b.constant_int(kI64, 0);
  return b.dynamic_update_slice(x, b.reshape(r, {1, r.dim(0), r.dim(1)}), {t, z, z});
}

// [N, S'] mask: sample n is still inside its input at time t (t < length + offset).
Value active(Builder& b, const Ctc& c, Value t, int64_t offset, int64_t states) {
  std::vector<int64_t> lengths;
  for (int64_t l : c.input_lengths) lengths.push_back(l + offset);
  Value len = b.constant_i64_vector(lengths);
  Value on = b.compare(Compare::kLT, b.broadcast_in_dim(t, {c.n}, {}), len);
  return b.broadcast_in_dim(on, {c.n, states}, {0});
}

// The value of `x` [N, S'] at per-sample static states `s`.
Value at_states(Builder& b, Value x, const std::vector<int64_t>& s) {
  Value want = b.broadcast_in_dim(b.constant_i64_vector(s), x.shape(), {0});
  Value hit = b.compare(Compare::kEQ, b.iota({kI64, x.shape()}, 1), want);
  return reduce_max(b, b.select(hit, x, neg_inf(b, x)), {1});
}

// _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank,
// zero_infinity) -> (neg_log_likelihood [N], log_alpha [N, T, S']).
Values ctc_loss(Context& c, const Args& a) {
  Builder& b = c.b;
  ElementType ty = c.out(0).dtype;
  Ctc k = ctc(b, b.convert(a[0].tensor, ty), a[1].tensor, a[2], a[3], a[4].i, c.out(1).shape[2]);
  Value zero = b.constant_int(kI64, 0);
  Value lp0 = row(b, k.lp, zero);
  Value first = b.compare(Compare::kLT, b.iota({kI64, {k.n, k.states}}, 1),
                          b.full({kI64, {k.n, k.states}}, 2));
  Value alpha = b.select(first, lp0, neg_inf(b, lp0));
  Value all = put_row(b, b.full({ty, {k.t, k.n, k.states}}, -INFINITY), alpha, zero);
  Values state = b.while_loop(
      {b.constant_int(kI64, 1), alpha, all, k.lp, k.skip},  // loop-invariant values ride along
      [&](Builder& q, const Values& v) {
        return Values{q.compare(Compare::kLT, v[0], q.constant_int(kI64, k.t))};
      },
      [&](Builder& q, const Values& v) {
        Value t = v[0], prev = v[1];
        Value from2 = q.select(v[4], shift(q, prev, 2), neg_inf(q, prev));
        Value next = q.add(logsumexp3(q, prev, shift(q, prev, 1), from2), row(q, v[3], t));
        Value on = active(q, k, t, 0, k.states);
        Value stored = q.select(on, next, neg_inf(q, next));
        return Values{q.add(t, q.constant_int(kI64, 1)), q.select(on, next, prev),
                      put_row(q, v[2], stored, t), v[3], v[4]};
      });
  Value last = state[1];
  std::vector<int64_t> s1, s2;
  for (int64_t l : k.target_lengths) {
    s1.push_back(2 * l);
    s2.push_back(std::max<int64_t>(2 * l - 1, 0));
  }
  Value l1 = at_states(b, last, s1), l2 = at_states(b, last, s2);
  std::vector<int64_t> empty;
  for (int64_t l : k.target_lengths) empty.push_back(l == 0 ? 1 : 0);
  Value none = b.compare(Compare::kEQ, b.constant_i64_vector(empty), b.full({kI64, {k.n}}, 1));
  Value m = b.max(l1, l2);
  m = b.select(b.compare(Compare::kEQ, m, neg_inf(b, m)), splat_like(b, 0, m), m);
  Value ll = b.add(b.log(b.add(b.exp(b.sub(l1, m)), b.exp(b.sub(l2, m)))), m);
  Value nll = b.neg(b.select(none, l1, ll));
  return {nll, b.transpose(state[2], {1, 0, 2})};
}

// _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths,
// neg_log_likelihood, log_alpha, blank, zero_infinity).
Values ctc_loss_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  const TensorType& out = c.out();
  ElementType ty = out.dtype;
  Value lp = b.convert(a[1].tensor, ty);
  Ctc k = ctc(b, lp, a[2].tensor, a[3], a[4], a[7].i, a[6].tensor.dim(2));
  // The last row of beta: blank and last label at each sample's end state.
  std::vector<int64_t> s1, s2;
  for (int64_t l : k.target_lengths) {
    s1.push_back(2 * l);
    s2.push_back(l > 0 ? 2 * l - 1 : -1);
  }
  Value pos = b.iota({kI64, {k.n, k.states}}, 1);
  Value end = b.or_(b.compare(Compare::kEQ, pos, b.broadcast_in_dim(b.constant_i64_vector(s1), pos.shape(), {0})),
                    b.compare(Compare::kEQ, pos, b.broadcast_in_dim(b.constant_i64_vector(s2), pos.shape(), {0})));
  // lp at each sample's last input step, [N, S'].
  Value lp_last = b.full({ty, {k.n, k.states}}, 0);
  for (int64_t i = 0; i < k.n; ++i) {
    int64_t t = std::max<int64_t>(k.input_lengths[i] - 1, 0);
    Value r = b.slice(k.lp, {t, i, 0}, {t + 1, i + 1, k.states});
    Value onehot = b.compare(Compare::kEQ, b.iota({kI64, {k.n, k.states}}, 0), b.full({kI64, {k.n, k.states}}, static_cast<double>(i)));
    lp_last = b.select(onehot, b.broadcast_in_dim(b.reshape(r, {k.states}), {k.n, k.states}, {1}), lp_last);
  }
  Value init = b.select(end, lp_last, neg_inf(b, lp_last));
  Value skip_up = shift(b, b.select(k.skip, b.full(lp_last.type(), 0), neg_inf(b, lp_last)), -2);
  Value may_skip = b.compare(Compare::kEQ, skip_up, b.full(lp_last.type(), 0));
  Value all = b.full({ty, {k.t, k.n, k.states}}, -INFINITY);
  Values state = b.while_loop(
      {b.constant_int(kI64, k.t - 1), init, all, k.lp, may_skip, init},
      [&](Builder& q, const Values& v) {
        return Values{q.compare(Compare::kGE, v[0], q.constant_int(kI64, 0))};
      },
      [&](Builder& q, const Values& v) {
        Value t = v[0], prev = v[1];
        Value from2 = q.select(v[4], shift(q, prev, -2), neg_inf(q, prev));
        Value next = q.add(logsumexp3(q, prev, shift(q, prev, -1), from2), row(q, v[3], t));
        Value beta = q.select(active(q, k, t, -1, k.states), next, v[5]);
        return Values{q.sub(t, q.constant_int(kI64, 1)), beta, put_row(q, v[2], beta, t), v[3],
                      v[4], v[5]};
      });
  // log sum over states emitting c of alpha * beta, [T, N, C].
  Value ab = b.add(b.transpose(b.convert(a[6].tensor, ty), {1, 0, 2}), state[2]);
  std::vector<int64_t> big{k.t, k.n, k.states, k.classes};
  Value mask = b.broadcast_in_dim(k.onehot, big, {1, 2, 3});
  Value abb = b.select(mask, b.broadcast_in_dim(ab, big, {0, 1, 2}), b.full({ty, big}, -INFINITY));
  Value m = reduce_max(b, abb, {2});
  m = b.select(b.compare(Compare::kEQ, m, neg_inf(b, m)), splat_like(b, 0, m), m);
  Value sum = reduce_sum(b, b.exp(b.sub(abb, b.broadcast_in_dim(m, big, {0, 1, 3}))), {2});
  Value lse = b.add(b.log(sum), m);
  std::vector<int64_t> shape{k.t, k.n, k.classes};
  Value nll = b.broadcast_in_dim(b.convert(a[5].tensor, ty), shape, {1});
  Value g = b.broadcast_in_dim(b.convert(a[0].tensor, ty), shape, {1});
  Value grad = b.mul(b.sub(b.exp(lp), b.exp(b.sub(b.add(lse, nll), lp))), g);
  std::vector<int64_t> lengths = k.input_lengths;
  Value in = b.compare(Compare::kLT, b.iota({kI64, shape}, 0),
                       b.broadcast_in_dim(b.constant_i64_vector(lengths), shape, {1}));
  Value keep = in;
  if (a[8].b)
    keep = b.and_(keep, b.compare(Compare::kNE, nll, splat_like(b, INFINITY, nll)));
  return {b.select(keep, grad, b.zeros({ty, shape}))};
}

}  // namespace

void register_nn_ctc(Registry& r) {
  r.add("aten::_ctc_loss", ctc_loss);
  r.add("aten::_ctc_loss_backward", ctc_loss_backward);
}

}  // namespace torch_tpu::lowering
