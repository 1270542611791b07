// Losses and their backward ops. Elementwise losses share two rules: the
// forward computes a per-element loss in the compute type (f32 for 16-bit
// floats) and applies the reduction; the backward scales the incoming
// gradient by 1/numel for 'mean' and applies a per-element derivative.
// nll_loss picks the target class with a one-hot compare along the class dim.
#include <algorithm>
#include <numeric>

#include "helpers.h"

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;

enum Reduction : int64_t { kNone = 0, kMean = 1, kSum = 2 };

Value k(Builder& b, double x, Value like) { return splat_like(b, x, like); }

std::vector<int64_t> all_dims(int64_t rank) {
  std::vector<int64_t> d(rank);
  std::iota(d.begin(), d.end(), 0);
  return d;
}

// none: the elementwise loss; sum: its total; mean: total / numel (NaN when
// empty, as on CPU).
Value reduce_loss(Builder& b, Value loss, int64_t reduction) {
  if (reduction == kNone) return loss;
  Value total = reduce_sum(b, loss, all_dims(loss.rank()));
  if (reduction == kSum) return total;
  return b.div(total, b.constant(total.dtype(), static_cast<double>(loss.type().numel())));
}

// ---- elementwise losses: f(x, target, args) ---------------------------------

// `h` is the result dtype: where CPU's kernel works in a 16-bit dtype its
// steps round to it (round_like); the reduction sums in f32.
using LossFn = Value (*)(Builder&, Value x, Value t, const Args& a, ElementType h);

// Losses whose schema is (self, target, reduction, extra...).
LoweringFn loss(LossFn f) {
  return [f](Context& c, const Args& a) {
    ElementType h = c.out().dtype, ct = accumulation_type(h);
    auto shape = broadcast_shapes(a[0].tensor.shape(), a[1].tensor.shape());
    Value x = coerce(c.b, a[0].tensor, ct, shape), t = coerce(c.b, a[1].tensor, ct, shape);
    Value l = round_like(c.b, f(c.b, x, t, a, h), h);
    return Values{c.b.convert(reduce_loss(c.b, l, a[2].i), h)};
  };
}

Value mse(Builder& b, Value x, Value t, const Args&, ElementType h) {
  Value d = round_like(b, b.sub(x, t), h);
  return b.mul(d, d);
}
Value smooth_l1(Builder& b, Value x, Value t, const Args& a, ElementType) {
  Value z = b.abs(b.sub(x, t));
  double beta = a[3].d;
  if (beta == 0) return z;
  Value quad = b.div(b.mul(k(b, 0.5, z), b.mul(z, z)), k(b, beta, z));
  return b.select(b.compare(Compare::kLT, z, k(b, beta, z)), quad, b.sub(z, k(b, 0.5 * beta, z)));
}
Value huber(Builder& b, Value x, Value t, const Args& a, ElementType) {
  Value z = b.abs(b.sub(x, t));
  double delta = a[3].d;
  Value quad = b.mul(k(b, 0.5, z), b.mul(z, z));
  Value lin = b.mul(k(b, delta, z), b.sub(z, k(b, 0.5 * delta, z)));
  return b.select(b.compare(Compare::kLT, z, k(b, delta, z)), quad, lin);
}
// log1p(exp(-x·t)), as CPU's chain of ATen ops (each rounds).
Value soft_margin(Builder& b, Value x, Value t, const Args&, ElementType h) {
  Value e = round_like(b, b.exp(round_like(b, b.neg(b.mul(t, x)), h)), h);
  return b.unary("stablehlo.log_plus_one", e);
}

// ---- their backward: f(g, x, target, args), g already scaled for 'mean' ----

using LossGradFn = Value (*)(Builder&, Value g, Value x, Value t, const Args& a);

// Backward ops whose schema is (grad, self, target, reduction, extra...).
LoweringFn loss_backward(LossGradFn f) {
  return [f](Context& c, const Args& a) {
    const TensorType& out = c.out();
    ElementType ct = accumulation_type(out.dtype);
    Value g = coerce(c.b, a[0].tensor, ct, out.shape);
    Value x = coerce(c.b, a[1].tensor, ct, out.shape), t = coerce(c.b, a[2].tensor, ct, out.shape);
    if (a[3].i == kMean) g = c.b.div(g, k(c.b, static_cast<double>(a[1].tensor.type().numel()), g));
    return Values{c.b.convert(f(c.b, g, x, t, a), out.dtype)};
  };
}

Value mse_grad(Builder& b, Value g, Value x, Value t, const Args&) {
  return b.mul(b.mul(k(b, 2, g), b.sub(x, t)), g);
}
// Shared by smooth_l1 (slope 1, quadratic x/beta) and huber (slope delta, quadratic x).
Value piecewise_grad(Builder& b, Value g, Value d, double edge, Value inner, Value slope) {
  Value lo = b.compare(Compare::kLE, d, k(b, -edge, d));
  Value hi = b.compare(Compare::kGE, d, k(b, edge, d));
  return b.select(lo, b.neg(b.mul(g, slope)), b.select(hi, b.mul(g, slope), b.mul(inner, g)));
}
Value smooth_l1_grad(Builder& b, Value g, Value x, Value t, const Args& a) {
  Value d = b.sub(x, t);
  double beta = a[4].d;
  return piecewise_grad(b, g, d, beta, b.div(d, k(b, beta, d)), k(b, 1, d));
}
Value huber_grad(Builder& b, Value g, Value x, Value t, const Args& a) {
  Value d = b.sub(x, t);
  double delta = a[4].d;
  return piecewise_grad(b, g, d, delta, d, k(b, delta, d));
}
Value soft_margin_grad(Builder& b, Value g, Value x, Value t, const Args&) {
  Value z = b.exp(b.neg(b.mul(t, x)));
  return b.mul(b.div(b.mul(b.neg(t), z), b.add(k(b, 1, z), z)), g);
}

// ---- binary cross entropy ---------------------------------------------------

// Multiplies by the optional weight argument a[i], broadcast to x.
Value weighted(Builder& b, Value x, const Args& a, size_t i) {
  if (a[i].none()) return x;
  return b.mul(x, coerce(b, a[i].tensor, x.dtype(), x.shape()));
}

// (self, target, weight?, reduction); log terms clamped at -100 like PyTorch.
Values binary_cross_entropy(Context& c, const Args& a) {
  const TensorType& out = c.out();
  ElementType ct = accumulation_type(out.dtype);
  const auto& shape = a[0].tensor.shape();
  Value x = c.b.convert(a[0].tensor, ct), t = coerce(c.b, a[1].tensor, ct, shape);
  Value floor = k(c.b, -100, x);
  Value log_x = c.b.max(c.b.log(x), floor);
  Value log_1mx = c.b.max(c.b.unary("stablehlo.log_plus_one", c.b.neg(x)), floor);
  Value l = c.b.sub(c.b.mul(c.b.sub(t, k(c.b, 1, t)), log_1mx), c.b.mul(t, log_x));
  return {c.b.convert(reduce_loss(c.b, weighted(c.b, l, a, 2), a[3].i), out.dtype)};
}

// (grad, self, target, weight?, reduction).
Values binary_cross_entropy_backward(Context& c, const Args& a) {
  const TensorType& out = c.out();
  ElementType ct = accumulation_type(out.dtype);
  Value g = coerce(c.b, a[0].tensor, ct, out.shape);
  Value x = coerce(c.b, a[1].tensor, ct, out.shape), t = coerce(c.b, a[2].tensor, ct, out.shape);
  Value denom = c.b.max(c.b.mul(c.b.sub(k(c.b, 1, x), x), x), k(c.b, 1e-12, x));
  Value r = c.b.div(c.b.mul(g, c.b.sub(x, t)), denom);
  if (a[4].i == kMean) r = c.b.div(r, k(c.b, static_cast<double>(out.numel()), r));
  return {c.b.convert(weighted(c.b, r, a, 3), out.dtype)};
}

// (self, target, weight?, pos_weight?, reduction): (1 - t) x - w_pos log σ(x),
// each step rounded to a 16-bit result dtype as CPU's chain of ATen ops does.
Values bce_with_logits(Context& c, const Args& a) {
  const TensorType& out = c.out();
  ElementType h = out.dtype, ct = accumulation_type(h);
  auto r = [&](Value v) { return round_like(c.b, v, h); };
  auto shape = broadcast_shapes(a[0].tensor.shape(), a[1].tensor.shape());
  Value x = coerce(c.b, a[0].tensor, ct, shape), t = coerce(c.b, a[1].tensor, ct, shape);
  Value log_sig = r(c.b.sub(c.b.min(x, k(c.b, 0, x)),
                            c.b.unary("stablehlo.log_plus_one", c.b.exp(c.b.neg(c.b.abs(x))))));
  if (!a[3].none()) {
    Value pw = coerce(c.b, a[3].tensor, ct, shape);
    Value lw = r(c.b.add(r(c.b.mul(r(c.b.sub(pw, k(c.b, 1, pw))), t)), k(c.b, 1, t)));
    log_sig = r(c.b.mul(log_sig, lw));
  }
  Value l = r(c.b.sub(r(c.b.mul(r(c.b.sub(k(c.b, 1, t), t)), x)), log_sig));
  return {c.b.convert(reduce_loss(c.b, r(weighted(c.b, l, a, 2)), a[4].i), out.dtype)};
}

// ---- negative log likelihood ----------------------------------------------

// The target class of each sample, seen from `self` (class dim 1, or 0 for a
// single sample): which entries are picked, and each sample's weight (0 where
// ignored).
struct Picked {
  Value onehot;  // pred, self's shape
  Value valid;   // pred, target's shape: not ignore_index
  Value weight;  // compute type, target's shape
  int64_t class_dim;
};

Picked pick(Builder& b, Value self, Value target, const Arg& weight, int64_t ignore_index) {
  Picked p;
  p.class_dim = self.rank() == 1 ? 0 : 1;
  check_in_range(b, target, 0, self.dim(p.class_dim), "Target out of bounds", ignore_index);
  std::vector<int64_t> sample_dims;
  for (int64_t d = 0; d < self.rank(); ++d)
    if (d != p.class_dim) sample_dims.push_back(d);
  Value classes = b.iota({target.dtype(), self.shape()}, p.class_dim);
  p.onehot = b.compare(Compare::kEQ, classes, b.broadcast_in_dim(target, self.shape(), sample_dims));
  p.valid = b.compare(Compare::kNE, target, b.broadcast_in_dim(
      b.constant_int(target.dtype(), ignore_index), target.shape(), {}));
  Value w = splat(b, 1, self.dtype(), target.shape());
  if (!weight.none()) {
    Value wb = b.broadcast_in_dim(b.convert(weight.tensor, self.dtype()), self.shape(), {p.class_dim});
    w = reduce_sum(b, b.select(p.onehot, wb, k(b, 0, wb)), {p.class_dim});
  }
  p.weight = b.select(p.valid, w, k(b, 0, w));
  return p;
}

// CPU's reduced nll_loss for a 16-bit dtype `h`: in that type, sample by
// sample, into an 8-level cascade (LossNLL.cpp, LossNLL2d.cpp): level 0 takes
// -x w (and w), and at every counted sample whose index is a multiple of
// 16^(j+1) level j is added into level j+1 and cleared (index 0 flushes all
// the way up); the levels are then summed from 0 to 7. Every step rounds.
// Returns {loss sum, weight sum}.
std::pair<Value, Value> nll_cascade(Builder& b, Value x_t, const Picked& p, bool weighted,
                                    ElementType h) {
  const ElementType f32 = ElementType::kF32, i64 = ElementType::kI64;
  const int levels = 8;
  int64_t n = 1;
  for (int64_t d : x_t.shape()) n *= d;
  auto flat = [&](Value v) { return b.reshape(v, {n}); };
  auto r = [&](Builder& w, Value v) { return round_like(w, v, h); };
  Value zero = b.constant(f32, 0);
  Values init{b.constant_int(i64, 0), flat(x_t), flat(p.weight), flat(p.valid)};
  for (int i = 0; i < 2 * levels; ++i) init.push_back(zero);
  Values out = b.while_loop(
      init,
      [n](Builder& w, const Values& st) {
        return Values{w.compare(Compare::kLT, st[0], w.constant_int(ElementType::kI64, n))};
      },
      [&](Builder& w, const Values& st) {
        auto at = [&](Value v) { return w.reshape(w.dynamic_slice(v, {st[0]}, {1}), {}); };
        Value x = at(st[1]), wt = at(st[2]), ok = at(st[3]);
        Values loss(st.begin() + 4, st.begin() + 4 + levels), wsum(st.begin() + 4 + levels, st.end());
        Value term = weighted ? unfused(w, r(w, w.mul(x, wt))) : x;
        loss[0] = w.select(ok, r(w, w.sub(loss[0], term)), loss[0]);
        if (weighted) wsum[0] = w.select(ok, r(w, w.add(wsum[0], wt)), wsum[0]);
        Value flush = ok;
        for (int j = 0; j + 1 < levels; ++j) {
          int64_t mask = int64_t{15} << (4 * j);
          Value bits = w.and_(st[0], w.constant_int(ElementType::kI64, mask));
          flush = w.and_(flush, w.compare(Compare::kEQ, bits, w.constant_int(ElementType::kI64, 0)));
          for (Values* v : {&loss, &wsum}) {
            Value up = r(w, w.add((*v)[j + 1], (*v)[j]));
            (*v)[j + 1] = w.select(flush, up, (*v)[j + 1]);
            (*v)[j] = w.select(flush, w.constant(ElementType::kF32, 0), (*v)[j]);
          }
        }
        Values next{w.add(st[0], w.constant_int(ElementType::kI64, 1)), st[1], st[2], st[3]};
        next.insert(next.end(), loss.begin(), loss.end());
        next.insert(next.end(), wsum.begin(), wsum.end());
        return next;
      });
  Value loss = zero, wsum = zero;
  for (int j = 0; j < levels; ++j) {
    loss = r(b, b.add(loss, out[4 + j]));
    wsum = r(b, b.add(wsum, out[4 + levels + j]));
  }
  return {loss, wsum};
}

// nll_loss_forward / nll_loss2d_forward(self, target, weight?, reduction,
// ignore_index) → (output, total_weight).
Values nll_loss_forward(Context& c, const Args& a) {
  ElementType h = c.out(0).dtype, ct = accumulation_type(h);
  Value x = c.b.convert(a[0].tensor, ct);
  Picked p = pick(c.b, x, a[1].tensor, a[2], a[4].i);
  Value x_t = reduce_sum(c.b, c.b.select(p.onehot, x, k(c.b, 0, x)), {p.class_dim});
  // Ignored samples are skipped, so an infinite x there cannot make a NaN.
  Value l = c.b.select(p.valid, c.b.neg(c.b.mul(x_t, p.weight)), k(c.b, 0, x_t));
  Value total = reduce_sum(c.b, p.weight, all_dims(p.weight.rank()));
  int64_t reduction = a[3].i;
  Value out = l;
  if (reduction != kNone && is_half(h) && ct == ElementType::kF32) {
    auto [loss, wsum] = nll_cascade(c.b, x_t, p, !a[2].none(), h);
    out = loss;
    total = a[2].none() ? round_like(c.b, total, h) : wsum;  // the count, as CPU converts it
    if (reduction == kMean) out = round_like(c.b, c.b.div(out, total), h);
    return {c.b.convert(out, h), c.b.convert(total, c.out(1).dtype)};
  }
  if (reduction != kNone) out = reduce_sum(c.b, l, all_dims(l.rank()));
  if (reduction == kMean) out = c.b.div(out, total);
  if (reduction == kNone) total = c.b.constant(ct, 0);
  return {c.b.convert(out, c.out(0).dtype), c.b.convert(total, c.out(1).dtype)};
}

// nll_loss_backward / nll_loss2d_backward(grad, self, target, weight?,
// reduction, ignore_index, total_weight) → grad_self.
Values nll_loss_backward(Context& c, const Args& a) {
  const TensorType& out = c.out();
  ElementType ct = accumulation_type(out.dtype);
  Value x = c.b.convert(a[1].tensor, ct);
  Picked p = pick(c.b, x, a[2].tensor, a[3], a[5].i);
  Value g = coerce(c.b, a[0].tensor, ct, p.weight.shape());
  if (a[4].i == kMean) g = c.b.div(g, coerce(c.b, a[6].tensor, ct, p.weight.shape()));
  Value per_sample = c.b.neg(c.b.mul(p.weight, g));
  std::vector<int64_t> sample_dims;
  for (int64_t d = 0; d < x.rank(); ++d)
    if (d != p.class_dim) sample_dims.push_back(d);
  Value spread = c.b.broadcast_in_dim(per_sample, out.shape, sample_dims);
  return {c.b.convert(c.b.select(p.onehot, spread, k(c.b, 0, spread)), out.dtype)};
}


// ---- margin losses over classes ----------------------------------------------
//
// Inputs are [N, C] or [C] (one sample); each sample's loss is divided by C.

// self as [N, C] in the compute type, and N, C.
struct Rows {
  Value x;
  int64_t n, classes;
};

Rows rows(Builder& b, Value self, ElementType ct) {
  int64_t classes = self.rank() == 0 ? 1 : self.dim(self.rank() - 1);
  int64_t n = self.type().numel() / std::max<int64_t>(classes, 1);
  return {b.reshape(b.convert(self, ct), {n, classes}), n, classes};
}

// The per-sample loss [N] reduced, or reshaped to `out` for 'none'.
Value sample_loss(Builder& b, Value per, int64_t reduction, const TensorType& out) {
  if (reduction == kNone) return b.reshape(per, out.shape);
  return reduce_loss(b, per, reduction);
}

// The incoming gradient per sample, [N, 1] broadcastable, with mean's 1/N.
Value sample_grad(Builder& b, Value g, int64_t reduction, int64_t n, ElementType ct) {
  g = b.convert(g, ct);
  if (reduction == kNone && g.rank() > 0) return b.reshape(g, {n, 1});
  g = b.reshape(g, {1, 1});
  if (reduction == kMean) g = b.div(g, k(b, static_cast<double>(n), g));
  return g;
}

// multi_margin_loss terms: which classes count and their hinge z, per sample.
struct Hinge {
  Value onehot, active, z, weight;  // [N, C], [N, C], [N, C], [N, 1]
};

Hinge hinge(Builder& b, const Rows& r, Value target, Value margin, const Arg& weight) {
  Hinge h;
  Value tgt = b.reshape(b.convert(target, ElementType::kI64), {r.n});
  h.onehot = b.compare(Compare::kEQ, b.iota({ElementType::kI64, {r.n, r.classes}}, 1),
                       b.broadcast_in_dim(tgt, {r.n, r.classes}, {0}));
  Value zero = k(b, 0, r.x);
  Value x_t = reduce_sum(b, b.select(h.onehot, r.x, zero), {1});
  h.z = b.add(b.sub(coerce(b, margin, r.x.type()), b.broadcast_in_dim(x_t, r.x.shape(), {0})), r.x);
  h.active = b.and_(b.not_(h.onehot), b.compare(Compare::kGT, h.z, zero));
  h.weight = splat(b, 1, r.x.dtype(), {r.n, 1});
  if (!weight.none()) {
    Value w = b.broadcast_in_dim(b.convert(weight.tensor, r.x.dtype()), r.x.shape(), {1});
    h.weight = b.reshape(reduce_sum(b, b.select(h.onehot, w, zero), {1}), {r.n, 1});
  }
  return h;
}

Value is_one(Builder& b, Value p, Value like) {
  return b.compare(Compare::kEQ, coerce(b, p, like.type()), k(b, 1, like));
}

// multi_margin_loss(self, target, p, margin, weight?, reduction): p is 1 or 2.
Values multi_margin_loss(Context& c, const Args& a) {
  ElementType ct = accumulation_type(c.out().dtype);
  Rows r = rows(c.b, a[0].tensor, ct);
  Hinge h = hinge(c.b, r, a[1].tensor, a[3].tensor, a[4]);
  Value term = c.b.select(is_one(c.b, a[2].tensor, h.z), h.z, c.b.mul(h.z, h.z));
  term = c.b.mul(c.b.select(h.active, term, k(c.b, 0, term)),
                 c.b.broadcast_in_dim(c.b.reshape(h.weight, {r.n}), term.shape(), {0}));
  Value per = reduce_sum(c.b, term, {1});
  per = c.b.div(per, k(c.b, static_cast<double>(r.classes), per));
  return {c.b.convert(sample_loss(c.b, per, a[5].i, c.out()), c.out().dtype)};
}

// multi_margin_loss_backward(grad, self, target, p, margin, weight?, reduction).
Values multi_margin_loss_backward(Context& c, const Args& a) {
  const TensorType& out = c.out();
  ElementType ct = accumulation_type(out.dtype);
  Rows r = rows(c.b, a[1].tensor, ct);
  Hinge h = hinge(c.b, r, a[2].tensor, a[4].tensor, a[5]);
  Value inv_c = k(c.b, 1.0 / static_cast<double>(r.classes), r.x);
  Value d = c.b.select(is_one(c.b, a[3].tensor, h.z), inv_c, c.b.mul(c.b.mul(k(c.b, 2, h.z), inv_c), h.z));
  d = c.b.mul(c.b.select(h.active, d, k(c.b, 0, d)), c.b.broadcast_to(h.weight, d.shape()));
  Value total = c.b.broadcast_in_dim(reduce_sum(c.b, d, {1}), d.shape(), {0});
  d = c.b.select(h.onehot, c.b.neg(total), d);
  d = c.b.mul(d, c.b.broadcast_to(sample_grad(c.b, a[0].tensor, a[6].i, r.n, ct), d.shape()));
  return {c.b.convert(c.b.reshape(d, out.shape), out.dtype)};
}

// multilabel targets: cnt[n, c] counts c among the sample's targets (those
// before its first negative entry); is_target = cnt > 0.
Value target_counts(Builder& b, Value target, int64_t n, int64_t classes, ElementType ct) {
  Value t = b.reshape(b.convert(target, ElementType::kI64), {n, classes});
  Value pos = b.iota({ElementType::kI64, {n, classes}}, 1);
  Value neg = b.compare(Compare::kLT, t, splat_like(b, 0, t));
  Value first = reduce_min(b, b.select(neg, pos, splat_like(b, static_cast<double>(classes), pos)), {1});
  Value valid = b.compare(Compare::kLT, pos, b.broadcast_in_dim(first, {n, classes}, {0}));
  std::vector<int64_t> cube{n, classes, classes};  // [n, k, c]
  Value hit = b.and_(b.broadcast_in_dim(valid, cube, {0, 1}),
                     b.compare(Compare::kEQ, b.broadcast_in_dim(t, cube, {0, 1}),
                               b.iota({ElementType::kI64, cube}, 2)));
  return reduce_sum(b, b.select(hit, splat(b, 1, ct, cube), splat(b, 0, ct, cube)), {1});
}

// Hinge terms [n, target c, other d]: cnt[c] * (d not a target) * (1 - x[c] + x[d] > 0).
struct Multilabel {
  Value cnt, free, z, active;
};

Multilabel multilabel(Builder& b, const Rows& r, Value target) {
  Multilabel m;
  m.cnt = target_counts(b, target, r.n, r.classes, r.x.dtype());
  m.free = b.compare(Compare::kEQ, m.cnt, k(b, 0, m.cnt));
  std::vector<int64_t> cube{r.n, r.classes, r.classes};
  Value xc = b.broadcast_in_dim(r.x, cube, {0, 1}), xd = b.broadcast_in_dim(r.x, cube, {0, 2});
  m.z = b.add(b.sub(splat(b, 1, r.x.dtype(), cube), xc), xd);
  m.active = b.and_(b.broadcast_in_dim(m.free, cube, {0, 2}),
                    b.compare(Compare::kGT, m.z, k(b, 0, m.z)));
  return m;
}

// multilabel_margin_loss_forward(self, target, reduction) -> (output, is_target).
Values multilabel_margin_loss_forward(Context& c, const Args& a) {
  ElementType ct = accumulation_type(c.out(0).dtype);
  Rows r = rows(c.b, a[0].tensor, ct);
  Multilabel m = multilabel(c.b, r, a[1].tensor);
  Value cnt = c.b.broadcast_in_dim(m.cnt, m.z.shape(), {0, 1});
  Value term = c.b.select(m.active, c.b.mul(cnt, m.z), k(c.b, 0, m.z));
  Value per = reduce_sum(c.b, term, {1, 2});
  per = c.b.div(per, k(c.b, static_cast<double>(r.classes), per));
  Value is_target = c.b.select(m.free, k(c.b, 0, m.cnt), k(c.b, 1, m.cnt));
  return {c.b.convert(sample_loss(c.b, per, a[2].i, c.out(0)), c.out(0).dtype),
          c.b.convert(c.b.reshape(is_target, c.out(1).shape), c.out(1).dtype)};
}

// multilabel_margin_loss_backward(grad, self, target, reduction, is_target).
Values multilabel_margin_loss_backward(Context& c, const Args& a) {
  const TensorType& out = c.out();
  ElementType ct = accumulation_type(out.dtype);
  Rows r = rows(c.b, a[1].tensor, ct);
  Multilabel m = multilabel(c.b, r, a[2].tensor);
  Value cnt = c.b.broadcast_in_dim(m.cnt, m.z.shape(), {0, 1});
  Value w = c.b.select(m.active, cnt, k(c.b, 0, m.z));
  Value d = c.b.sub(reduce_sum(c.b, w, {1}), reduce_sum(c.b, w, {2}));
  d = c.b.div(d, k(c.b, static_cast<double>(r.classes), d));
  d = c.b.mul(d, c.b.broadcast_to(sample_grad(c.b, a[0].tensor, a[3].i, r.n, ct), d.shape()));
  return {c.b.convert(c.b.reshape(d, out.shape), out.dtype)};
}

}  // namespace

void register_nn_loss(Registry& r) {
  r.add("aten::mse_loss", loss(mse));
  r.add("aten::smooth_l1_loss", loss(smooth_l1));
  r.add("aten::huber_loss", loss(huber));
  r.add("aten::soft_margin_loss", loss(soft_margin));
  r.add("aten::mse_loss_backward", loss_backward(mse_grad));
  r.add("aten::smooth_l1_loss_backward", loss_backward(smooth_l1_grad));
  r.add("aten::huber_loss_backward", loss_backward(huber_grad));
  r.add("aten::soft_margin_loss_backward", loss_backward(soft_margin_grad));
  r.add("aten::binary_cross_entropy", binary_cross_entropy);
  r.add("aten::binary_cross_entropy_backward", binary_cross_entropy_backward);
  r.add("aten::binary_cross_entropy_with_logits", bce_with_logits);
  for (const char* op : {"aten::nll_loss_forward", "aten::nll_loss2d_forward"})
    r.add(op, nll_loss_forward);
  for (const char* op : {"aten::nll_loss_backward", "aten::nll_loss2d_backward"})
    r.add(op, nll_loss_backward);
  r.add("aten::multi_margin_loss", multi_margin_loss);
  r.add("aten::multi_margin_loss_backward", multi_margin_loss_backward);
  r.add("aten::multilabel_margin_loss_forward", multilabel_margin_loss_forward);
  r.add("aten::multilabel_margin_loss_backward", multilabel_margin_loss_backward);
}

}  // namespace torch_tpu::lowering
