// Pointwise ops beyond elementwise.cc: float classification (isinf, signbit),
// nan_to_num, logit, heaviside, nextafter, gcd/lcm, bit shifts, logaddexp2,
// ldexp, frexp, round(decimals), xlog1py and entr. 16-bit floats compute in
// f32 and round once, as PyTorch's CPU kernels do.
#include <cmath>
#include <limits>

#include "helpers.h"

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;

Value eq(Builder& b, Value x, double v) { return b.compare(Compare::kEQ, x, splat_like(b, v, x)); }
Value lt(Builder& b, Value x, double v) { return b.compare(Compare::kLT, x, splat_like(b, v, x)); }
Value gt(Builder& b, Value x, double v) { return b.compare(Compare::kGT, x, splat_like(b, v, x)); }
Value is_nan(Builder& b, Value x) { return b.compare(Compare::kNE, x, x); }
Value all_false(Builder& b, Value x) { return splat(b, 0, ElementType::kPred, x.shape()); }

// The tensor at `i` converted to the (f32 for 16-bit) compute type of the
// output and broadcast to its shape.
Value operand(Context& c, const Args& a, size_t i) {
  return coerce(c.b, a[i].tensor, accumulation_type(c.out().dtype), c.out().shape);
}
Values result(Context& c, Value v) { return {c.b.convert(v, c.out().dtype)}; }

// ---- classification ----------------------------------------------------------

LoweringFn classify(double target) {  // isinf (target 0: either), isposinf, isneginf
  return [target](Context& c, const Args& a) {
    Value x = a[0].tensor;
    if (!hlo::is_float(x.dtype())) return Values{all_false(c.b, x)};
    if (target == 0) return Values{eq(c.b, c.b.abs(x), INFINITY)};
    return Values{eq(c.b, x, target)};
  };
}

ElementType same_width_int(ElementType t) {
  switch (hlo::bit_width(t)) {
    case 16: return ElementType::kI16;
    case 32: return ElementType::kI32;
    default: return ElementType::kI64;
  }
}

// The sign bit, so -0.0 and -nan count as negative.
Values signbit(Context& c, const Args& a) {
  Value x = a[0].tensor;
  if (x.dtype() == ElementType::kPred || hlo::is_unsigned(x.dtype())) return {all_false(c.b, x)};
  if (hlo::is_float(x.dtype()))
    x = c.b.bitcast_convert(x, TensorType{same_width_int(x.dtype()), x.shape()});
  return {lt(c.b, x, 0)};
}

double finite_max(ElementType t) {
  switch (t) {
    case ElementType::kF16: return 65504.0;
    case ElementType::kBF16: return 3.3895313892515355e38;
    case ElementType::kF32: return std::numeric_limits<float>::max();
    default: return std::numeric_limits<double>::max();
  }
}

// nan_to_num(self, nan?, posinf?, neginf?): defaults 0 and the dtype's extremes.
Values nan_to_num(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a[0].tensor;
  if (!hlo::is_float(x.dtype())) return {x};
  auto value = [&](size_t i, double fallback) {
    return splat_like(b, a[i].kind == Arg::kDouble ? a[i].d : fallback, x);
  };
  double big = finite_max(x.dtype());
  x = b.select(is_nan(b, x), value(1, 0.0), x);
  x = b.select(eq(b, x, INFINITY), value(2, big), x);
  return {b.select(eq(b, x, -INFINITY), value(3, -big), x)};
}

// ---- logit -------------------------------------------------------------------

bool has_eps(const Args& a, size_t i) { return a.size() > i && a[i].kind == Arg::kDouble; }

Values logit(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = operand(c, a, 0);
  if (has_eps(a, 1)) x = b.clamp(splat_like(b, a[1].d, x), x, splat_like(b, 1 - a[1].d, x));
  return result(c, b.log(b.div(x, b.sub(splat_like(b, 1, x), x))));
}

// grad / (x (1 - x)) inside the domain ([0, 1], or [eps, 1 - eps] where the
// clamp made the gradient 0), NaN outside it without eps.
Values logit_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  Value g = operand(c, a, 0), x = operand(c, a, 1);
  Value grad = b.div(g, b.mul(x, b.sub(splat_like(b, 1, x), x)));
  Value edge = b.or_(eq(b, x, 0), eq(b, x, 1));
  grad = b.select(edge, b.mul(g, splat_like(b, INFINITY, g)), grad);
  bool eps = has_eps(a, 2) && a[2].d >= 0;
  double lo = eps ? a[2].d : 0, hi = eps ? 1 - a[2].d : 1;
  Value outside = b.or_(lt(b, x, lo), gt(b, x, hi));
  return result(c, b.select(outside, splat_like(b, eps ? 0 : NAN, x), grad));
}

// ---- binary ------------------------------------------------------------------

Values heaviside(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Value x = coerce(c.b, a[0].tensor, t), v = coerce(c.b, a[1].tensor, t);
  Value step = c.b.convert(gt(c.b, x, 0), t.dtype);
  return {c.b.select(eq(c.b, x, 0), v, step)};
}

Values nextafter(Context& c, const Args& a) {
  const TensorType& t = c.out();
  return {c.b.binary("chlo.next_after", coerce(c.b, a[0].tensor, t), coerce(c.b, a[1].tensor, t))};
}

// Euclid's algorithm on |a|, |b|, all elements in one loop until every
// remainder is zero.
Value gcd_of(Builder& b, Value x, Value y) {
  Values done = b.while_loop(
      {b.abs(x), b.abs(y)},
      [&](Builder& w, const Values& s) {
        Value nonzero = w.convert(w.compare(Compare::kNE, s[1], splat_like(w, 0, s[1])), ElementType::kI32);
        std::vector<int64_t> all(s[1].rank());
        for (int64_t d = 0; d < s[1].rank(); ++d) all[d] = d;
        Value any = reduce_max(w, nonzero, all);
        return Values{w.compare(Compare::kGT, any, w.constant(ElementType::kI32, 0))};
      },
      [&](Builder& w, const Values& s) {
        Value z = splat_like(w, 0, s[1]);
        Value live = w.compare(Compare::kNE, s[1], z);
        Value safe = w.select(live, s[1], splat_like(w, 1, s[1]));
        return Values{w.select(live, s[1], s[0]), w.select(live, w.rem(s[0], safe), z)};
      });
  return done[0];
}

Values gcd(Context& c, const Args& a) {
  const TensorType& t = c.out();
  return {gcd_of(c.b, coerce(c.b, a[0].tensor, t), coerce(c.b, a[1].tensor, t))};
}

Values lcm(Context& c, const Args& a) {
  Builder& b = c.b;
  const TensorType& t = c.out();
  Value x = coerce(b, a[0].tensor, t), y = coerce(b, a[1].tensor, t);
  Value g = gcd_of(b, x, y);
  Value zero = eq(b, g, 0);
  // CPU's |x / g * y| runs in C++'s int for 8- and 16-bit types (then wraps
  // into the type), in the type itself for wider ones.
  bool narrow = hlo::bit_width(t.dtype) < 32;
  auto wide = [&](Value v) { return narrow ? b.convert(v, ElementType::kI32) : v; };
  Value l = b.abs(b.mul(b.div(wide(x), wide(b.select(zero, splat_like(b, 1, g), g))), wide(y)));
  return {b.select(zero, splat_like(b, 0, g), b.convert(l, t.dtype))};
}

// PyTorch's shifts: a shift count outside [0, bits) gives 0 (left, or right
// of an unsigned) or the sign fill (right of a signed value).
LoweringFn shift(bool left) {
  return [left](Context& c, const Args& a) {
    Builder& b = c.b;
    const TensorType& t = c.out();
    if (!hlo::is_integer(t.dtype)) throw Unsupported("shifts need integer operands");
    Value x = coerce(b, a[0].tensor, t), n = coerce(b, a[1].tensor, t);
    Value out_of_range = b.or_(lt(b, n, 0), b.compare(Compare::kGE, n, splat_like(b, hlo::bit_width(t.dtype), n)));
    if (left) return Values{b.select(out_of_range, splat_like(b, 0, x), b.shift_left(x, n))};
    if (hlo::is_unsigned(t.dtype))
      return Values{b.select(out_of_range, splat_like(b, 0, x), b.shift_right_logical(x, n))};
    Value fill = b.select(lt(b, x, 0), splat_like(b, -1, x), splat_like(b, 0, x));
    return Values{b.select(out_of_range, fill, b.shift_right_arithmetic(x, n))};
  };
}

// log2(2^x + 2^y) = max + log2(1 + 2^-|x - y|); equal operands (also infinite
// ones) give x + 1.
Values logaddexp2(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = operand(c, a, 0), y = operand(c, a, 1);
  Value m = b.max(x, y);
  Value d = b.neg(b.abs(b.sub(x, y)));
  Value ln2 = splat_like(b, M_LN2, x);
  Value r = b.add(m, b.div(b.unary("stablehlo.log_plus_one", b.exp(b.mul(d, ln2))), ln2));
  Value same = b.compare(Compare::kEQ, x, y);
  return result(c, b.select(same, b.add(x, splat_like(b, 1, x)), r));
}

// self * 2^other, as PyTorch composes it (in the result type).
Values ldexp(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Value x = coerce(c.b, a[0].tensor, t), e = coerce(c.b, a[1].tensor, t);
  return {c.b.mul(x, c.b.pow(splat_like(c.b, 2, e), e))};
}

// frexp: mantissa in [0.5, 1) with the sign of x, and the int32 exponent,
// read from the bits; 0, inf and nan give (x, 0). Subnormals are not scaled
// (XLA:CPU flushes them).
Values frexp(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a[0].tensor;
  if (!hlo::is_float(x.dtype())) throw Unsupported("frexp needs a floating point input");
  bool wide = x.dtype() == ElementType::kF64;
  if (!wide) x = b.convert(x, ElementType::kF32);
  ElementType it = wide ? ElementType::kI64 : ElementType::kI32;
  int mant = wide ? 52 : 23, bias = wide ? 1023 : 127;
  int64_t exp_mask = (wide ? 0x7FFLL : 0xFFLL) << mant;
  Value bits = b.bitcast_convert(x, TensorType{it, x.shape()});
  auto k = [&](int64_t v) { return splat(b, static_cast<double>(v), it, x.shape()); };
  Value biased = b.shift_right_logical(b.and_(bits, k(exp_mask)), k(mant));
  Value e = b.sub(biased, k(bias - 1));
  Value mbits = b.or_(b.and_(bits, b.not_(k(exp_mask))), k(int64_t{bias - 1} << mant));
  Value m = b.bitcast_convert(mbits, x.type());
  Value special = b.or_(eq(b, x, 0), b.not_(b.is_finite(x)));
  m = b.select(special, x, m);
  e = b.select(special, k(0), e);
  return {b.convert(m, c.out(0).dtype), b.convert(e, c.out(1).dtype)};
}

// round(x, decimals): half to even at 10^-decimals, in the input type as
// PyTorch computes it.
Values round_decimals(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a[0].tensor;
  if (!hlo::is_float(x.dtype())) throw InvalidArgument("round with decimals needs a float input");
  int64_t d = a[1].i;
  Value p = splat_like(b, std::pow(10.0, static_cast<double>(d < 0 ? -d : d)), x);
  auto rnd = [&](Value v) { return b.unary("stablehlo.round_nearest_even", v); };
  if (d < 0) return {b.mul(rnd(b.div(x, p)), p)};
  return {b.div(rnd(b.mul(x, p)), p)};
}

// x * log1p(y), 0 where x == 0 unless y is NaN.
Values xlog1py(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = operand(c, a, 0), y = operand(c, a, 1);
  Value r = b.mul(x, b.unary("stablehlo.log_plus_one", y));
  return result(c, b.select(b.and_(eq(b, x, 0), b.not_(is_nan(b, y))), splat_like(b, 0, x), r));
}

// -x log x for x > 0, 0 at 0, -inf below, NaN stays NaN.
Values entr(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = operand(c, a, 0);
  Value r = b.neg(b.mul(x, b.log(x)));
  r = b.select(eq(b, x, 0), splat_like(b, 0, x), r);
  r = b.select(lt(b, x, 0), splat_like(b, -INFINITY, x), r);
  return result(c, r);
}

// ---- _foreach_* ----------------------------------------------------------------
// Each list element is lowered by the registered lowering of the per-tensor
// op, with that element's result type, so promotion and edge cases match the
// single-tensor op exactly while the whole list becomes one program.

// Element `i` of argument `arg`: list elements by index, others as they are.
Arg element(const Arg& arg, size_t i, bool scalar_list) {
  if (arg.kind != Arg::kTensorList) return arg;
  Arg e;
  e.kind = arg.tensors.at(i).valid() ? Arg::kTensor : Arg::kNone;
  e.tensor = arg.tensors[i];
  e.scalar = scalar_list;
  return e;
}

// The list overloads of `per_tensor`: argument 0 is the self list; other
// lists pair up by index; a ScalarList (at `scalar_list`) arrives as 0-d
// values and stays weak in promotion, as a Python number would.
LoweringFn foreach(const LoweringFn& per_tensor, int scalar_list = -1) {
  return [per_tensor, scalar_list](Context& c, const Args& a) {
    Values out;
    size_t n = a[0].tensors.size();
    for (size_t i = 0; i < n; ++i) {
      Args ea;
      for (size_t k = 0; k < a.size(); ++k)
        ea.push_back(element(a[k], i, static_cast<int>(k) == scalar_list));
      Context ec{c.b, c.outputs.subspan(i, 1), c.precision, c.op, c.target};
      out.push_back(per_tensor(ec, ea).at(0));
    }
    return out;
  };
}

// _foreach_norm(self[], ord, dtype?) through linalg_vector_norm(x, ord, dim,
// keepdim, dtype).
LoweringFn foreach_norm(const LoweringFn& norm) {
  return [norm](Context& c, const Args& a) {
    Values out;
    for (size_t i = 0; i < a[0].tensors.size(); ++i) {
      Arg dim, keep, x = element(a[0], i, false);
      keep.kind = Arg::kBool;
      Context ec{c.b, c.outputs.subspan(i, 1), c.precision, c.op, c.target};
      out.push_back(norm(ec, {x, a[1], dim, keep, a.size() > 2 ? a[2] : Arg()}).at(0));
    }
    return out;
  };
}

Values foreach_zero(Context& c, const Args& a) {
  Values out;
  for (size_t i = 0; i < a[0].tensors.size(); ++i) out.push_back(c.b.zeros(c.out(i)));
  return out;
}

Values foreach_copy(Context& c, const Args& a) {
  Values out;
  for (size_t i = 0; i < a[0].tensors.size(); ++i) out.push_back(coerce(c.b, a[1].tensors.at(i), c.out(i)));
  return out;
}

void register_foreach(Registry& r) {
  auto add = [&r](const std::string& op, const std::string& target, int scalar_list = -1) {
    const LoweringFn* fn = r.find("aten::" + target);
    if (!fn) return;
    r.add("aten::_foreach_" + op, foreach(*fn, scalar_list));
    if (r.omits_unit_scales("aten::" + target)) r.omit_unit_scales("aten::_foreach_" + op);
  };
  // Binary arithmetic: List, Scalar, ScalarList and (0-d) Tensor overloads.
  for (const char* op : {"add", "sub", "mul", "div"}) {
    std::string t = std::string(op) + ".Tensor";
    add(std::string(op) + ".List", t);
    add(std::string(op) + ".Scalar", t);
    add(std::string(op) + ".ScalarList", t, 1);
    if (std::string(op) != "sub") add(std::string(op) + ".Tensor", t);
  }
  for (const char* op : {"maximum", "minimum"}) {
    add(std::string(op) + ".List", op);
    add(std::string(op) + ".Scalar", op);
    add(std::string(op) + ".ScalarList", op, 1);
  }
  for (const char* op : {"clamp_min", "clamp_max"}) {
    add(std::string(op) + ".List", std::string(op) + ".Tensor");
    add(std::string(op) + ".Scalar", op);
    add(std::string(op) + ".ScalarList", op, 1);
  }
  add("pow.List", "pow.Tensor_Tensor");
  add("pow.Scalar", "pow.Tensor_Scalar");
  add("pow.ScalarList", "pow.Tensor_Scalar", 1);
  add("addcmul.Scalar", "addcmul");
  add("addcmul.ScalarList", "addcmul", 3);
  add("addcdiv.Scalar", "addcdiv");
  add("addcdiv.ScalarList", "addcdiv", 3);
  add("lerp.List", "lerp.Tensor");
  add("lerp.Scalar", "lerp.Scalar");
  add("lerp.ScalarList", "lerp.Scalar", 2);
  for (const char* op : {"abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc",
                         "exp", "expm1", "floor", "frac", "lgamma", "log", "log10", "log1p",
                         "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign",
                         "sin", "sinh", "sqrt", "tan", "tanh", "trunc"})
    add(op, op);
  if (const LoweringFn* norm = r.find("aten::linalg_vector_norm"))
    r.add("aten::_foreach_norm.Scalar", foreach_norm(*norm));
  r.add("aten::_foreach_zero", foreach_zero);
  r.add("aten::_foreach_copy", foreach_copy);
}

// ---- complex numbers ------------------------------------------------------------

// angle: atan2(imag, real) for complex; π for negative reals, 0 otherwise,
// NaN kept.
Values angle(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a[0].tensor;
  if (hlo::is_complex(x.dtype()))
    return {b.convert(b.atan2(imag_part(b, x), real_part(b, x)), c.out().dtype)};
  Value f = b.convert(x, accumulation_type(c.out().dtype));
  Value r = b.select(lt(b, f, 0), splat_like(b, M_PI, f), splat_like(b, 0, f));
  return result(c, b.select(is_nan(b, f), f, r));
}

Values complex_(Context& c, const Args& a) {
  TensorType pt{part_type(c.out().dtype), c.out().shape};
  return {make_complex(c.b, coerce(c.b, a[0].tensor, pt), coerce(c.b, a[1].tensor, pt), c.out())};
}

Values polar(Context& c, const Args& a) {
  Builder& b = c.b;
  TensorType pt{part_type(c.out().dtype), c.out().shape};
  Value r = coerce(b, a[0].tensor, pt), th = coerce(b, a[1].tensor, pt);
  Value re = b.mul(r, b.unary("stablehlo.cosine", th)), im = b.mul(r, b.unary("stablehlo.sine", th));
  return {make_complex(b, re, im, c.out())};
}

}  // namespace

void register_pointwise_extra(Registry& r) {
  r.add("aten::isinf", classify(0));
  r.add("aten::isposinf", classify(INFINITY));
  r.add("aten::isneginf", classify(-INFINITY));
  r.add("aten::signbit", signbit);
  r.add("aten::nan_to_num", nan_to_num);
  r.add("aten::logit", logit);
  r.add("aten::logit_backward", logit_backward);
  r.add("aten::heaviside", heaviside);
  r.add("aten::nextafter", nextafter);
  r.add("aten::gcd", gcd);
  r.add("aten::lcm", lcm);
  for (const char* op : {"aten::bitwise_left_shift.Tensor", "aten::bitwise_left_shift.Tensor_Scalar",
                         "aten::bitwise_left_shift.Scalar_Tensor", "aten::__lshift__.Tensor",
                         "aten::__lshift__.Scalar"})
    r.add(op, shift(true));
  for (const char* op : {"aten::bitwise_right_shift.Tensor", "aten::bitwise_right_shift.Tensor_Scalar",
                         "aten::bitwise_right_shift.Scalar_Tensor", "aten::__rshift__.Tensor",
                         "aten::__rshift__.Scalar"})
    r.add(op, shift(false));
  r.add("aten::logaddexp2", logaddexp2);
  r.add("aten::ldexp.Tensor", ldexp);
  r.add("aten::frexp.Tensor", frexp);
  r.add("aten::round.decimals", round_decimals);
  for (const char* op : {"aten::special_xlog1py", "aten::special_xlog1py.self_scalar",
                         "aten::special_xlog1py.other_scalar"})
    r.add(op, xlog1py);
  r.add("aten::special_entr", entr);
  r.add("aten::angle", angle);
  r.add("aten::complex", complex_);
  r.add("aten::polar", polar);
  register_foreach(r);
}

}  // namespace torch_tpu::lowering
