// Normalization: layer, batch and group norm with their backward ops. All
// statistics are computed in the compute type (f32 for 16-bit floats, as
// PyTorch does on CPU) with a two-pass variance; results are rounded to the
// types PyTorch's meta functions give. Backward ops return only the outputs
// their output_mask asks for (the others are undefined tensors).
#include <cmath>

#include "helpers.h"

namespace torch_tpu::lowering {

namespace {

Value k(Builder& b, double x, Value like) { return splat_like(b, x, like); }

int64_t count(const Value& x, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.dim(d);
  return n;
}

// Mean of x over dims, kept as size-1 dims.
Value mean_keep(Builder& b, Value x, const std::vector<int64_t>& dims) {
  Value s = reduce_sum(b, x, dims);
  s = b.div(s, k(b, static_cast<double>(count(x, dims)), s));
  return keepdim(b, s, x.shape(), dims);
}
// The same, broadcast back to x's shape.
Value mean_over(Builder& b, Value x, const std::vector<int64_t>& dims) {
  return b.broadcast_to(mean_keep(b, x, dims), x.shape());
}

// Mean and 1 / sqrt(biased variance + eps) of x over dims (kept as size 1),
// the reciprocal of a rounded sqrt as on CPU.
struct Moments {
  Value mean, rstd;
};
Moments moments(Builder& b, Value x, const std::vector<int64_t>& dims, double eps,
                Value* var_out = nullptr) {
  Moments m;
  m.mean = mean_keep(b, x, dims);
  Value centered = b.sub(x, b.broadcast_to(m.mean, x.shape()));
  Value var = mean_keep(b, b.mul(centered, centered), dims);
  if (var_out) *var_out = var;
  m.rstd = b.div(k(b, 1, var), unfused(b, b.sqrt(b.add(var, k(b, eps, var)))));
  return m;
}

// (x - mean) * rstd with keepdim statistics.
Value standardize(Builder& b, Value x, const Moments& m) {
  return b.mul(b.sub(x, b.broadcast_to(m.mean, x.shape())), b.broadcast_to(m.rstd, x.shape()));
}

// Broadcasts a per-channel vector (optional argument) along `dims` of `like`.
Value along(Builder& b, const Arg& v, Value like, const std::vector<int64_t>& dims,
            double absent) {
  if (v.none()) return k(b, absent, like);
  return b.broadcast_in_dim(b.convert(v.tensor, like.dtype()), like.shape(), dims);
}

// x converted to output i's type, or zeros where PyTorch returns an empty
// placeholder (e.g. batch norm's saved stats in eval mode).
Value fit(Context& c, Value x, size_t i) {
  const TensorType& t = c.out(i);
  if (t.numel() != x.type().numel()) return c.b.zeros(t);
  return c.b.convert(c.b.reshape(x, t.shape), t.dtype);
}

std::vector<int64_t> range(int64_t lo, int64_t hi) {
  std::vector<int64_t> d;
  for (int64_t i = lo; i < hi; ++i) d.push_back(i);
  return d;
}

// The outputs a backward op's output_mask asks for, in order.
Values masked(const std::vector<bool>& mask, const Values& all) {
  Values out;
  for (size_t i = 0; i < all.size(); ++i)
    if (mask.at(i)) out.push_back(all[i]);
  return out;
}

// rstd * (g - mean(g) - xhat * mean(g * xhat)) over dims: the gradient of a
// normalization whose statistics come from the same dims.
Value normalized_grad(Builder& b, Value g, Value xhat, Value rstd,
                      const std::vector<int64_t>& dims) {
  Value centered = b.sub(g, mean_over(b, g, dims));
  return b.mul(rstd, b.sub(centered, b.mul(xhat, mean_over(b, b.mul(g, xhat), dims))));
}

// ---- layer norm --------------------------------------------------------------

// (input, normalized_shape, weight?, bias?, eps) → (out, mean, rstd).
Values native_layer_norm(Context& c, const Args& a) {
  Value x = c.b.convert(a[0].tensor, accumulation_type(a[0].tensor.dtype()));
  auto dims = range(x.rank() - static_cast<int64_t>(a[1].ints.size()), x.rank());
  Moments m = moments(c.b, x, dims, a[4].d);
  Value y = standardize(c.b, x, m);
  y = c.b.add(c.b.mul(y, along(c.b, a[2], y, dims, 1)), along(c.b, a[3], y, dims, 0));
  return {c.b.convert(y, c.out(0).dtype), fit(c, m.mean, 1), fit(c, m.rstd, 2)};
}

// Layer norm's input gradient in CPU's kernel's form and operation order:
// with ds = sum(dy w x), db = sum(dy w) over the row and a = rstd,
// b = (db mean - ds) a³ / N, c = -b mean - db a / N, dx = a dy w + b x + c.
// For one normalized element CPU's result is the rounding noise of
// (a dy) w - (dy w) a, reproduced exactly when each product stays rounded.
Value layer_norm_dx(Builder& b, Value dy, Value w, Value x, Value mean, Value rstd,
                    const std::vector<int64_t>& dims) {
  int64_t n = count(x, dims);
  auto rounded = [&](Value v) { return n == 1 ? unfused(b, v) : v; };
  auto row_sum = [&](Value v) {
    return b.broadcast_to(keepdim(b, reduce_sum(b, v, dims), v.shape(), dims), v.shape());
  };
  Value dyw = b.mul(dy, w);
  Value ds = row_sum(rounded(b.mul(dyw, x))), db = row_sum(dyw);
  // 1/n in the compute type: float's rounding for float, double's for double.
  double inv = x.dtype() == ElementType::kF64 ? 1.0 / static_cast<double>(n)
                                              : static_cast<double>(1.0f / static_cast<float>(n));
  Value scale = k(b, inv, x);
  Value bb = b.sub(rounded(b.mul(db, mean)), ds);
  bb = b.mul(b.mul(b.mul(b.mul(bb, rstd), rstd), rstd), scale);
  Value cc = b.sub(rounded(b.neg(b.mul(bb, mean))), rounded(b.mul(b.mul(db, rstd), scale)));
  return b.add(b.add(rounded(b.mul(b.mul(rstd, dy), w)), rounded(b.mul(bb, x))), cc);
}

// a x + y with one rounding, as a fused multiply-add computes it: the
// product's exact rounding error (Dekker's split) is added back last. Every
// product is kept unfused so the backend cannot contract it differently.
Value fused_multiply_add(Builder& b, Value a, Value x, Value y) {
  auto split = [&](Value v) {  // v = hi + lo, each with at most 12 significant bits
    Value t = unfused(b, b.mul(v, k(b, 4097, v)));
    Value hi = b.sub(t, b.sub(t, v));
    return std::pair<Value, Value>{hi, b.sub(v, hi)};
  };
  Value p = unfused(b, b.mul(a, x));
  auto [ah, al] = split(a);
  auto [xh, xl] = split(x);
  Value e = b.sub(unfused(b, b.mul(ah, xh)), p);
  e = b.add(b.add(b.add(e, unfused(b, b.mul(ah, xl))), unfused(b, b.mul(al, xh))),
            unfused(b, b.mul(al, xl)));
  return b.add(b.add(p, y), e);
}

// The normalized input as CPU's weight gradient computes it: a x - a mean
// with a fused multiply-add. For one normalized element (x == mean) that is
// the rounding error of a x, which CPU's result carries.
Value layer_norm_xhat(Builder& b, Value x, Value mean, Value rstd, int64_t n) {
  if (n != 1 || x.dtype() != ElementType::kF32)
    return b.mul(b.sub(x, mean), rstd);
  return fused_multiply_add(b, rstd, x, b.neg(unfused(b, b.mul(rstd, mean))));
}

// (grad, input, normalized_shape, mean, rstd, weight?, bias?, output_mask).
Values native_layer_norm_backward(Context& c, const Args& a) {
  ElementType ct = accumulation_type(a[1].tensor.dtype());
  Value x = c.b.convert(a[1].tensor, ct), g = c.b.convert(a[0].tensor, ct);
  int64_t axis = x.rank() - static_cast<int64_t>(a[2].ints.size());
  auto dims = range(axis, x.rank()), batch = range(0, axis);
  Value mean = c.b.broadcast_to(c.b.convert(a[3].tensor, ct), x.shape());
  Value rstd = c.b.broadcast_to(c.b.convert(a[4].tensor, ct), x.shape());
  Value xhat = layer_norm_xhat(c.b, x, mean, rstd, count(x, dims));
  Value w = along(c.b, a[5], g, dims, 1);
  const auto& mask = a[7].bools;
  Values all{layer_norm_dx(c.b, g, w, x, mean, rstd, dims),
             reduce_sum(c.b, c.b.mul(g, xhat), batch), reduce_sum(c.b, g, batch)};
  Values out = masked(mask, all);
  for (size_t i = 0; i < out.size(); ++i) out[i] = fit(c, out[i], i);
  return out;
}

// ---- batch norm --------------------------------------------------------------

struct BatchNorm {
  Value out, mean, invstd;  // mean, invstd: per channel, as (1, C, 1, ...)
  Value running_mean, running_var;  // updated (training) or unchanged; may be invalid
};

// Normalizes over all dims but 1. Training uses batch statistics and updates
// the running ones with the unbiased variance; eval uses the running ones.
BatchNorm batch_norm(Context& c, Value input, const Arg& w, const Arg& bias, const Arg& rm,
                     const Arg& rv, bool training, double momentum, double eps) {
  Builder& b = c.b;
  Value x = b.convert(input, accumulation_type(input.dtype()));
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.rank(); ++d) dims.push_back(d);
  BatchNorm r;
  Moments m;
  if (training) {
    Value var;
    m = moments(b, x, dims, eps, &var);
    var = b.reshape(var, {x.dim(1)});
    double n = static_cast<double>(count(x, dims));
    auto update = [&](const Arg& old, Value batch) {
      if (old.none()) return Value();
      Value o = b.convert(old.tensor, batch.dtype());
      Value v = b.add(b.mul(k(b, 1 - momentum, o), o), b.mul(k(b, momentum, batch), batch));
      return b.convert(v, old.tensor.dtype());
    };
    r.running_mean = update(rm, b.reshape(m.mean, {x.dim(1)}));
    r.running_var = update(rv, b.mul(var, k(b, n / (n - 1), var)));
    // When the parameters share a 16-bit input's dtype, CPU keeps its batch
    // statistics in that dtype. For f16 the mean and invstd are rounded. The
    // bf16 kernel (batch_norm_kernel.cpp) rounds the mean; the sum of squares
    // about the unrounded mean, divided by n, each rounded; invstd from that,
    // rounded; it then computes x * alpha + beta (bf16_affine below).
    bool mixed = false;
    for (const Arg* p : {&w, &bias, &rm, &rv})
      mixed |= !p->none() && p->tensor.dtype() != input.dtype();
    if (input.dtype() == ElementType::kF16 && !mixed) {
      m.mean = round_like(b, m.mean, input.dtype());
      m.rstd = round_like(b, m.rstd, input.dtype());
    }
    if (input.dtype() == ElementType::kBF16 && !mixed) {
      ElementType h = input.dtype();
      Value d = b.sub(x, b.broadcast_to(m.mean, x.shape()));
      Value sum_sq = round_like(b, keepdim(b, reduce_sum(b, b.mul(d, d), dims), x.shape(), dims), h);
      Value v = round_like(b, b.div(sum_sq, k(b, n, sum_sq)), h);
      m.mean = round_like(b, m.mean, h);
      m.rstd = round_like(b, b.div(k(b, 1, v), unfused(b, b.sqrt(b.add(v, k(b, eps, v))))), h);
    }
  } else {  // running stats, as (1, C, 1, ...)
    std::vector<int64_t> kept(x.rank(), 1);
    kept[1] = x.dim(1);
    Value shape_like = b.zeros({x.dtype(), kept});
    m.mean = along(b, rm, shape_like, {1}, 0);
    Value var = along(b, rv, shape_like, {1}, 1);
    m.rstd = b.div(k(b, 1, var), unfused(b, b.sqrt(b.add(var, k(b, eps, var)))));
    if (!rm.none()) r.running_mean = rm.tensor;
    if (!rv.none()) r.running_var = rv.tensor;
  }
  r.mean = m.mean;
  r.invstd = m.rstd;
  if (input.dtype() == ElementType::kBF16) {
    // bf16_affine: x * alpha + beta in f32, with alpha = invstd * w and
    // beta = bias - mean * alpha per channel.
    Value alpha = b.mul(m.rstd, along(b, w, m.rstd, {1}, 1));
    Value beta = b.sub(along(b, bias, m.mean, {1}, 0), b.mul(m.mean, alpha));
    r.out = b.add(b.mul(x, b.broadcast_to(alpha, x.shape())), b.broadcast_to(beta, x.shape()));
    return r;
  }
  Value y = standardize(b, x, m);
  r.out = b.add(b.mul(y, along(b, w, y, {1}, 1)), along(b, bias, y, {1}, 0));
  return r;
}

// Assembles (out, save_mean, save_invstd[, reserve]) and then as many new
// running stats as the op has outputs left (mutated or functional ones).
Values batch_norm_results(Context& c, const BatchNorm& r, bool reserve) {
  Values out{c.b.convert(r.out, c.out(0).dtype), fit(c, r.mean, 1), fit(c, r.invstd, 2)};
  if (reserve) out.push_back(c.b.zeros(c.out(3)));
  for (Value v : {r.running_mean, r.running_var})
    if (out.size() < c.outputs.size() && v.valid()) out.push_back(v);
  return out;
}

// native_batch_norm, _native_batch_norm_legit(_functional):
// (input, weight?, bias?, running_mean?, running_var?, training, momentum, eps).
Values native_batch_norm(Context& c, const Args& a) {
  BatchNorm r = batch_norm(c, a[0].tensor, a[1], a[2], a[3], a[4], a[5].b, a[6].d, a[7].d);
  return batch_norm_results(c, r, false);
}

// _native_batch_norm_legit.no_stats(input, weight?, bias?, training, momentum, eps).
Values batch_norm_no_stats(Context& c, const Args& a) {
  BatchNorm r = batch_norm(c, a[0].tensor, a[1], a[2], Arg(), Arg(), a[3].b, a[4].d, a[5].d);
  return batch_norm_results(c, r, false);
}

// (input, weight?, bias?, running_mean, running_var, momentum, eps): eval mode
// (_native_batch_norm_legit_no_training, _batch_norm_no_update) or training
// (_batch_norm_with_update and its functional form, with a reserve output).
LoweringFn batch_norm_fixed(bool training, bool reserve) {
  return [training, reserve](Context& c, const Args& a) {
    BatchNorm r = batch_norm(c, a[0].tensor, a[1], a[2], a[3], a[4], training, a[5].d, a[6].d);
    return batch_norm_results(c, r, reserve);
  };
}

// native_batch_norm_backward / batch_norm_backward: (grad, input, weight?,
// running_mean?, running_var?, save_mean?, save_invstd?, train, eps, output_mask, ...).
Values native_batch_norm_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  ElementType ct = accumulation_type(a[1].tensor.dtype());
  Value x = b.convert(a[1].tensor, ct), g = b.convert(a[0].tensor, ct);
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.rank(); ++d) dims.push_back(d);
  bool train = a[7].b;
  Value mean = along(b, train ? a[5] : a[3], x, {1}, 0);
  Value invstd = train ? along(b, a[6], x, {1}, 1)
                       : b.rsqrt(b.add(along(b, a[4], x, {1}, 1), k(b, a[8].d, x)));
  Value xhat = b.mul(b.sub(x, mean), invstd);
  Value w = along(b, a[2], x, {1}, 1);
  Value grad_input = train ? b.mul(normalized_grad(b, g, xhat, invstd, dims), w)
                           : b.mul(b.mul(g, invstd), w);
  Values all{grad_input, reduce_sum(b, b.mul(g, xhat), dims), reduce_sum(b, g, dims)};
  Values out = masked(a[9].bools, all);
  for (size_t i = 0; i < out.size(); ++i) out[i] = fit(c, out[i], i);
  return out;
}

// ---- group norm --------------------------------------------------------------

// (input, weight?, bias?, N, C, HxW, group, eps) → (out, mean, rstd) with
// mean/rstd of shape (N, group).
Values native_group_norm(Context& c, const Args& a) {
  Builder& b = c.b;
  int64_t n = a[3].i, ch = a[4].i, hw = a[5].i, groups = a[6].i;
  Value input = b.convert(a[0].tensor, accumulation_type(a[0].tensor.dtype()));
  Value x = b.reshape(input, {n, groups, groups ? ch / groups * hw : 0});
  Moments m = moments(b, x, {2}, a[7].d);
  Value y = b.reshape(standardize(b, x, m), input.shape());
  y = b.add(b.mul(y, along(b, a[1], y, {1}, 1)), along(b, a[2], y, {1}, 0));
  return {b.convert(y, c.out(0).dtype), fit(c, m.mean, 1), fit(c, m.rstd, 2)};
}

// (grad, input, mean, rstd, weight?, N, C, HxW, group, output_mask).
Values native_group_norm_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  int64_t n = a[5].i, ch = a[6].i, hw = a[7].i, groups = a[8].i;
  ElementType ct = accumulation_type(a[1].tensor.dtype());
  std::vector<int64_t> shape{n, groups, groups ? ch / groups : 0, hw};
  Value x = b.reshape(b.convert(a[1].tensor, ct), shape);
  Value g = b.reshape(b.convert(a[0].tensor, ct), shape);
  auto per_group = [&](const Arg& v) {
    return b.broadcast_in_dim(b.convert(v.tensor, ct), shape, {0, 1});
  };
  Value rstd = per_group(a[3]);
  Value xhat = b.mul(b.sub(x, per_group(a[2])), rstd);
  Value w = a[4].none() ? k(b, 1, x)
                        : b.broadcast_in_dim(b.reshape(b.convert(a[4].tensor, ct), {shape[1], shape[2]}),
                                             shape, {1, 2});
  Values all{normalized_grad(b, b.mul(g, w), xhat, rstd, {2, 3}),
             reduce_sum(b, b.mul(g, xhat), {0, 3}), reduce_sum(b, g, {0, 3})};
  Values out = masked(a[9].bools, all);
  for (size_t i = 0; i < out.size(); ++i) out[i] = fit(c, out[i], i);
  return out;
}

}  // namespace

void register_nn_norm(Registry& r) {
  r.add("aten::native_layer_norm", native_layer_norm);
  r.add("aten::native_layer_norm_backward", native_layer_norm_backward);
  for (const char* op : {"aten::native_batch_norm", "aten::_native_batch_norm_legit",
                         "aten::_native_batch_norm_legit_functional"})
    r.add(op, native_batch_norm);
  r.add("aten::_native_batch_norm_legit.no_stats", batch_norm_no_stats);
  r.add("aten::_native_batch_norm_legit_no_training", batch_norm_fixed(false, false));
  r.add("aten::_batch_norm_no_update", batch_norm_fixed(false, true));
  r.add("aten::_batch_norm_with_update", batch_norm_fixed(true, true));
  r.add("aten::_batch_norm_with_update_functional", batch_norm_fixed(true, true));
  for (const char* op : {"aten::native_batch_norm_backward", "aten::batch_norm_backward"})
    r.add(op, native_batch_norm_backward);
  r.add("aten::native_group_norm", native_group_norm);
  r.add("aten::native_group_norm_backward", native_group_norm_backward);
}

}  // namespace torch_tpu::lowering
