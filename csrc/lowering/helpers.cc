#include "helpers.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace torch_tpu::lowering {

Category category(ElementType t) {
  if (t == ElementType::kPred) return Category::kBool;
  if (hlo::is_complex(t)) return Category::kComplex;
  if (hlo::is_float(t)) return Category::kFloat;
  return Category::kInt;
}

namespace {
// Index into the promotion lattice table below.
int lattice_index(ElementType t) {
  switch (t) {
    case ElementType::kU8: return 0;
    case ElementType::kI8: return 1;
    case ElementType::kI16: return 2;
    case ElementType::kI32: return 3;
    case ElementType::kI64: return 4;
    case ElementType::kF16: return 5;
    case ElementType::kF32: return 6;
    case ElementType::kF64: return 7;
    case ElementType::kC64: return 8;
    case ElementType::kC128: return 9;
    case ElementType::kPred: return 10;
    case ElementType::kBF16: return 11;
    default: return -1;
  }
}
}  // namespace

ElementType promote_types(ElementType a, ElementType b) {
  if (a == b) return a;
  using E = ElementType;
  // Rows/columns: u8 i8 i16 i32 i64 f16 f32 f64 c64 c128 b1 bf16 (torch's table).
  static const E table[12][12] = {
      /* u8 */ {E::kU8, E::kI16, E::kI16, E::kI32, E::kI64, E::kF16, E::kF32, E::kF64, E::kC64, E::kC128, E::kU8, E::kBF16},
      /* i8 */ {E::kI16, E::kI8, E::kI16, E::kI32, E::kI64, E::kF16, E::kF32, E::kF64, E::kC64, E::kC128, E::kI8, E::kBF16},
      /* i16 */ {E::kI16, E::kI16, E::kI16, E::kI32, E::kI64, E::kF16, E::kF32, E::kF64, E::kC64, E::kC128, E::kI16, E::kBF16},
      /* i32 */ {E::kI32, E::kI32, E::kI32, E::kI32, E::kI64, E::kF16, E::kF32, E::kF64, E::kC64, E::kC128, E::kI32, E::kBF16},
      /* i64 */ {E::kI64, E::kI64, E::kI64, E::kI64, E::kI64, E::kF16, E::kF32, E::kF64, E::kC64, E::kC128, E::kI64, E::kBF16},
      /* f16 */ {E::kF16, E::kF16, E::kF16, E::kF16, E::kF16, E::kF16, E::kF32, E::kF64, E::kC64, E::kC128, E::kF16, E::kF32},
      /* f32 */ {E::kF32, E::kF32, E::kF32, E::kF32, E::kF32, E::kF32, E::kF32, E::kF64, E::kC64, E::kC128, E::kF32, E::kF32},
      /* f64 */ {E::kF64, E::kF64, E::kF64, E::kF64, E::kF64, E::kF64, E::kF64, E::kF64, E::kC128, E::kC128, E::kF64, E::kF64},
      /* c64 */ {E::kC64, E::kC64, E::kC64, E::kC64, E::kC64, E::kC64, E::kC64, E::kC128, E::kC64, E::kC128, E::kC64, E::kC64},
      /* c128 */ {E::kC128, E::kC128, E::kC128, E::kC128, E::kC128, E::kC128, E::kC128, E::kC128, E::kC128, E::kC128, E::kC128, E::kC128},
      /* b1 */ {E::kU8, E::kI8, E::kI16, E::kI32, E::kI64, E::kF16, E::kF32, E::kF64, E::kC64, E::kC128, E::kPred, E::kBF16},
      /* bf16 */ {E::kBF16, E::kBF16, E::kBF16, E::kBF16, E::kBF16, E::kF32, E::kF32, E::kF64, E::kC64, E::kC128, E::kBF16, E::kBF16},
  };
  int i = lattice_index(a), j = lattice_index(b);
  if (i < 0 || j < 0) throw Unsupported(std::string("type promotion of ") + hlo::mlir_name(a) +
                                        " and " + hlo::mlir_name(b));
  return table[i][j];
}

ElementType result_type(const Args& args, std::initializer_list<size_t> indices) {
  std::optional<ElementType> tiers[3];  // dim>0, 0-dim, python scalar
  for (size_t i : indices) {
    const Arg& a = args.at(i);
    if (a.kind != Arg::kTensor) continue;
    ElementType t = a.tensor.dtype();
    int tier = a.scalar ? 2 : (a.tensor.rank() == 0 ? 1 : 0);
    if (a.scalar) {  // python numbers take the default type of their category
      switch (category(t)) {
        case Category::kBool: t = ElementType::kPred; break;
        case Category::kInt: t = ElementType::kI64; break;
        case Category::kFloat: t = ElementType::kF32; break;
        case Category::kComplex: t = ElementType::kC64; break;
      }
    }
    tiers[tier] = tiers[tier] ? promote_types(*tiers[tier], t) : t;
  }
  std::optional<ElementType> result;
  for (auto& tier : tiers) {
    if (!tier) continue;
    if (!result) result = tier;
    else if (category(*tier) > category(*result)) result = promote_types(*result, *tier);
  }
  if (!result) throw Unsupported("result_type: no tensor arguments");
  return *result;
}

std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a,
                                      const std::vector<int64_t>& b) {
  size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) throw Unsupported("shapes do not broadcast");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

Value coerce(Builder& b, Value v, ElementType dtype, const std::vector<int64_t>& shape) {
  return b.broadcast_to(b.convert(v, dtype), shape);
}

int64_t wrap_dim(int64_t dim, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r)
    throw InvalidArgument("Dimension out of range (expected to be in range of [" +
                          std::to_string(-r) + ", " + std::to_string(r - 1) + "], but got " +
                          std::to_string(dim) + ")");
  return dim < 0 ? dim + r : dim;
}

std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t d : dims) out.push_back(wrap_dim(d, rank));
  return out;
}

Value splat(Builder& b, double value, ElementType dtype, const std::vector<int64_t>& shape) {
  return b.broadcast_in_dim(b.constant(dtype, value), shape, {});
}

double lowest(ElementType t) {
  switch (t) {
    case ElementType::kPred: return 0;
    case ElementType::kI8: return -128;
    case ElementType::kI16: return -32768;
    case ElementType::kI32: return -2147483648.0;
    case ElementType::kI64: return static_cast<double>(std::numeric_limits<int64_t>::min());
    case ElementType::kU8: case ElementType::kU16: case ElementType::kU32: case ElementType::kU64:
      return 0;
    default: return -std::numeric_limits<double>::infinity();
  }
}

double highest(ElementType t) {
  switch (t) {
    case ElementType::kPred: return 1;
    case ElementType::kI8: return 127;
    case ElementType::kI16: return 32767;
    case ElementType::kI32: return 2147483647.0;
    case ElementType::kI64: return 9223372036854775807.0;
    case ElementType::kU8: return 255;
    case ElementType::kU16: return 65535;
    case ElementType::kU32: return 4294967295.0;
    case ElementType::kU64: return 18446744073709551615.0;
    default: return std::numeric_limits<double>::infinity();
  }
}

namespace {
Value monoid(Builder& b, Value x, const std::vector<int64_t>& dims, Value init,
             Value (Builder::*op)(Value, Value)) {
  if (dims.empty()) return x;
  return b.reduce({x}, {init}, dims, [op](Builder& b, const Values& a) {
    return Values{(b.*op)(a[0], a[1])};
  })[0];
}
// Integer extremes as exact constants (doubles cannot hold int64 limits).
Value extreme(Builder& b, ElementType t, bool low) {
  if (t == ElementType::kI64)
    return b.constant_int(t, low ? std::numeric_limits<int64_t>::min()
                                 : std::numeric_limits<int64_t>::max());
  if (t == ElementType::kU64)
    return b.constant_bits(t, low ? 0 : ~uint64_t{0});
  return b.constant(t, low ? lowest(t) : highest(t));
}
}  // namespace

namespace {
// A float sum over the leading dims (the kept dims minor, as in bias and
// norm-weight gradients) as a dot with a ones vector: XLA:CPU emits such a
// column reduction one output at a time with strided loads (a [512, 512]
// bias gradient took ~12% of a GPT train step), a dot runs as a gemm.
bool column_sum_by_dot(Value x, const std::vector<int64_t>& dims) {
  if (x.dtype() != ElementType::kF32 && x.dtype() != ElementType::kF64) return false;
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != static_cast<int64_t>(i)) return false;
  int64_t rows = 1, cols = 1;
  for (int64_t i = 0; i < x.rank(); ++i) (i < static_cast<int64_t>(dims.size()) ? rows : cols) *= x.dim(i);
  return rows >= 64 && cols >= 16 && rows * cols >= 16384;  // small ones fuse cheaply
}
Value column_sum(Builder& b, Value x, size_t lead) {
  std::vector<int64_t> kept(x.shape().begin() + lead, x.shape().end());
  int64_t cols = 1;
  for (int64_t d : kept) cols *= d;
  Value m = b.reshape(x, {x.type().numel() / cols, cols});
  // Two rows of ones, not one: XLA:CPU fuses a vector-matrix dot with its
  // producers into a loop fusion that strides again; a matrix-matrix dot
  // runs as a real gemm.
  Value ones = b.broadcast_in_dim(b.constant(x.dtype(), 1), {2, m.dim(0)}, {});
  // HIGHEST: a sum, not a matmul the user asked for; on a TPU, DEFAULT would
  // round the summands to bf16.
  Value both = b.dot_general(ones, m, {}, {}, {1}, {0}, x.dtype(), "HIGHEST");
  return b.reshape(b.slice(both, {0, 0}, {1, cols}), kept);
}
}  // namespace

Value reduce_sum(Builder& b, Value x, const std::vector<int64_t>& dims) {
  if (column_sum_by_dot(x, dims)) return column_sum(b, x, dims.size());
  if (x.dtype() == ElementType::kPred) {
    return monoid(b, x, dims, b.constant(x.dtype(), 0), &Builder::or_);
  }
  return monoid(b, x, dims, b.constant(x.dtype(), 0), &Builder::add);
}
Value reduce_max(Builder& b, Value x, const std::vector<int64_t>& dims) {
  return monoid(b, x, dims, extreme(b, x.dtype(), true), &Builder::max);
}
Value reduce_min(Builder& b, Value x, const std::vector<int64_t>& dims) {
  return monoid(b, x, dims, extreme(b, x.dtype(), false), &Builder::min);
}

void check_all(Builder& b, Value ok, std::string message, bool index_error) {
  if (!b.checks_enabled() || TensorType{ElementType::kPred, ok.shape()}.numel() == 0) return;
  Value bad = b.not_(ok);
  std::vector<int64_t> dims(ok.rank());
  for (int64_t d = 0; d < ok.rank(); ++d) dims[d] = d;
  b.check(ok.rank() == 0 ? bad : reduce_sum(b, bad, dims), std::move(message), index_error);
}

void check_in_range(Builder& b, Value idx, int64_t lo, int64_t hi, std::string message,
                    std::optional<int64_t> except, bool index_error) {
  if (!b.checks_enabled()) return;
  Value i = b.convert(idx, ElementType::kI64);
  Value ok = b.and_(b.compare(hlo::Compare::kGE, i, splat_like(b, static_cast<double>(lo), i)),
                    b.compare(hlo::Compare::kLT, i, splat_like(b, static_cast<double>(hi), i)));
  if (except)
    ok = b.or_(ok, b.compare(hlo::Compare::kEQ, i, splat_like(b, static_cast<double>(*except), i)));
  check_all(b, ok, std::move(message), index_error);
}

Value keepdim(Builder& b, Value x, const std::vector<int64_t>& shape,
              const std::vector<int64_t>& dims) {
  std::vector<int64_t> kept = shape;
  for (int64_t d : dims) kept[d] = 1;
  return b.reshape(x, kept);
}

ElementType accumulation_type(ElementType t) {
  return (t == ElementType::kF16 || t == ElementType::kBF16) ? ElementType::kF32 : t;
}

ElementType part_type(ElementType complex) {
  return complex == ElementType::kC128 ? ElementType::kF64 : ElementType::kF32;
}
Value real_part(Builder& b, Value z) {
  return b.op("stablehlo.real", {z}, {TensorType{part_type(z.dtype()), z.shape()}})[0];
}
Value imag_part(Builder& b, Value z) {
  return b.op("stablehlo.imag", {z}, {TensorType{part_type(z.dtype()), z.shape()}})[0];
}
Value make_complex(Builder& b, Value re, Value im, const TensorType& t) {
  return b.op("stablehlo.complex", {re, im}, {t})[0];
}
Value resampled_to(Builder& b, Value y, ElementType out) {
  if (hlo::is_float(out) || hlo::is_complex(out) || !hlo::is_float(y.dtype())) return b.convert(y, out);
  int bits = hlo::bit_width(out);
  bool unsigned_out = hlo::is_unsigned(out);
  double lo = unsigned_out ? 0 : -std::ldexp(1.0, bits - 1);
  double hi = unsigned_out ? std::ldexp(1.0, bits) - 1 : std::ldexp(1.0, bits - 1) - 1;
  Value r = b.floor(b.add(y, splat_like(b, 0.5, y)));
  return b.convert(b.clamp(splat_like(b, lo, r), r, splat_like(b, hi, r)), out);
}

Value conj(Builder& b, Value z) {
  if (!hlo::is_complex(z.dtype())) return z;
  return make_complex(b, real_part(b, z), b.neg(imag_part(b, z)), z.type());
}
Value complex_log_add_exp(Builder& b, Value x, Value y) {
  using hlo::Compare;
  auto is_nan = [&b](Value v) { return b.compare(Compare::kNE, v, v); };
  Value xr = real_part(b, x), yr = real_part(b, y);
  Value nan = b.or_(b.or_(is_nan(xr), is_nan(imag_part(b, x))),
                    b.or_(is_nan(yr), is_nan(imag_part(b, y))));
  Value x_smaller = b.compare(Compare::kLT, xr, yr);
  Value n = b.select(x_smaller, x, y), m = b.select(x_smaller, y, x);
  Value nr = real_part(b, n);
  Value both_inf = b.and_(b.compare(Compare::kEQ, b.abs(nr), splat_like(b, INFINITY, nr)),
                          b.compare(Compare::kEQ, nr, real_part(b, m)));
  Value at_inf = b.select(b.compare(Compare::kLT, nr, splat_like(b, 0, nr)), n,
                          b.log(b.add(b.exp(n), b.exp(m))));
  // exp(-inf + i y) is 0 for every y (C99), where exp(re) * cis(y) gives NaN.
  Value d = b.sub(n, m), dr = real_part(b, d);
  Value e = b.select(b.compare(Compare::kEQ, dr, splat_like(b, -INFINITY, dr)), splat_like(b, 0, d),
                     b.exp(d));
  Value usual = b.add(b.unary("stablehlo.log_plus_one", e), m);
  Value nans = splat_like(b, NAN, xr);
  return b.select(nan, make_complex(b, nans, nans, x.type()), b.select(both_inf, at_inf, usual));
}

namespace {
// Argument `x` of a 16-bit op of result dtype `t` as CPU's kernel sees it.
Arg opmath_arg(Builder& b, Arg x, ElementType t, bool round_scalars) {
  if (x.kind == Arg::kTensor && (!x.scalar || round_scalars)) x.tensor = b.convert(x.tensor, t);
  return x;
}
}  // namespace

Value unfused(Builder& b, Value v) {
  return b.select(b.compare(hlo::Compare::kEQ, v, v), v, splat_like(b, NAN, v));
}

Value round_like(Builder& b, Value x, ElementType t) {
  if (t == ElementType::kBF16) return b.reduce_precision(x, 8, 7);
  if (t == ElementType::kF16 && x.dtype() == ElementType::kF32) {
    // XLA:CPU's reduce_precision flushes f16 subnormals (|x| < 2^-14) to
    // zero; there the values are the multiples of 2^-24, which adding and
    // taking off 0.75 (ulp 2^-24 in f32) rounds to, ties to even; a zero
    // keeps x's sign.
    Value c = splat_like(b, 0.75, x);
    Value sub = b.sub(unfused(b, b.add(x, c)), c);
    Value zero = splat_like(b, 0, x);
    sub = b.select(b.compare(hlo::Compare::kEQ, sub, zero), b.mul(x, zero), sub);
    Value tiny = b.compare(hlo::Compare::kLT, b.abs(x), splat_like(b, 0x1p-14, x));
    return b.select(tiny, sub, b.reduce_precision(x, 5, 10));
  }
  if (t == ElementType::kF16) return b.reduce_precision(x, 5, 10);
  return x;
}

LoweringFn opmath(LoweringFn f, bool round_scalars, bool wide_scalar_other) {
  return [f = std::move(f), round_scalars, wide_scalar_other](Context& c, const Args& a) -> Values {
    if (c.outputs.empty() || !is_half(c.out().dtype)) return f(c, a);
    std::vector<TensorType> wide(c.outputs.begin(), c.outputs.end());
    for (TensorType& t : wide) t.dtype = accumulation_type(t.dtype);
    Args args;
    for (const Arg& x : a) args.push_back(opmath_arg(c.b, x, c.out().dtype, round_scalars));
    if (wide_scalar_other && a.size() > 1 && a[1].kind == Arg::kTensor && !a[1].scalar &&
        a[1].tensor.rank() == 0)
      args[1].tensor = c.b.convert(a[1].tensor, wide.front().dtype);
    Context wc{c.b, wide, c.precision, c.op, c.target};
    Values r = f(wc, args);
    for (size_t i = 0; i < r.size() && i < c.outputs.size(); ++i)
      r[i] = c.b.convert(r[i], c.out(i).dtype);
    return r;
  };
}

}  // namespace torch_tpu::lowering
