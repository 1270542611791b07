// Activations and their backward ops. Most are one table row over a shared
// pointwise rule: tensor and Scalar operands converted to the compute type
// (f32 for 16-bit floats, as PyTorch's CPU kernels compute) and broadcast to
// the result shape, one formula, then rounded to the result type. Losses and
// normalization live in nn_loss.cc and nn_norm.cc.
#include <cmath>

#include "helpers.h"

namespace torch_tpu::lowering {

void register_nn_loss(Registry& r);
void register_nn_norm(Registry& r);
void register_attention(Registry& r);
void register_sdpa(Registry& r);

namespace {

using hlo::Compare;

// A formula over the converted operands: v[i] is a[i] as a compute-type
// tensor of the result shape (invalid for non-tensor arguments).
using Formula = Value (*)(Builder&, const Values& v, const Args& a);

LoweringFn pointwise(Formula f) {
  return [f](Context& c, const Args& a) {
    const TensorType& t = c.out();
    ElementType ct = accumulation_type(t.dtype);
    Values v(a.size());
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].kind == Arg::kTensor) v[i] = coerce(c.b, a[i].tensor, ct, t.shape);
    return Values{c.b.convert(f(c.b, v, a), t.dtype)};
  };
}

Value k(Builder& b, double x, Value like) { return splat_like(b, x, like); }
Value lt(Builder& b, Value x, Value y) { return b.compare(Compare::kLT, x, y); }
Value le(Builder& b, Value x, Value y) { return b.compare(Compare::kLE, x, y); }
Value gt(Builder& b, Value x, Value y) { return b.compare(Compare::kGT, x, y); }
Value ge(Builder& b, Value x, Value y) { return b.compare(Compare::kGE, x, y); }
Value zero_like(Builder& b, Value x) { return k(b, 0, x); }
// Clamp that lets NaN through, like std::min/std::max on CPU.
Value clamp_nan(Builder& b, Value x, Value lo, Value hi) {
  return b.select(lt(b, x, lo), lo, b.select(gt(b, x, hi), hi, x));
}
Value sigmoid(Builder& b, Value x) { return b.logistic(x); }

// ---- forward -------------------------------------------------------------

Value relu(Builder& b, const Values& v, const Args&) {
  return b.select(lt(b, v[0], zero_like(b, v[0])), zero_like(b, v[0]), v[0]);
}
Value threshold(Builder& b, const Values& v, const Args&) {
  return b.select(le(b, v[0], v[1]), v[2], v[0]);
}
Value gelu_tanh(Builder& b, Value x) {
  Value inner = b.mul(k(b, std::sqrt(2.0 / M_PI), x),
                      b.add(x, b.mul(k(b, 0.044715, x), b.mul(x, b.mul(x, x)))));
  return b.mul(b.mul(k(b, 0.5, x), x), b.add(k(b, 1, x), b.tanh(inner)));
}
Value gelu(Builder& b, const Values& v, const Args& a) {
  Value x = v[0];
  if (a[1].s == "tanh") return gelu_tanh(b, x);
  Value cdf = b.mul(k(b, 0.5, x),
                    b.add(k(b, 1, x), b.unary("chlo.erf", b.mul(x, k(b, M_SQRT1_2, x)))));
  return b.mul(x, cdf);
}
Value silu(Builder& b, const Values& v, const Args&) { return b.mul(v[0], sigmoid(b, v[0])); }
Value softplus_of(Builder& b, Value x) {
  return b.unary("stablehlo.log_plus_one", b.exp(x));
}
Value mish(Builder& b, const Values& v, const Args&) {
  return b.mul(v[0], b.tanh(softplus_of(b, v[0])));
}
Value leaky_relu(Builder& b, const Values& v, const Args&) {
  return b.select(gt(b, v[0], zero_like(b, v[0])), v[0], b.mul(v[0], v[1]));
}
// elu(x; alpha, scale, input_scale).
Value elu_of(Builder& b, Value x, Value alpha, Value scale, Value input_scale) {
  Value neg = b.mul(b.unary("stablehlo.exponential_minus_one", b.mul(x, input_scale)),
                    b.mul(alpha, scale));
  return b.select(le(b, x, zero_like(b, x)), neg, b.mul(x, scale));
}
Value elu(Builder& b, const Values& v, const Args&) { return elu_of(b, v[0], v[1], v[2], v[3]); }
Value celu(Builder& b, const Values& v, const Args&) {
  Value one = k(b, 1, v[0]);
  return elu_of(b, v[0], v[1], one, b.div(one, v[1]));
}
Value hardtanh(Builder& b, const Values& v, const Args&) {
  return clamp_nan(b, v[0], v[1], v[2]);
}
Value relu6_of(Builder& b, Value x) {  // min(max(x + 3, 0), 6)
  return clamp_nan(b, b.add(x, k(b, 3, x)), zero_like(b, x), k(b, 6, x));
}
Value hardsigmoid(Builder& b, const Values& v, const Args&) {
  return b.div(relu6_of(b, v[0]), k(b, 6, v[0]));
}
Value hardswish(Builder& b, const Values& v, const Args&) {
  return b.div(b.mul(v[0], relu6_of(b, v[0])), k(b, 6, v[0]));
}
Value softplus(Builder& b, const Values& v, const Args&) {
  Value bx = b.mul(v[0], v[1]);
  return b.select(gt(b, bx, v[2]), v[0], b.div(softplus_of(b, bx), v[1]));
}
Value in_band(Builder& b, Value x, Value lambd) {  // -lambd <= x <= lambd
  return b.and_(ge(b, x, b.neg(lambd)), le(b, x, lambd));
}
Value hardshrink(Builder& b, const Values& v, const Args&) {
  return b.select(in_band(b, v[0], v[1]), zero_like(b, v[0]), v[0]);
}
Value softshrink(Builder& b, const Values& v, const Args&) {
  Value x = v[0], l = v[1];
  Value inner = b.select(lt(b, x, b.neg(l)), b.add(x, l), b.mul(x, zero_like(b, x)));
  return b.select(gt(b, x, l), b.sub(x, l), inner);
}
Value prelu(Builder& b, const Values& v, const Args&) {
  return b.select(gt(b, v[0], zero_like(b, v[0])), v[0], b.mul(v[1], v[0]));
}

// ---- backward (v[0] is the incoming gradient) ------------------------------

Value threshold_backward(Builder& b, const Values& v, const Args&) {
  return b.select(le(b, v[1], v[2]), zero_like(b, v[0]), v[0]);
}
Value gelu_tanh_backward(Builder& b, Value g, Value x) {
  const double beta = std::sqrt(2.0 / M_PI), kappa = 0.044715;
  Value x2 = b.mul(x, x);
  Value t = b.tanh(b.mul(k(b, beta, x), b.add(x, b.mul(k(b, kappa, x), b.mul(x2, x)))));
  Value left = b.mul(k(b, 0.5, x), x);
  Value dleft = b.mul(k(b, 0.5, x), b.add(k(b, 1, x), t));
  Value dinner = b.mul(k(b, beta, x), b.add(k(b, 1, x), b.mul(k(b, 3 * kappa, x), x2)));
  Value dright = b.mul(b.mul(left, b.sub(k(b, 1, x), b.mul(t, t))), dinner);
  return b.mul(g, b.add(dleft, dright));
}
Value gelu_backward(Builder& b, const Values& v, const Args& a) {
  Value g = v[0], x = v[1];
  if (a[2].s == "tanh") return gelu_tanh_backward(b, g, x);
  Value cdf = b.mul(k(b, 0.5, x),
                    b.add(k(b, 1, x), b.unary("chlo.erf", b.mul(x, k(b, M_SQRT1_2, x)))));
  Value pdf = b.mul(b.exp(b.mul(k(b, -0.5, x), b.mul(x, x))), k(b, 0.5 * M_2_SQRTPI * M_SQRT1_2, x));
  return b.mul(g, b.add(cdf, b.mul(x, pdf)));
}
// For complex y the derivative is conjugated (PyTorch's convention for
// holomorphic functions: grad * conj(f'(x))).
Value sigmoid_backward(Builder& b, const Values& v, const Args&) {
  Value y = v[1];
  return b.mul(v[0], conj(b, b.mul(b.sub(k(b, 1, y), y), y)));
}
Value tanh_backward(Builder& b, const Values& v, const Args&) {
  Value y = v[1];
  return b.mul(v[0], conj(b, b.sub(k(b, 1, y), b.mul(y, y))));
}
Value leaky_relu_backward(Builder& b, const Values& v, const Args&) {
  return b.select(gt(b, v[1], zero_like(b, v[1])), v[0], b.mul(v[0], v[2]));
}
// elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result).
Value elu_backward(Builder& b, const Values& v, const Args& a) {
  Value g = v[0], alpha = v[1], scale = v[2], iscale = v[3], x = v[5];
  Value neg_coef = b.mul(alpha, scale);
  Value neg = a[4].b ? b.mul(b.mul(g, iscale), b.add(x, neg_coef))
                     : b.mul(b.mul(g, b.mul(iscale, neg_coef)), b.exp(b.mul(x, iscale)));
  return b.select(le(b, x, zero_like(b, x)), neg, b.mul(g, scale));
}
Value hardtanh_backward(Builder& b, const Values& v, const Args&) {
  Value x = v[1];
  return b.select(b.or_(le(b, x, v[2]), ge(b, x, v[3])), zero_like(b, x), v[0]);
}
Value hardsigmoid_backward(Builder& b, const Values& v, const Args&) {
  Value x = v[1];
  Value inside = b.and_(gt(b, x, k(b, -3, x)), lt(b, x, k(b, 3, x)));
  // CPU multiplies by 1/6 as a float, in every dtype (float64 too).
  return b.select(inside, b.mul(v[0], k(b, static_cast<float>(1.0f / 6.0f), x)), zero_like(b, x));
}
Value hardswish_backward(Builder& b, const Values& v, const Args&) {
  Value g = v[0], x = v[1];
  Value mid = b.mul(g, b.add(b.div(x, k(b, 3, x)), k(b, 0.5, x)));
  return b.select(le(b, x, k(b, -3, x)), zero_like(b, x), b.select(lt(b, x, k(b, 3, x)), mid, g));
}
Value softplus_backward(Builder& b, const Values& v, const Args&) {
  Value g = v[0], bx = b.mul(v[1], v[2]);
  Value z = b.exp(bx);
  return b.select(gt(b, bx, v[3]), g, b.div(b.mul(g, z), b.add(z, k(b, 1, z))));
}
// d/dx log(sigmoid(x)) = sigmoid(-x), written as CPU does with z = exp(-|x|).
Value log_sigmoid_backward(Builder& b, const Values& v, const Args&) {
  Value g = v[0], x = v[1];
  Value neg = lt(b, x, zero_like(b, x));
  Value z = b.exp(b.neg(b.abs(x)));
  Value max_deriv = b.select(neg, k(b, 1, x), zero_like(b, x));
  Value sign = b.select(neg, k(b, 1, x), k(b, -1, x));
  return b.mul(g, b.sub(max_deriv, b.mul(sign, b.div(z, b.add(k(b, 1, z), z)))));
}
Value shrink_backward(Builder& b, const Values& v, const Args&) {
  return b.select(in_band(b, v[1], v[2]), zero_like(b, v[0]), v[0]);
}

// ---- multi-output and shape-changing ---------------------------------------

// log_sigmoid_forward → (output, buffer = exp(-|x|)).
Values log_sigmoid_forward(Context& c, const Args& a) {
  ElementType ct = accumulation_type(c.out().dtype);
  Value x = c.b.convert(a[0].tensor, ct);
  Value z = c.b.exp(c.b.neg(c.b.abs(x)));
  Value out = c.b.sub(c.b.min(x, zero_like(c.b, x)), c.b.unary("stablehlo.log_plus_one", z));
  Value buffer = c.out(1).numel() == x.type().numel() ? c.b.reshape(z, c.out(1).shape)
                                                      : c.b.zeros({ct, c.out(1).shape});
  return {c.b.convert(out, c.out(0).dtype), c.b.convert(buffer, c.out(1).dtype)};
}

// The two halves of x along dim, in the compute type.
std::pair<Value, Value> halves(Context& c, Value x, int64_t dim) {
  x = c.b.convert(x, accumulation_type(x.dtype()));
  std::vector<int64_t> start(x.rank(), 0), mid = x.shape(), limit = x.shape();
  mid[dim] = x.dim(dim) / 2;
  std::vector<int64_t> start2 = start;
  start2[dim] = mid[dim];
  return {c.b.slice(x, start, mid), c.b.slice(x, start2, limit)};
}

Values glu(Context& c, const Args& a) {
  auto [first, second] = halves(c, a[0].tensor, wrap_dim(a[1].i, a[0].tensor.rank()));
  return {c.b.convert(c.b.mul(first, sigmoid(c.b, second)), c.out().dtype)};
}

Values glu_backward(Context& c, const Args& a) {
  int64_t dim = wrap_dim(a[2].i, a[1].tensor.rank());
  auto [first, second] = halves(c, a[1].tensor, dim);
  Value g = c.b.convert(a[0].tensor, first.dtype());
  Value s = sigmoid(c.b, second);
  Value g_first = c.b.mul(g, s);
  Value g_second = c.b.mul(c.b.mul(g_first, first), c.b.sub(k(c.b, 1, s), s));
  return {c.b.convert(c.b.concatenate({g_first, g_second}, dim), c.out().dtype)};
}

// _prelu_kernel_backward(grad, x, w) → (grad_x, grad_w), both of the
// broadcast shape (the composite prelu sums grad_w down to w's shape).
Values prelu_backward(Context& c, const Args& a) {
  const TensorType& t = c.out(0);
  ElementType ct = accumulation_type(t.dtype);
  Value g = coerce(c.b, a[0].tensor, ct, t.shape), x = coerce(c.b, a[1].tensor, ct, t.shape);
  Value w = coerce(c.b, a[2].tensor, ct, t.shape);
  Value pos = gt(c.b, x, zero_like(c.b, x));
  Value gx = c.b.select(pos, g, c.b.mul(w, g));
  Value gw = c.b.select(pos, zero_like(c.b, x), c.b.mul(x, g));
  return {c.b.convert(gx, t.dtype), c.b.convert(c.b.broadcast_to(gw, c.out(1).shape), c.out(1).dtype)};
}

}  // namespace

void register_nn_ctc(Registry& r);  // nn_ctc.cc
void register_nn_rnn(Registry& r);  // nn_rnn.cc

void register_nn(Registry& r) {
  const std::pair<const char*, Formula> pointwise_ops[] = {
      {"aten::relu", relu}, {"aten::threshold", threshold}, {"aten::gelu", gelu},
      {"aten::silu", silu}, {"aten::mish", mish}, {"aten::leaky_relu", leaky_relu},
      {"aten::elu", elu}, {"aten::celu", celu}, {"aten::hardtanh", hardtanh},
      {"aten::hardsigmoid", hardsigmoid}, {"aten::hardswish", hardswish},
      {"aten::softplus", softplus}, {"aten::hardshrink", hardshrink},
      {"aten::softshrink", softshrink}, {"aten::_prelu_kernel", prelu},
      {"aten::threshold_backward", threshold_backward},
      {"aten::gelu_backward", gelu_backward},
      {"aten::sigmoid_backward", sigmoid_backward}, {"aten::tanh_backward", tanh_backward},
      {"aten::leaky_relu_backward", leaky_relu_backward},
      {"aten::elu_backward", elu_backward}, {"aten::hardtanh_backward", hardtanh_backward},
      {"aten::hardsigmoid_backward", hardsigmoid_backward},
      {"aten::hardswish_backward", hardswish_backward},
      {"aten::softplus_backward", softplus_backward},
      {"aten::log_sigmoid_backward", log_sigmoid_backward},
      {"aten::hardshrink_backward", shrink_backward},
      {"aten::softshrink_backward", shrink_backward},
  };
  for (const auto& [op, f] : pointwise_ops) r.add(op, pointwise(f));
  r.add("aten::log_sigmoid_forward", log_sigmoid_forward);
  r.add("aten::glu", glu);
  r.add("aten::glu_backward", glu_backward);
  r.add("aten::_prelu_kernel_backward", prelu_backward);
  register_nn_loss(r);
  register_nn_norm(r);
  register_nn_ctc(r);
  register_nn_rnn(r);
  register_attention(r);
  register_sdpa(r);
}

}  // namespace torch_tpu::lowering
