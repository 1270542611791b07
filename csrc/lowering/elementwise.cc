// Pointwise arithmetic, math, comparison and logic. Most ops are one table
// row over a shared rule: convert operands to the compute type, broadcast to
// the result shape, apply one builder op.
#include <cmath>

#include "helpers.h"

namespace torch_tpu::lowering {

namespace {

using UnaryOp = Value (*)(Builder&, Value);
using BinaryOp = Value (*)(Builder&, Value, Value);

// x converted to the result type, then f.
LoweringFn unary_rule(const std::string& op) {
  return [op](Context& c, const Args& a) {
    return Values{c.b.unary(op, c.b.convert(a[0].tensor, c.out().dtype))};
  };
}

LoweringFn unary_fn(UnaryOp f) {
  return [f](Context& c, const Args& a) {
    return Values{f(c.b, c.b.convert(a[0].tensor, c.out().dtype))};
  };
}

// Both operands in the result type and shape, then f.
LoweringFn binary_fn(BinaryOp f) {
  return [f](Context& c, const Args& a) {
    const TensorType& t = c.out();
    return Values{f(c.b, coerce(c.b, a[0].tensor, t), coerce(c.b, a[1].tensor, t))};
  };
}

// a + alpha * b (alpha is argument 2, a program input).
Value scaled(Context& c, const Args& a, size_t i, const TensorType& t) {
  Value v = coerce(c.b, a[i].tensor, t);
  if (a.size() > 2 && a[2].kind == Arg::kTensor) v = c.b.mul(v, coerce(c.b, a[2].tensor, t));
  return v;
}

Values add(Context& c, const Args& a) {
  const TensorType& t = c.out();
  if (t.dtype == ElementType::kPred) {  // x + alpha*y on bools: x or (alpha and y)
    Value y = coerce(c.b, a[1].tensor, t);
    if (a.size() > 2 && a[2].kind == Arg::kTensor) y = c.b.and_(y, coerce(c.b, a[2].tensor, t));
    return {c.b.or_(coerce(c.b, a[0].tensor, t), y)};
  }
  return {c.b.add(coerce(c.b, a[0].tensor, t), scaled(c, a, 1, t))};
}

Values sub(Context& c, const Args& a) {
  const TensorType& t = c.out();
  return {c.b.sub(coerce(c.b, a[0].tensor, t), scaled(c, a, 1, t))};
}

Values rsub(Context& c, const Args& a) {
  const TensorType& t = c.out();
  return {c.b.sub(coerce(c.b, a[1].tensor, t), scaled(c, a, 0, t))};
}

Values mul(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Value x = coerce(c.b, a[0].tensor, t), y = coerce(c.b, a[1].tensor, t);
  return {t.dtype == ElementType::kPred ? c.b.and_(x, y) : c.b.mul(x, y)};
}

// Floor division of floats as CPU computes it (c10 div_floor_floating):
// (x - fmod(x, y)) / y, corrected by one where the signs differ, rounded to
// the nearest integer; a zero quotient keeps the sign of x / y; y == 0 gives
// x / y. 16-bit floats are computed in f32 and rounded once, as on CPU.
Value floor_div_float(Builder& b, Value x, Value y) {
  ElementType t = x.dtype(), ct = accumulation_type(t);
  if (ct != t) return b.convert(floor_div_float(b, b.convert(x, ct), b.convert(y, ct)), t);
  auto lt0 = [&](Value v) { return b.compare(hlo::Compare::kLT, v, splat_like(b, 0, v)); };
  Value zero = splat_like(b, 0, x), one = splat_like(b, 1, x), q = b.div(x, y);
  Value mod = b.rem(x, y);
  Value div = b.div(b.sub(x, mod), y);
  Value off = b.and_(b.compare(hlo::Compare::kNE, mod, zero), b.compare(hlo::Compare::kNE, lt0(y), lt0(mod)));
  div = b.select(off, b.sub(div, one), div);
  Value fl = b.floor(div);
  fl = b.select(b.compare(hlo::Compare::kGT, b.sub(div, fl), splat_like(b, 0.5, x)), b.add(fl, one), fl);
  fl = b.select(b.compare(hlo::Compare::kEQ, div, zero), b.mul(zero, q), fl);
  return b.select(b.compare(hlo::Compare::kEQ, y, zero), q, fl);
}

// Python-style floor division and modulo on integers and floats.
Value floor_div(Builder& b, Value x, Value y) {
  if (hlo::is_float(x.dtype())) return floor_div_float(b, x, y);
  Value q = b.div(x, y);  // truncates toward zero
  Value zero = splat_like(b, 0, x);
  Value r = b.rem(x, y);
  Value adjust = b.and_(b.compare(hlo::Compare::kNE, r, zero),
                        b.compare(hlo::Compare::kNE, b.compare(hlo::Compare::kLT, r, zero),
                                  b.compare(hlo::Compare::kLT, y, zero)));
  return b.select(adjust, b.sub(q, splat_like(b, 1, q)), q);
}

Value py_remainder(Builder& b, Value x, Value y) {
  Value r = b.rem(x, y);
  Value zero = splat_like(b, 0, x);
  Value adjust = b.and_(b.compare(hlo::Compare::kNE, r, zero),
                        b.compare(hlo::Compare::kNE, b.compare(hlo::Compare::kLT, r, zero),
                                  b.compare(hlo::Compare::kLT, y, zero)));
  return b.select(adjust, b.add(r, y), r);
}

// CPU refuses an integer division by zero. A zero on the host is refused
// before the op runs (aten/checks.cc); one held on the device is found as
// the program runs: one compare and reduce over the divisor as given.
void check_divisor(Context& c, const Value& divisor) {
  const TensorType& t = c.out();
  if (!c.b.checks_enabled() || hlo::is_float(t.dtype) || hlo::is_complex(t.dtype) ||
      t.numel() == 0)
    return;
  Value y = c.b.convert(divisor, t.dtype);
  check_all(c.b, c.b.compare(hlo::Compare::kNE, y, splat_like(c.b, 0, y)), "ZeroDivisionError",
            /*index_error=*/false);
}

// binary_fn for a division: integer divisors are checked for zeros.
LoweringFn division_fn(BinaryOp f) {
  LoweringFn op = binary_fn(f);
  return [op](Context& c, const Args& a) {
    check_divisor(c, a[1].tensor);
    return op(c, a);
  };
}

Values div(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Value x = coerce(c.b, a[0].tensor, t), y = coerce(c.b, a[1].tensor, t);
  std::string mode = a.size() > 2 && a[2].kind == Arg::kString ? a[2].s : "";
  if (!mode.empty()) check_divisor(c, a[1].tensor);
  if (mode == "trunc") {
    Value q = c.b.div(x, y);
    if (hlo::is_float(t.dtype)) {  // round toward zero
      Value neg = c.b.compare(hlo::Compare::kLT, q, splat_like(c.b, 0, q));
      q = c.b.select(neg, c.b.ceil(q), c.b.floor(q));
    }
    return {q};
  }
  if (mode == "floor") return {floor_div(c.b, x, y)};
  return {c.b.div(x, y)};
}

// x ** e for an exponent CPU computes without pow (registry.h,
// exact_exponent), as its kernel does on x86: x * x * x and 1 / (x * x), each
// step rounded in bf16 but computed in f32 and rounded once for f16.
Value exact_power(Builder& b, Value x, double e, ElementType out) {
  if (out == ElementType::kF16) x = b.convert(x, ElementType::kF32);
  Value y = e == -1 ? x : b.mul(x, x);
  if (e == 3) y = b.mul(y, x);
  if (e < 0) y = b.div(splat_like(b, 1.0, y), y);
  return y.dtype() == out ? y : b.convert(y, out);
}

Values pow_(Context& c, const Args& a) {
  const TensorType& t = c.out();
  if (a[1].kind == Arg::kDouble) {  // a static exponent: exact_exponent(a[1].d)
    Value x = coerce(c.b, a[0].tensor, t);
    if (hlo::is_float(t.dtype)) return {exact_power(c.b, x, a[1].d, t.dtype)};
    return {c.b.pow(x, splat_like(c.b, a[1].d, x))};
  }
  if (t.dtype == ElementType::kPred) {  // bool ** bool: x ** 1 is x, x ** 0 is 1
    Value x = coerce(c.b, a[0].tensor, t), e = coerce(c.b, a[1].tensor, t);
    return {c.b.or_(x, c.b.not_(e))};
  }
  return {c.b.pow(coerce(c.b, a[0].tensor, t), coerce(c.b, a[1].tensor, t))};
}

// Comparisons compute in the promoted type of their operands.
LoweringFn compare_fn(hlo::Compare dir) {
  return [dir](Context& c, const Args& a) {
    ElementType t = result_type(a, {0, 1});
    const auto& shape = c.out().shape;
    return Values{c.b.compare(dir, coerce(c.b, a[0].tensor, t, shape),
                              coerce(c.b, a[1].tensor, t, shape))};
  };
}

// Logical ops read any dtype as "nonzero" and return bool (or out dtype).
Value truthy(Builder& b, Value v) {
  if (v.dtype() == ElementType::kPred) return v;
  return b.compare(hlo::Compare::kNE, v, splat_like(b, 0, v));
}

LoweringFn logical_fn(BinaryOp f) {
  return [f](Context& c, const Args& a) {
    const auto& shape = c.out().shape;
    Value x = c.b.broadcast_to(truthy(c.b, a[0].tensor), shape);
    Value y = c.b.broadcast_to(truthy(c.b, a[1].tensor), shape);
    return Values{c.b.convert(f(c.b, x, y), c.out().dtype)};
  };
}

Values where(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Value cond = c.b.broadcast_to(truthy(c.b, a[0].tensor), t.shape);
  return {c.b.select(cond, coerce(c.b, a[1].tensor, t), coerce(c.b, a[2].tensor, t))};
}

// x where it is NaN or on the kept side of `bound`, else the bound: a NaN
// bound gives NaN, as on CPU.
Value clamp_side(hlo::Builder& b, Value x, Value bound, hlo::Compare keep) {
  Value kept = b.compare(keep, x, bound);
  if (hlo::is_float(x.dtype())) kept = b.or_(kept, b.compare(hlo::Compare::kNE, x, x));
  return b.select(kept, x, bound);
}

// clamp(x, min?, max?) for Scalar and Tensor bounds; NaN propagates like CPU.
Values clamp(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Value x = coerce(c.b, a[0].tensor, t);
  if (!a[1].none()) x = clamp_side(c.b, x, coerce(c.b, a[1].tensor, t), hlo::Compare::kGE);
  if (a.size() > 2 && !a[2].none())
    x = clamp_side(c.b, x, coerce(c.b, a[2].tensor, t), hlo::Compare::kLE);
  return {x};
}

Values clamp_min(Context& c, const Args& a) {
  const TensorType& t = c.out();
  return {clamp_side(c.b, coerce(c.b, a[0].tensor, t), coerce(c.b, a[1].tensor, t), hlo::Compare::kGE)};
}

Values clamp_max(Context& c, const Args& a) {
  const TensorType& t = c.out();
  return {clamp_side(c.b, coerce(c.b, a[0].tensor, t), coerce(c.b, a[1].tensor, t), hlo::Compare::kLE)};
}

Values masked_fill(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Value mask = c.b.broadcast_to(truthy(c.b, a[1].tensor), t.shape);
  return {c.b.select(mask, coerce(c.b, a[2].tensor, t), coerce(c.b, a[0].tensor, t))};
}

// NaN-propagating max/min (torch.maximum) versus NaN-ignoring (torch.fmax).
// stablehlo.maximum's NaN behaviour differs across backends: be explicit.
Value nan_propagating(Builder& b, Value x, Value y, Value m) {
  if (!hlo::is_float(x.dtype())) return m;
  Value either_nan = b.or_(b.compare(hlo::Compare::kNE, x, x), b.compare(hlo::Compare::kNE, y, y));
  return b.select(either_nan, b.add(x, y), m);
}
Value nan_max(Builder& b, Value x, Value y) { return nan_propagating(b, x, y, b.max(x, y)); }
Value nan_min(Builder& b, Value x, Value y) { return nan_propagating(b, x, y, b.min(x, y)); }

Value round_half_even(Builder& b, Value x) {
  if (!hlo::is_float(x.dtype())) return x;
  return b.unary("stablehlo.round_nearest_even", x);
}
Value trunc(Builder& b, Value x) {
  if (!hlo::is_float(x.dtype())) return x;
  Value neg = b.compare(hlo::Compare::kLT, x, splat_like(b, 0, x));
  return b.select(neg, b.ceil(x), b.floor(x));
}
Value sign(Builder& b, Value x) {
  if (x.dtype() == ElementType::kPred) return x;
  if (hlo::is_unsigned(x.dtype()))
    return b.convert(b.compare(hlo::Compare::kNE, x, splat_like(b, 0, x)), x.dtype());
  return b.unary("stablehlo.sign", x);
}
Value reciprocal(Builder& b, Value x) { return b.div(splat_like(b, 1, x), x); }
Value square(Builder& b, Value x) { return b.mul(x, x); }
Value frac(Builder& b, Value x) { return b.sub(x, trunc(b, x)); }
Value floor_any(Builder& b, Value x) { return hlo::is_float(x.dtype()) ? b.floor(x) : x; }
Value ceil_any(Builder& b, Value x) { return hlo::is_float(x.dtype()) ? b.ceil(x) : x; }
Value bitwise_not(Builder& b, Value x) { return b.not_(x); }
Value neg(Builder& b, Value x) { return b.neg(x); }
Value abs(Builder& b, Value x) {
  if (x.dtype() == ElementType::kPred || hlo::is_unsigned(x.dtype())) return x;
  return b.abs(x);
}
Value log2(Builder& b, Value x) { return b.div(b.log(x), splat_like(b, std::log(2.0), x)); }
Value log10(Builder& b, Value x) { return b.div(b.log(x), splat_like(b, std::log(10.0), x)); }
Value exp2(Builder& b, Value x) { return b.pow(splat_like(b, 2.0, x), x); }
Value sinc(Builder& b, Value x) {
  Value pix = b.mul(x, splat_like(b, M_PI, x));
  Value zero = b.compare(hlo::Compare::kEQ, x, splat_like(b, 0, x));
  return b.select(zero, splat_like(b, 1, x), b.div(b.unary("stablehlo.sine", pix), pix));
}
Value rad2deg(Builder& b, Value x) { return b.mul(x, splat_like(b, 180.0 / M_PI, x)); }
Value deg2rad(Builder& b, Value x) { return b.mul(x, splat_like(b, M_PI / 180.0, x)); }

Value fmod(Builder& b, Value x, Value y) { return b.rem(x, y); }
Value remainder(Builder& b, Value x, Value y) { return py_remainder(b, x, y); }
Value bit_and(Builder& b, Value x, Value y) { return b.and_(x, y); }
Value bit_or(Builder& b, Value x, Value y) { return b.or_(x, y); }
Value bit_xor(Builder& b, Value x, Value y) { return b.xor_(x, y); }
Value atan2(Builder& b, Value x, Value y) { return b.atan2(x, y); }
Value fmax(Builder& b, Value x, Value y) {
  Value xnan = b.compare(hlo::Compare::kNE, x, x);
  Value ynan = b.compare(hlo::Compare::kNE, y, y);
  return b.select(xnan, y, b.select(ynan, x, b.max(x, y)));
}
Value fmin(Builder& b, Value x, Value y) {
  Value xnan = b.compare(hlo::Compare::kNE, x, x);
  Value ynan = b.compare(hlo::Compare::kNE, y, y);
  return b.select(xnan, y, b.select(ynan, x, b.min(x, y)));
}
Value hypot(Builder& b, Value x, Value y) { return b.sqrt(b.add(b.mul(x, x), b.mul(y, y))); }
Value copysign(Builder& b, Value x, Value y) {
  Value ax = b.abs(x);
  Value neg = b.compare(hlo::Compare::kLT, b.unary("stablehlo.sign", y), splat_like(b, 0, y));
  // -0.0 carries a negative sign too: test the sign bit through 1/y.
  Value negzero = b.compare(hlo::Compare::kLT, b.div(splat_like(b, 1, y), y), splat_like(b, 0, y));
  return b.select(b.or_(neg, negzero), b.neg(ax), ax);
}
Value logaddexp(Builder& b, Value x, Value y) {
  if (hlo::is_complex(x.dtype())) return complex_log_add_exp(b, x, y);
  Value m = b.max(x, y);
  Value d = b.neg(b.abs(b.sub(x, y)));
  Value r = b.add(m, b.unary("stablehlo.log_plus_one", b.exp(d)));
  // inf + inf must stay inf, not nan.
  return b.select(b.compare(hlo::Compare::kEQ, x, y), b.add(x, b.log(splat_like(b, 2.0, x))), r);
}
Value xlogy(Builder& b, Value x, Value y) {
  Value zero = splat_like(b, 0, x);
  Value r = b.mul(x, b.log(y));
  Value ynan = b.compare(hlo::Compare::kNE, y, y);
  return b.select(b.and_(b.compare(hlo::Compare::kEQ, x, zero), b.not_(ynan)), zero, r);
}

// self + weight * (end - self), with PyTorch's two-sided form for accuracy
// (weight >= 0.5 interpolates from `end`).
Values lerp(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Builder& b = c.b;
  Value x = coerce(b, a[0].tensor, t), y = coerce(b, a[1].tensor, t);
  // A scalar weight (lerp.Scalar, the _foreach forms) is tested and
  // complemented once, at rank 0, then broadcast.
  Value w = b.convert(a[2].tensor, t.dtype);
  if (w.rank() != 0) w = b.broadcast_to(w, t.shape);
  Value aw = b.abs(w);  // a complex weight's modulus
  Value small = b.compare(hlo::Compare::kLT, aw, splat_like(b, 0.5, aw));
  Value one_minus_w = b.sub(splat_like(b, 1, w), w);
  if (w.rank() == 0 && t.rank() != 0) {
    w = b.broadcast_to(w, t.shape);
    one_minus_w = b.broadcast_to(one_minus_w, t.shape);
  }
  Value d = b.sub(y, x);
  Value from_start = b.add(x, b.mul(w, d));
  Value from_end = b.sub(y, b.mul(d, one_minus_w));
  return {b.select(small, from_start, from_end)};
}

// self + value * t1 * t2  /  self + value * t1 / t2, associated as CPU does:
// (value * t1) first.
Values addcmul(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Builder& b = c.b;
  Value scaled = b.mul(coerce(b, a[3].tensor, t), coerce(b, a[1].tensor, t));
  return {b.add(coerce(b, a[0].tensor, t), b.mul(scaled, coerce(b, a[2].tensor, t)))};
}

Values addcdiv(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Builder& b = c.b;
  Value scaled = b.mul(coerce(b, a[3].tensor, t), coerce(b, a[1].tensor, t));
  return {b.add(coerce(b, a[0].tensor, t), b.div(scaled, coerce(b, a[2].tensor, t)))};
}

// Complex conjugate; the identity on real dtypes.
Values conj_physical(Context& c, const Args& a) { return {conj(c.b, a[0].tensor)}; }

}  // namespace

void register_elementwise(Registry& r) {
  // conj_physical decomposes above the backend (to _conj_physical); its out=
  // and in-place forms reach per-device kernels.
  for (const char* op : {"aten::_conj_physical", "aten::conj_physical.out", "aten::conj_physical_"})
    r.add(op, conj_physical);
  // 16-bit arithmetic in f32, rounded once (opmath, helpers.h). Rounding
  // modes stay in the result type: CPU truncates the 16-bit quotient.
  for (const char* op : {"aten::lerp.Scalar", "aten::lerp.Tensor"}) r.add(op, opmath(lerp));
  r.add("aten::addcmul", opmath(addcmul));
  r.add("aten::addcdiv", opmath(addcdiv));
  for (const char* op : {"aten::add.Tensor", "aten::add.Scalar"}) r.add(op, opmath(add, true));
  for (const char* op : {"aten::sub.Tensor", "aten::sub.Scalar"}) r.add(op, opmath(sub, true));
  for (const char* op : {"aten::rsub.Tensor", "aten::rsub.Scalar"}) r.add(op, opmath(rsub, true));
  for (const char* op : {"aten::mul.Tensor", "aten::mul.Scalar"})
    r.add(op, opmath(mul, false, /*wide_scalar_other=*/true));
  for (const char* op : {"aten::div.Tensor", "aten::div.Scalar"})
    r.add(op, opmath(div, false, /*wide_scalar_other=*/true));
  for (const char* op : {"aten::div.Tensor_mode", "aten::div.Scalar_mode"}) r.add(op, div);
  for (const char* op : {"aten::add.Tensor", "aten::add.Scalar", "aten::sub.Tensor",
                         "aten::sub.Scalar", "aten::rsub.Tensor", "aten::rsub.Scalar"})
    r.omit_unit_scales(op);  // scaled() and add's bool form treat a missing alpha as 1
  for (const char* op : {"aten::pow.Tensor_Tensor", "aten::pow.Tensor_Scalar",
                         "aten::pow.Scalar"})
    r.add(op, pow_);
  r.static_exponent("aten::pow.Tensor_Scalar");
  const std::pair<const char*, BinaryOp> divisions[] = {
      {"aten::floor_divide", floor_div}, {"aten::floor_divide.Scalar", floor_div},
      {"aten::fmod.Tensor", fmod}, {"aten::fmod.Scalar", fmod},
      {"aten::remainder.Tensor", remainder}, {"aten::remainder.Scalar", remainder},
      {"aten::remainder.Scalar_Tensor", remainder},
  };
  for (const auto& [op, f] : divisions) r.add(op, division_fn(f));

  const std::pair<const char*, BinaryOp> binaries[] = {
      {"aten::maximum", nan_max}, {"aten::minimum", nan_min},
      {"aten::fmax", fmax}, {"aten::fmin", fmin},
      {"aten::bitwise_and.Tensor", bit_and}, {"aten::bitwise_and.Scalar", bit_and},
      {"aten::bitwise_or.Tensor", bit_or}, {"aten::bitwise_or.Scalar", bit_or},
      {"aten::bitwise_xor.Tensor", bit_xor}, {"aten::bitwise_xor.Scalar", bit_xor},
      {"aten::atan2", atan2}, {"aten::hypot", hypot}, {"aten::copysign.Tensor", copysign},
      {"aten::copysign.Scalar", copysign}, {"aten::logaddexp", logaddexp},
      {"aten::xlogy.Tensor", xlogy}, {"aten::xlogy.Scalar_Other", xlogy},
      {"aten::xlogy.Scalar_Self", xlogy},
  };
  for (const auto& [op, f] : binaries) r.add(op, binary_fn(f));

  const std::pair<const char*, hlo::Compare> compares[] = {
      {"eq", hlo::Compare::kEQ}, {"ne", hlo::Compare::kNE}, {"lt", hlo::Compare::kLT},
      {"le", hlo::Compare::kLE}, {"gt", hlo::Compare::kGT}, {"ge", hlo::Compare::kGE},
  };
  for (const auto& [name, dir] : compares) {
    r.add(std::string("aten::") + name + ".Tensor", compare_fn(dir));
    r.add(std::string("aten::") + name + ".Scalar", compare_fn(dir));
  }

  r.add("aten::logical_and", logical_fn([](Builder& b, Value x, Value y) { return b.and_(x, y); }));
  r.add("aten::logical_or", logical_fn([](Builder& b, Value x, Value y) { return b.or_(x, y); }));
  r.add("aten::logical_xor", logical_fn([](Builder& b, Value x, Value y) { return b.xor_(x, y); }));
  r.add("aten::logical_not", [](Context& c, const Args& a) {
    return Values{c.b.convert(c.b.not_(truthy(c.b, a[0].tensor)), c.out().dtype)};
  });

  // Unary math in the result type (ints promote to float first).
  const std::pair<const char*, const char*> math[] = {
      {"exp", "stablehlo.exponential"}, {"expm1", "stablehlo.exponential_minus_one"},
      {"log", "stablehlo.log"}, {"log1p", "stablehlo.log_plus_one"},
      {"sqrt", "stablehlo.sqrt"}, {"rsqrt", "stablehlo.rsqrt"},
      {"sin", "stablehlo.sine"}, {"cos", "stablehlo.cosine"}, {"tan", "stablehlo.tan"},
      {"tanh", "stablehlo.tanh"}, {"sigmoid", "stablehlo.logistic"},
      {"erf", "chlo.erf"}, {"erfc", "chlo.erfc"}, {"erfinv", "chlo.erf_inv"},
      {"asin", "chlo.asin"}, {"acos", "chlo.acos"}, {"atan", "chlo.atan"},
      {"sinh", "chlo.sinh"}, {"cosh", "chlo.cosh"}, {"asinh", "chlo.asinh"},
      {"acosh", "chlo.acosh"}, {"atanh", "chlo.atanh"}, {"lgamma", "chlo.lgamma"},
  };  // digamma: special_gamma.cc (CPU's values at the poles)
  for (const auto& [name, op] : math) r.add(std::string("aten::") + name, unary_rule(op));

  const std::pair<const char*, UnaryOp> unaries[] = {
      {"aten::neg", neg}, {"aten::sign", sign},
      {"aten::sgn", sign}, {"aten::floor", floor_any}, {"aten::ceil", ceil_any},
      {"aten::round", round_half_even}, {"aten::trunc", trunc}, {"aten::frac", frac},
      {"aten::reciprocal", reciprocal}, {"aten::square", square},
      {"aten::bitwise_not", bitwise_not}, {"aten::log2", log2}, {"aten::log10", log10},
      {"aten::exp2", exp2}, {"aten::sinc", sinc}, {"aten::rad2deg", rad2deg},
      {"aten::deg2rad", deg2rad},
  };
  for (const auto& [op, f] : unaries) r.add(op, unary_fn(f));
  // A complex number's modulus: its input is not converted to the (real)
  // result type first, which would keep only the real part.
  r.add("aten::abs", [](Context& c, const Args& a) {
    Value x = a[0].tensor;
    if (hlo::is_complex(x.dtype())) return Values{c.b.convert(c.b.abs(x), c.out().dtype)};
    return Values{abs(c.b, c.b.convert(x, c.out().dtype))};
  });

  r.add("aten::where.self", where);
  for (const char* op : {"aten::clamp", "aten::clamp.Tensor"}) r.add(op, clamp);
  for (const char* op : {"aten::clamp_min", "aten::clamp_min.Tensor"}) r.add(op, clamp_min);
  for (const char* op : {"aten::clamp_max", "aten::clamp_max.Tensor"}) r.add(op, clamp_max);
  for (const char* op : {"aten::masked_fill.Scalar", "aten::masked_fill.Tensor"})
    r.add(op, masked_fill);
  r.add("aten::isnan", [](Context& c, const Args& a) {
    Value x = a[0].tensor;
    if (!hlo::is_float(x.dtype())) return Values{splat(c.b, 0, ElementType::kPred, x.shape())};
    return Values{c.b.compare(hlo::Compare::kNE, x, x)};
  });
  r.add("aten::isfinite", [](Context& c, const Args& a) {
    Value x = a[0].tensor;
    if (!hlo::is_float(x.dtype())) return Values{splat(c.b, 1, ElementType::kPred, x.shape())};
    return Values{c.b.is_finite(x)};
  });

  // torch._assert_async: a device-side check (reported at the next host read
  // or synchronize, like an out-of-range index), with CPU's messages.
  auto assert_async = [](Context& c, const Args& a) {
    Value x = a[0].tensor;
    const int64_t n = x.type().numel();
    if (n != 1)
      throw InvalidArgument(std::string("Boolean value of Tensor with ") +
                            (n == 0 ? "no values" : "more than one value") + " is ambiguous");
    std::string message = "Expected Tensor with single nonzero value, but got zero";
    if (a.size() > 1) message = a[1].s.empty() ? "Assertion is failed" : a[1].s;
    check_all(c.b, truthy(c.b, x), message, /*index_error=*/false);
    return Values{};
  };
  r.add("aten::_assert_async", assert_async);
  r.add("aten::_assert_async.msg", assert_async);
}

}  // namespace torch_tpu::lowering
