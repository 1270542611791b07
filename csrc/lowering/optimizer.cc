// Fused optimizer steps (`_fused_adam`, `_fused_adamw`, `_fused_sgd`,
// `_fused_adagrad`, with a float or a tensor learning rate): what
// `torch.optim.Adam/AdamW/SGD/Adagrad(..., fused=True)` call. The functional overloads return every list the step
// writes; the aten layer derives the in-place `_fused_*_` ops the optimizers
// call. The whole parameter list is one program. Math as PyTorch's CPU fused
// kernels: 16-bit parameters and states compute in f32; gradients are
// unscaled by `grad_scale` (and written back unscaled); a `found_inf` of 1
// leaves every tensor as it was.
#include "helpers.h"

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;

// A one-element value (0-d, or [1] as GradScaler keeps its scale) as a 0-d
// value of `t`.
Value scalar_of(Builder& b, Value v, ElementType t) {
  if (v.rank() != 0) v = b.reshape(v, std::vector<int64_t>{});
  return b.convert(v, t);
}

// The hyperparameter at `a[i]`: a static float, or a tensor (the learning
// rate: a float entering as a program input, or the `tensor_lr` overloads'
// tensor), as a 0-d value of `t`.
Value hyper(Builder& b, const Arg& a, ElementType t) {
  if (a.kind == Arg::kDouble) return b.constant(t, a.d);
  if (a.kind == Arg::kTensor) return scalar_of(b, a.tensor, t);
  throw Unsupported("fused optimizer: unexpected hyperparameter argument");
}

// What every fused step shares: unscaling by grad_scale, the found_inf skip.
struct Step {
  Builder& b;
  ElementType ct;       // compute type
  Value grad_scale;     // 0-d, or invalid
  Value skip;           // 0-d pred (found_inf == 1), or invalid

  Step(Builder& builder, ElementType t, const Arg& scale, const Arg& found_inf)
      : b(builder), ct(t) {
    if (scale.kind == Arg::kTensor) grad_scale = scalar_of(b, scale.tensor, ct);
    if (found_inf.kind == Arg::kTensor)
      skip = b.compare(Compare::kEQ, scalar_of(b, found_inf.tensor, ct), b.constant(ct, 1));
  }
  Value full(Value s, Value like) const { return b.broadcast_to(s, like.shape()); }
  Value k(double v, Value like) const { return splat(b, v, ct, like.shape()); }
  Value widen(Value v) const { return b.convert(v, ct); }
  Value unscale(Value g) const { return grad_scale.valid() ? b.div(g, full(grad_scale, g)) : g; }
  // The gradient `g0` as the update reads it: unscaled, negated to maximize,
  // plus `wd` times `p` (coupled weight decay). Its stored form (unscaled
  // only) goes to `written`.
  Value gradient(Value g0, Value p, bool maximize, double wd, Values& written) const {
    Value g = unscale(widen(g0));
    written.push_back(finish(g, g0));
    if (maximize) g = b.neg(g);
    return wd != 0 ? b.add(g, b.mul(p, k(wd, p))) : g;
  }
  // `updated` (compute type) as `old`'s type, or `old` when the step is skipped.
  Value finish(Value updated, Value old) const {
    Value r = b.convert(updated, old.dtype());
    return skip.valid() ? b.select(b.broadcast_to(skip, r.shape()), old, r) : r;
  }
};

ElementType compute_type(const Arg& params) {
  if (params.tensors.empty()) return ElementType::kF32;
  return accumulation_type(params.tensors[0].dtype());
}

// _fused_adam(w)(self[], grads[], exp_avgs[], exp_avg_sqs[], max_exp_avg_sqs[],
//   state_steps[], lr, beta1, beta2, weight_decay, eps, amsgrad, maximize,
//   grad_scale?, found_inf?) -> the five lists, updated.
LoweringFn adam(bool decoupled) {
  return [decoupled](Context& c, const Args& a) {
    Builder& b = c.b;
    const size_t n = a[0].tensors.size();
    const bool amsgrad = a[11].b, maximize = a[12].b;
    const double beta1 = a[7].d, beta2 = a[8].d, wd = a[9].d, eps = a[10].d;
    Step s(b, compute_type(a[0]), a[13], a[14]);
    Value lr = hyper(b, a[6], s.ct);
    Values params, grads, avgs, sqs, maxes;
    for (size_t i = 0; i < n; ++i) {
      Value p0 = a[0].tensors[i];
      Value p = s.widen(p0);
      Value g = s.gradient(a[1].tensors[i], p, maximize, decoupled ? 0 : wd, grads);
      if (decoupled && wd != 0)
        p = b.mul(p, s.full(b.sub(b.constant(s.ct, 1), b.mul(lr, b.constant(s.ct, wd))), p));
      Value m = b.add(b.mul(s.widen(a[2].tensors[i]), s.k(beta1, p)), b.mul(g, s.k(1 - beta1, p)));
      Value v = b.add(b.mul(s.widen(a[3].tensors[i]), s.k(beta2, p)),
                      b.mul(b.mul(g, g), s.k(1 - beta2, p)));
      Value step = scalar_of(b, a[5].tensors.at(i), s.ct);
      Value one = b.constant(s.ct, 1);
      Value bc1 = b.sub(one, b.pow(b.constant(s.ct, beta1), step));
      Value bc2_sqrt = b.sqrt(b.sub(one, b.pow(b.constant(s.ct, beta2), step)));
      Value step_size = b.div(lr, bc1);
      Value second = v;
      if (amsgrad) {
        Value mx = b.max(s.widen(a[4].tensors.at(i)), v);
        maxes.push_back(s.finish(mx, a[4].tensors[i]));
        second = mx;
      }
      Value denom = b.add(b.div(b.sqrt(second), s.full(bc2_sqrt, p)), s.k(eps, p));
      p = b.sub(p, b.div(b.mul(m, s.full(step_size, p)), denom));
      params.push_back(s.finish(p, p0));
      avgs.push_back(s.finish(m, a[2].tensors[i]));
      sqs.push_back(s.finish(v, a[3].tensors[i]));
    }
    // max_exp_avg_sqs without amsgrad: returned as they came.
    if (!amsgrad)
      for (const Value& mx : a[4].tensors) maxes.push_back(mx);
    Values out;
    for (Values* list : {&params, &grads, &avgs, &sqs, &maxes})
      out.insert(out.end(), list->begin(), list->end());
    return out;
  };
}

// _fused_sgd(self[], grads[], momentum_buffer_list[], weight_decay, momentum,
//   lr, dampening, nesterov, maximize, is_first_step, grad_scale?, found_inf?)
//   -> the three lists, updated.
Values sgd(Context& c, const Args& a) {
  Builder& b = c.b;
  const size_t n = a[0].tensors.size();
  const double wd = a[3].d, momentum = a[4].d, dampening = a[6].d;
  const bool nesterov = a[7].b, maximize = a[8].b, first = a[9].b;
  Step s(b, compute_type(a[0]), a[10], a[11]);
  Value lr = hyper(b, a[5], s.ct);
  Values params, grads, bufs;
  for (size_t i = 0; i < n; ++i) {
    Value p0 = a[0].tensors[i];
    Value p = s.widen(p0);
    Value g = s.gradient(a[1].tensors[i], p, maximize, wd, grads);
    if (momentum != 0) {
      Value buf0 = a[2].tensors.at(i);
      Value buf = first ? g
                        : b.add(b.mul(s.widen(buf0), s.k(momentum, p)),
                                b.mul(g, s.k(1 - dampening, p)));
      bufs.push_back(s.finish(buf, buf0));
      g = nesterov ? b.add(g, b.mul(buf, s.k(momentum, p))) : buf;
    }
    p = b.sub(p, b.mul(g, s.full(lr, p)));
    params.push_back(s.finish(p, p0));
  }
  if (momentum == 0)
    for (const Value& buf : a[2].tensors) bufs.push_back(buf);
  Values out;
  for (Values* list : {&params, &grads, &bufs}) out.insert(out.end(), list->begin(), list->end());
  return out;
}

// _fused_adagrad(self[], grads[], state_sums[], state_steps[], lr, lr_decay,
//   weight_decay, eps, maximize, grad_scale?, found_inf?) -> params, grads,
//   state sums, and (the float-lr overload) the steps, which it only reads.
LoweringFn adagrad(bool returns_steps) {
  return [returns_steps](Context& c, const Args& a) {
    Builder& b = c.b;
    const size_t n = a[0].tensors.size();
    const double lr_decay = a[5].d, wd = a[6].d, eps = a[7].d;
    const bool maximize = a[8].b;
    Step s(b, compute_type(a[0]), a[9], a[10]);
    Value lr = hyper(b, a[4], s.ct);
    Values params, grads, sums;
    for (size_t i = 0; i < n; ++i) {
      Value p0 = a[0].tensors[i], sum0 = a[2].tensors[i];
      Value p = s.widen(p0);
      Value g = s.gradient(a[1].tensors[i], p, maximize, wd, grads);
      Value step = scalar_of(b, a[3].tensors.at(i), s.ct);
      Value one = b.constant(s.ct, 1);
      Value clr = b.div(lr, b.add(one, b.mul(b.sub(step, one), b.constant(s.ct, lr_decay))));
      Value sum = b.add(s.widen(sum0), b.mul(g, g));
      Value std = b.add(b.sqrt(sum), s.k(eps, p));
      p = b.sub(p, b.mul(s.full(clr, p), b.div(g, std)));
      params.push_back(s.finish(p, p0));
      sums.push_back(s.finish(sum, sum0));
    }
    Values out;
    for (Values* list : {&params, &grads, &sums}) out.insert(out.end(), list->begin(), list->end());
    if (returns_steps) out.insert(out.end(), a[3].tensors.begin(), a[3].tensors.end());
    return out;
  };
}

}  // namespace

void register_optimizer(Registry& r) {
  r.add("aten::_fused_adam", adam(false));
  r.add("aten::_fused_adam.tensor_lr", adam(false));
  r.add("aten::_fused_adamw", adam(true));
  r.add("aten::_fused_adamw.tensor_lr", adam(true));
  r.add("aten::_fused_sgd", sgd);
  r.add("aten::_fused_sgd.tensor_lr", sgd);
  r.add("aten::_fused_adagrad", adagrad(true));
  r.add("aten::_fused_adagrad.tensor_lr", adagrad(false));
  // A scheduled learning rate changes every step: a program input, so the
  // step compiles once. The other hyperparameters shape the program.
  for (const char* op :
       {"aten::_fused_adam", "aten::_fused_adamw", "aten::_fused_sgd", "aten::_fused_adagrad"})
    r.float_inputs(op, {"lr"});
}

}  // namespace torch_tpu::lowering
