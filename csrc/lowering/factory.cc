// Factories: fill, zero, arange, linspace, logspace, eye, scalar_tensor.
// PyTorch's composite factories (zeros, ones, full, *_like, arange.start_step,
// …) decompose into `empty` plus one of these in-place or out= ops, so these
// are all a backend needs. Values follow CPU's kernels: the same formula in
// the same accumulation type, so results match element for element.
#include "helpers.h"

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;

// The type CPU's range kernels accumulate in (at::acc_type<T, /*cuda=*/false>):
// integers in i64, floats one size up (f32 → f64, 16-bit floats → f32).
ElementType range_acc_type(ElementType t) {
  switch (category(t)) {
    case Category::kBool:
    case Category::kInt: return ElementType::kI64;
    case Category::kFloat: return t == ElementType::kF32 || t == ElementType::kF64
                                      ? ElementType::kF64 : ElementType::kF32;
    default: throw Unsupported(std::string("range factories for ") + hlo::mlir_name(t));
  }
}

// i as a vector of `n` values of `dtype`.
Value index_vector(Builder& b, int64_t n, ElementType dtype) {
  return b.convert(b.iota(TensorType{ElementType::kI64, {n}}, 0), dtype);
}

Value scalar_as(Builder& b, const Arg& a, ElementType dtype, const std::vector<int64_t>& shape) {
  return coerce(b, a.tensor, dtype, shape);
}

Values fill(Context& c, const Args& a) { return {coerce(c.b, a[1].tensor, c.out())}; }

Values zero(Context& c, const Args&) { return {c.b.zeros(c.out())}; }

// a * x + c as CPU's kernels compute it: compiled to a fused multiply-add
// (one rounding) for f32/f64, op by op for 16-bit floats (c10::Half
// arithmetic rounds each step), exactly for integers. `x` holds indices
// (small integers). XLA fuses or not as it likes, so the single rounding is
// made explicit: in f64 the product of a float and an index is exact for f32,
// and for f64 `a` splits into a 26-bit head and a tail whose products with
// x < 2^26 are both exact; the sum is then rounded once (TwoSum).
Value axpy(Builder& b, Value a, Value x, Value c) {
  ElementType t = a.dtype();
  const ElementType f64 = ElementType::kF64;
  if (t != ElementType::kF32 && t != f64) return b.add(b.mul(a, x), c);
  if (t == ElementType::kF32) {
    Value r = b.add(b.mul(b.convert(a, f64), b.convert(x, f64)), b.convert(c, f64));
    return b.convert(r, t);
  }
  TensorType bits{ElementType::kU64, a.shape()};
  Value mask = b.broadcast_to(b.constant_bits(ElementType::kU64, ~uint64_t{0} << 27), a.shape());
  Value head = b.bitcast_convert(b.and_(b.bitcast_convert(a, bits), mask), a.type());
  Value p = b.mul(head, x);
  Value s = b.add(c, p);
  Value pp = b.sub(s, c);
  Value err = b.add(b.sub(c, b.sub(s, pp)), b.sub(p, pp));
  return b.add(s, b.add(err, b.mul(b.sub(a, head), x)));
}

// arange.start_out(start, end, step, out): out[i] = start + step * i in the
// accumulation type (CPU's arange kernel), then rounded to the result.
Values arange(Context& c, const Args& a) {
  const TensorType& t = c.out();
  ElementType acc = range_acc_type(t.dtype);
  Value start = scalar_as(c.b, a[0], acc, t.shape);
  Value step = scalar_as(c.b, a[2], acc, t.shape);
  Value i = index_vector(c.b, t.shape.at(0), acc);
  return {c.b.convert(axpy(c.b, step, i, start), t.dtype)};
}

// `x / (steps - 1)`, correctly rounded like CPU's division: the barrier keeps
// the compiler from turning division by a constant into multiplication by
// its (inexact) reciprocal.
Value div_by_intervals(Builder& b, Value x, int64_t steps) {
  Value d = splat(b, static_cast<double>(steps - 1), x.dtype(), x.shape());
  d = b.op("stablehlo.optimization_barrier", {d}, {d.type()})[0];
  return b.div(x, d);
}

// CPU's two-sided interpolation: the first half counts up from `start`, the
// second half down from `end`, so both endpoints are exact.
Value two_sided(Builder& b, Value start, Value end, Value step, int64_t steps) {
  ElementType dt = start.dtype();
  Value i = index_vector(b, steps, dt);
  Value up = axpy(b, step, i, start);
  Value back = b.sub(splat(b, static_cast<double>(steps - 1), dt, {steps}), i);
  Value down = axpy(b, b.neg(step), back, end);
  Value first = b.compare(Compare::kLT, b.iota(TensorType{ElementType::kI64, {steps}}, 0),
                          splat(b, static_cast<double>(steps / 2), ElementType::kI64, {steps}));
  return b.select(first, up, down);
}

// A complex scalar argument's real and imaginary parts, each [steps] of the
// part's type.
std::pair<Value, Value> complex_parts(Builder& b, const Arg& a, ElementType complex,
                                      int64_t steps) {
  Value z = scalar_as(b, a, complex, {steps});
  return {real_part(b, z), imag_part(b, z)};
}

// The two-sided interpolation from `start` to `end` of a complex result, part
// by part (CPU's complex step has a zero imaginary divisor: each part is
// interpolated on its own).
Value complex_two_sided(Builder& b, const Arg& start, const Arg& end, ElementType complex,
                        int64_t steps) {
  auto [re0, im0] = complex_parts(b, start, complex, steps);
  auto [re1, im1] = complex_parts(b, end, complex, steps);
  auto part = [&](Value from, Value to) {
    return two_sided(b, from, to, div_by_intervals(b, b.sub(to, from), steps), steps);
  };
  return make_complex(b, part(re0, re1), part(im0, im1), TensorType{complex, {steps}});
}

// linspace.out(start, end, steps, out). CPU computes in the result type for
// floats and complex numbers and with a double step for integers (start/end
// rounded to the type first).
Values linspace(Context& c, const Args& a) {
  const TensorType& t = c.out();
  int64_t steps = a[2].i;
  if (steps == 0) return {c.b.zeros(t)};
  if (hlo::is_complex(t.dtype)) {
    if (steps == 1) return {scalar_as(c.b, a[0], t.dtype, {1})};
    return {complex_two_sided(c.b, a[0], a[1], t.dtype, steps)};
  }
  Value start = scalar_as(c.b, a[0], t.dtype, {steps});
  if (steps == 1) return {start};
  Value end = scalar_as(c.b, a[1], t.dtype, {steps});
  ElementType step_t = category(t.dtype) == Category::kFloat ? t.dtype : ElementType::kF64;
  start = c.b.convert(start, step_t);
  end = c.b.convert(end, step_t);
  Value step = div_by_intervals(c.b, c.b.sub(end, start), steps);
  return {c.b.convert(two_sided(c.b, start, end, step, steps), t.dtype)};
}

// logspace.out(start, end, steps, base, out): base ** e over CPU's two-sided
// exponents. CPU rounds start/end to the result type, subtracts them there
// (integers in i64), then takes the step, exponents and power in f64 (with a
// float base for integer results). One step is base ** start in f64, start
// unrounded (CPU fills pow(base, start.to<double>())).
Values logspace(Context& c, const Args& a) {
  const TensorType& t = c.out();
  int64_t steps = a[2].i;
  if (steps == 0) return {c.b.zeros(t)};
  if (hlo::is_complex(t.dtype)) {  // base ** e in the complex type, as CPU
    Value exponent = steps == 1 ? scalar_as(c.b, a[0], t.dtype, {1})
                                : complex_two_sided(c.b, a[0], a[1], t.dtype, steps);
    return {c.b.pow(splat(c.b, a[3].d, t.dtype, {steps}), exponent)};
  }
  bool integral = category(t.dtype) != Category::kFloat;
  const ElementType f64 = ElementType::kF64;
  if (steps == 1)
    return {c.b.convert(c.b.pow(splat(c.b, a[3].d, f64, {1}), scalar_as(c.b, a[0], f64, {1})), t.dtype)};
  ElementType sub_t = integral ? ElementType::kI64 : t.dtype;
  Value start_t = c.b.convert(scalar_as(c.b, a[0], t.dtype, {steps}), sub_t);
  Value start = c.b.convert(start_t, f64);
  double base = integral ? static_cast<double>(static_cast<float>(a[3].d)) : a[3].d;
  Value base_v = splat(c.b, base, f64, {steps});
  Value end_t = c.b.convert(scalar_as(c.b, a[1], t.dtype, {steps}), sub_t);
  Value end = c.b.convert(end_t, f64);
  Value step = div_by_intervals(c.b, c.b.convert(c.b.sub(end_t, start_t), f64), steps);
  Value exponent = two_sided(c.b, start, end, step, steps);
  return {c.b.convert(c.b.pow(base_v, exponent), t.dtype)};
}

// eye.out(n, out) / eye.m_out(n, m, out): ones where row == column.
Values eye(Context& c, const Args&) {
  const TensorType& t = c.out();
  TensorType idx{ElementType::kI64, t.shape};
  Value diag = c.b.compare(Compare::kEQ, c.b.iota(idx, 0), c.b.iota(idx, 1));
  return {c.b.convert(diag, t.dtype)};
}

Values scalar_tensor(Context& c, const Args& a) { return {coerce(c.b, a[0].tensor, c.out())}; }

// _efficientzerotensor (size, dtype?, ...): autograd's zero gradients (sgn,
// fft). CPU gives a lazily-zero ZeroTensor; here an ordinary zeros tensor.
Values zeros(Context& c, const Args&) { return {c.b.zeros(c.out())}; }

}  // namespace

void register_factory(Registry& r) {
  r.add("aten::fill.Scalar", fill);
  r.add("aten::fill.Tensor", fill);
  r.add("aten::zero", zero);
  // The functional range factories carry dtype/device arguments the out=
  // forms lack, so the out= forms are lowered themselves.
  r.add("aten::arange.start_out", arange);
  r.add("aten::linspace.out", linspace);
  r.add("aten::logspace.out", logspace);
  r.add("aten::eye.out", eye);
  r.add("aten::eye.m_out", eye);
  r.add("aten::scalar_tensor", scalar_tensor);
  r.add("aten::_efficientzerotensor", zeros);
}

}  // namespace torch_tpu::lowering
