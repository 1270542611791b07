// On-device random numbers. A generator argument arrives as two u64 program
// inputs (seed, offset); the bits come from a counter-based generator keyed by
// both, so a new seed or offset is a new input value, never a new program.
// Distributions are built from those bits: uniforms from the top mantissa
// bits, normals by Box-Muller, integers by modulo, permutations and
// multinomial draws by sorting random keys.
#include <cmath>
#include <limits>

#include "helpers.h"

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;
constexpr ElementType kU64 = ElementType::kU64;

// Argument checks PyTorch's meta functions leave to the kernels; the messages
// are CPU's.
void require(bool ok, const std::string& message) {
  if (!ok) throw InvalidArgument(message);
}

std::string num(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s;
}

// ---- bits ------------------------------------------------------------------

// Each draw gets its own THREE_FRY key, itself THREE_FRY of (seed, offset):
// streams of different draws never overlap, however many words a draw takes
// per value (the generator's offset advances by values, not words).
Value draw_state(Builder& b, const Arg& gen) {
  if (gen.kind != Arg::kGenerator || gen.tensors.size() != 2)
    throw Unsupported("a random op needs a generator (seed, offset)");
  Value seed_offset = b.concatenate({b.reshape(gen.tensors[0], {1}),
                                     b.reshape(gen.tensors[1], {1})}, 0);
  Value key = b.rng_bit_generator(seed_offset, TensorType{kU64, {1}}, "THREE_FRY")[1];
  return b.concatenate({key, b.reshape(b.constant_bits(kU64, 0), {1})}, 0);
}

// `count` independent arrays of random u64 words of `shape`.
Values words(Builder& b, const Arg& gen, const std::vector<int64_t>& shape, int64_t count = 1) {
  std::vector<int64_t> all = shape;
  all.insert(all.begin(), count);
  Value bits = b.rng_bit_generator(draw_state(b, gen), TensorType{kU64, all}, "THREE_FRY")[1];
  Values out;
  std::vector<int64_t> start(all.size(), 0), limit = all;
  for (int64_t i = 0; i < count; ++i) {
    start[0] = i;
    limit[0] = i + 1;
    out.push_back(b.reshape(b.slice(bits, start, limit), shape));
  }
  return out;
}

// ---- uniforms ----------------------------------------------------------------

int mantissa_digits(ElementType t) {
  switch (t) {
    case ElementType::kF64: return 53;
    case ElementType::kF16: return 11;
    case ElementType::kBF16: return 8;
    default: return 24;
  }
}

// Transforms run in f32, or f64 for f64 results (and f64 probabilities).
ElementType compute_type(ElementType t) {
  return t == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
}

// Uniform on [0, 1) in type `ct` with `digits` random bits: k * 2^-digits,
// exactly representable, so never 1.
Value unit(Builder& b, Value bits, int digits, ElementType ct) {
  Value top = b.shift_right_logical(bits, splat_like(b, 64 - digits, bits));
  Value u = b.convert(top, ct);
  return b.mul(u, splat_like(b, std::ldexp(1.0, -digits), u));
}

// `count` uniforms on [0, 1) at the compute type's full precision.
Values uniforms(Builder& b, const Arg& gen, const TensorType& t, int64_t count = 1) {
  ElementType ct = compute_type(t.dtype);
  Values out;
  for (Value w : words(b, gen, t.shape, count)) out.push_back(unit(b, w, mantissa_digits(ct), ct));
  return out;
}

// Uniform on (0, 1]: safe under log.
Value open_low(Builder& b, Value u) { return b.sub(splat_like(b, 1.0, u), u); }

// Standard normals by Box-Muller, in the compute type.
Value std_normal(Builder& b, const Arg& gen, const TensorType& t) {
  Values u = uniforms(b, gen, t, 2);
  Value radius = b.sqrt(b.mul(splat_like(b, -2.0, u[0]), b.log(open_low(b, u[0]))));
  Value angle = b.mul(u[1], splat_like(b, 2 * M_PI, u[1]));
  return b.mul(radius, b.unary("stablehlo.cosine", angle));
}

// ---- continuous distributions -------------------------------------------------

// uniform(self, from, to, generator).
Values uniform(Context& c, const Args& a) {
  const TensorType& t = c.out();
  double from = a[1].d, to = a[2].d;
  require(hlo::is_float(t.dtype), std::string("\"check_uniform_bounds\" not implemented for ") +
                                      hlo::mlir_name(t.dtype));
  require(from <= to, "uniform_ expects to return a [from, to) range, but found from=" +
                          num(from) + " > to=" + num(to));
  ElementType ct = compute_type(t.dtype);
  // Only as many bits as the result type holds, so u < 1 survives rounding.
  Value u = unit(c.b, words(c.b, a[3], t.shape)[0], mantissa_digits(t.dtype), ct);
  Value r = c.b.add(c.b.mul(u, splat_like(c.b, to - from, u)), splat_like(c.b, from, u));
  r = c.b.convert(r, t.dtype);
  // A wide range can still round up to `to` in a narrow type: fold it back.
  Value at_top = c.b.compare(Compare::kGE, r, splat_like(c.b, to, r));
  return {c.b.select(at_top, splat_like(c.b, from, r), r)};
}

// mean + std * N(0, 1), with mean and std broadcast to the result.
Value scaled_normal(Context& c, const Arg& gen, Value mean, Value std) {
  const TensorType& t = c.out();
  Value z = std_normal(c.b, gen, t);
  mean = coerce(c.b, mean, z.type());
  std = coerce(c.b, std, z.type());
  return c.b.convert(c.b.add(mean, c.b.mul(std, z)), t.dtype);
}

Value constant_of(Builder& b, double v, ElementType t) { return b.constant(compute_type(t), v); }

// normal_functional / normal_(self, mean, std, generator).
Values normal_fill(Context& c, const Args& a) {
  ElementType t = c.out().dtype;
  return {scaled_normal(c, a[3], constant_of(c.b, a[1].d, t), constant_of(c.b, a[2].d, t))};
}
Values normal_tensor_float(Context& c, const Args& a) {
  return {scaled_normal(c, a[2], a[0].tensor, constant_of(c.b, a[1].d, c.out().dtype))};
}
Values normal_float_tensor(Context& c, const Args& a) {
  return {scaled_normal(c, a[2], constant_of(c.b, a[0].d, c.out().dtype), a[1].tensor)};
}
Values normal_tensor_tensor(Context& c, const Args& a) {
  return {scaled_normal(c, a[2], a[0].tensor, a[1].tensor)};
}

// log_normal(self, mean, std, generator): exp of a normal.
Values log_normal(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Value z = std_normal(c.b, a[3], t);
  Value x = c.b.add(splat_like(c.b, a[1].d, z), c.b.mul(splat_like(c.b, a[2].d, z), z));
  return {c.b.convert(c.b.exp(x), t.dtype)};
}

// exponential(self, lambd, generator): -log(1 - u) / lambd.
Values exponential(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Value v = open_low(c.b, uniforms(c.b, a[2], t)[0]);
  Value x = c.b.div(c.b.neg(c.b.log(v)), splat_like(c.b, a[1].d, v));
  return {c.b.convert(x, t.dtype)};
}

// geometric(self, p, generator): trials until the first success, >= 1.
Values geometric(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Value v = open_low(c.b, uniforms(c.b, a[2], t)[0]);
  Value x = c.b.ceil(c.b.div(c.b.log(v), splat_like(c.b, std::log1p(-a[1].d), v)));
  return {c.b.convert(c.b.max(x, splat_like(c.b, 1.0, x)), t.dtype)};
}

// cauchy(self, median, sigma, generator): median + sigma * tan(pi (u - 1/2)).
Values cauchy(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Value u = uniforms(c.b, a[3], t)[0];
  Value angle = c.b.mul(c.b.sub(u, splat_like(c.b, 0.5, u)), splat_like(c.b, M_PI, u));
  Value x = c.b.add(splat_like(c.b, a[1].d, u),
                    c.b.mul(splat_like(c.b, a[2].d, u), c.b.unary("stablehlo.tan", angle)));
  return {c.b.convert(x, t.dtype)};
}

// ---- discrete distributions ------------------------------------------------------

// u < p as the result type; p is broadcast to the result.
Value bernoulli_of(Context& c, const Arg& gen, Value p) {
  const TensorType& t = c.out();
  Value u = uniforms(c.b, gen, t)[0];
  Value hit = c.b.compare(Compare::kLT, u, coerce(c.b, p, u.type()));
  return c.b.convert(hit, t.dtype);
}

// bernoulli(self, generator): self holds the probabilities.
Values bernoulli_self(Context& c, const Args& a) { return {bernoulli_of(c, a[1], a[0].tensor)}; }
// bernoulli.p / bernoulli_.float(self, p, generator).
Values bernoulli_float(Context& c, const Args& a) {
  require(a[1].d >= 0 && a[1].d <= 1,
          "bernoulli_ expects p to be in [0, 1], but got p=" + num(a[1].d));
  return {bernoulli_of(c, a[2], constant_of(c.b, a[1].d, c.out().dtype))};
}
// bernoulli.Tensor(self, p, generator).
Values bernoulli_tensor(Context& c, const Args& a) { return {bernoulli_of(c, a[2], a[1].tensor)}; }

// from + bits mod range (range 0 means all 2^64 values), as the result type.
Value integers(Context& c, const Arg& gen, int64_t from, uint64_t range) {
  const TensorType& t = c.out();
  Value bits = words(c.b, gen, t.shape)[0];
  if (range != 0) bits = c.b.rem(bits, c.b.broadcast_to(c.b.constant_bits(kU64, range), t.shape));
  Value v = c.b.add(bits, c.b.broadcast_to(c.b.constant_bits(kU64, static_cast<uint64_t>(from)),
                                           t.shape));
  Value signed_v = c.b.bitcast_convert(v, TensorType{ElementType::kI64, t.shape});
  return c.b.convert(signed_v, t.dtype);
}

// The largest value random_ produces for a type without an explicit bound:
// 2^digits for floats (every integer below is exact), the maximum otherwise.
uint64_t random_top(ElementType t) {
  if (hlo::is_float(t)) return uint64_t{1} << mantissa_digits(t);
  if (t == ElementType::kI64) return static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  return static_cast<uint64_t>(highest(t));
}

// random(self, generator): [0, top].
Values random_full(Context& c, const Args& a) {
  return {integers(c, a[1], 0, random_top(c.out().dtype) + 1)};
}
// The smallest value random_ produces for a type: 0 for unsigned and bool.
int64_t random_bottom(ElementType t) {
  if (hlo::is_float(t)) return -static_cast<int64_t>(random_top(t));
  if (t == ElementType::kI64) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(lowest(t));
}

// [from, to) for an explicit bound, checked against the type like CPU.
Values random_between(Context& c, const Arg& gen, int64_t from, int64_t to) {
  ElementType t = c.out().dtype;
  require(from < to, "random_ expects 'from' to be less than 'to', but got from=" +
                         std::to_string(from) + " >= to=" + std::to_string(to));
  require(from >= random_bottom(t), "from is out of bounds for " + std::string(hlo::mlir_name(t)));
  require(to - 1 <= static_cast<int64_t>(std::min<uint64_t>(random_top(t), INT64_MAX)),
          "to - 1 is out of bounds for " + std::string(hlo::mlir_name(t)));
  return {integers(c, gen, from, static_cast<uint64_t>(to) - static_cast<uint64_t>(from))};
}

// random.to(self, to, generator): [0, to).
Values random_to(Context& c, const Args& a) { return random_between(c, a[2], 0, a[1].i); }

// random.from(self, from, to?, generator): [from, to), or [from, top].
Values random_from(Context& c, const Args& a) {
  int64_t from = a[1].i;
  ElementType t = c.out().dtype;
  if (!a[2].none()) return random_between(c, a[3], from, a[2].i);
  require(from >= random_bottom(t) && (from < 0 || static_cast<uint64_t>(from) <= random_top(t)),
          "from is out of bounds for " + std::string(hlo::mlir_name(t)));
  if (t == ElementType::kI64 && from == std::numeric_limits<int64_t>::min())
    return {integers(c, a[3], from, 0)};
  return {integers(c, a[3], from, random_top(t) - static_cast<uint64_t>(from) + 1)};
}

// ---- dropout ----------------------------------------------------------------------

// native_dropout(input, p, train?, generator): keeps each value with
// probability 1 - p and scales kept values by 1 / (1 - p) (0 when p == 1).
// The generator is the device default one, appended by the aten layer.
Values native_dropout(Context& c, const Args& a) {
  const TensorType& t = c.out(0);
  Value x = a[0].tensor;
  bool train = a[2].none() || a[2].b;
  require(a[1].d >= 0 && a[1].d <= 1,
          "dropout probability has to be between 0 and 1, but got " + num(a[1].d));
  if (!train) return {x, c.b.full(c.out(1), 1.0)};
  double keep = 1.0 - a[1].d;
  double scale = keep == 0 ? 0.0 : 1.0 / keep;
  Value u = uniforms(c.b, a[3], t)[0];
  Value mask = c.b.compare(Compare::kLT, u, splat_like(c.b, keep, u));
  Value scaled = c.b.mul(c.b.convert(x, u.dtype()), splat_like(c.b, scale, u));
  Value out = c.b.select(mask, scaled, splat_like(c.b, 0.0, u));
  return {c.b.convert(out, t.dtype), c.b.convert(mask, c.out(1).dtype)};
}

// native_dropout_backward(grad, mask, scale) = grad * mask * scale.
Values native_dropout_backward(Context& c, const Args& a) {
  const TensorType& t = c.out();
  ElementType ct = compute_type(t.dtype);
  Value g = c.b.convert(a[0].tensor, ct);
  Value mask = c.b.broadcast_to(c.b.convert(a[1].tensor, ct), t.shape);
  Value r = c.b.mul(c.b.mul(g, mask), splat(c.b, a[2].d, ct, t.shape));
  return {c.b.convert(r, t.dtype)};
}

// ---- permutations and sampling ---------------------------------------------------------

// Sorts `keys` along `dim` (descending if `descending`) carrying an index
// iota along; returns the sorted indices.
Value argsort_keys(Builder& b, Value keys, int64_t dim, bool descending) {
  Value idx = b.iota(TensorType{ElementType::kI64, keys.shape()}, dim);
  Compare dir = descending ? Compare::kGT : Compare::kLT;
  return b.sort({keys, idx}, dim, true, [dir](Builder& b, const Values& v) {
    return Values{b.compare(dir, v[0], v[1])};
  })[1];
}

// randperm.generator_out(n, generator, out): indices sorted by random keys.
Values randperm(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Value keys = words(c.b, a[1], t.shape)[0];
  return {c.b.convert(argsort_keys(c.b, keys, 0, false), t.dtype)};
}

// Without replacement: the categories with the `s` largest log(v) / p keys
// (an exponential race; zero-probability categories get -inf).
Value sample_without_replacement(Builder& b, const Arg& gen, Value p, int64_t s) {
  TensorType kt{p.dtype(), p.shape()};
  Value v = open_low(b, uniforms(b, gen, kt)[0]);
  Value zero = splat_like(b, 0.0, p);
  Value keys = b.select(b.compare(Compare::kGT, p, zero), b.div(b.log(v), p),
                        splat_like(b, -INFINITY, p));
  Value order = argsort_keys(b, keys, p.rank() - 1, true);
  std::vector<int64_t> limit = p.shape();
  limit.back() = s;
  return b.slice(order, std::vector<int64_t>(p.rank(), 0), limit);
}

// Running sum along the last dim of [rows, k].
Value cumsum_last(Builder& b, Value x) {
  int64_t k = x.shape().back();
  return b.reduce_window({x}, {b.constant(x.dtype(), 0)}, {1, k}, {1, 1}, {1, 1}, {1, 1},
                         {{0, 0}, {k - 1, 0}}, [](Builder& b, const Values& v) {
                           return Values{b.add(v[0], v[1])};
                         })[0];
}

// With replacement: inverse CDF, the number of prefix sums <= u * total.
Value sample_with_replacement(Builder& b, const Arg& gen, Value p, int64_t s) {
  int64_t rows = p.shape()[0], k = p.shape()[1];
  Value cdf = cumsum_last(b, p);
  Value total = b.slice(cdf, {0, k - 1}, {rows, k});  // [rows, 1]
  Value u = uniforms(b, gen, TensorType{p.dtype(), {rows, s}})[0];
  Value target = b.mul(u, b.broadcast_in_dim(b.reshape(total, {rows}), {rows, s}, {0}));
  Value below = b.compare(Compare::kLE, b.broadcast_in_dim(cdf, {rows, s, k}, {0, 2}),
                          b.broadcast_in_dim(target, {rows, s, k}, {0, 1}));
  Value count = reduce_sum(b, b.convert(below, ElementType::kI64), {2});
  return b.min(count, splat_like(b, static_cast<double>(k - 1), count));
}

// multinomial(self, num_samples, replacement, generator).
Values multinomial(Context& c, const Args& a) {
  const TensorType& t = c.out();
  Value p = a[0].tensor;
  int64_t k = p.shape().back(), rows = p.rank() == 2 ? p.shape()[0] : 1;
  p = c.b.reshape(c.b.convert(p, compute_type(p.dtype())), {rows, k});
  int64_t s = a[1].i;
  require(a[2].b || s <= k,
          "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  Value idx = a[2].b ? sample_with_replacement(c.b, a[3], p, s)
                     : sample_without_replacement(c.b, a[3], p, s);
  return {c.b.convert(c.b.reshape(idx, t.shape), t.dtype)};
}

// Empty results draw nothing (and rng_bit_generator needs no empty shapes).
LoweringFn nonempty(LoweringFn fn) {
  return [fn](Context& c, const Args& a) {
    for (const TensorType& t : c.outputs)
      if (t.numel() == 0) {
        Values out;
        for (const TensorType& o : c.outputs) out.push_back(c.b.zeros(o));
        return out;
      }
    return fn(c, a);
  };
}

}  // namespace

void register_random(Registry& r) {
  // In-place forms (uniform_, exponential_, …) derive from these functionals;
  // normal_ and bernoulli_.float have no same-argument functional, so they are
  // lowered directly.
  const std::pair<const char*, LoweringFn> ops[] = {
      {"aten::uniform", uniform},
      {"aten::normal_functional", normal_fill}, {"aten::normal_", normal_fill},
      {"aten::normal.Tensor_float", normal_tensor_float},
      {"aten::normal.float_Tensor", normal_float_tensor},
      {"aten::normal.Tensor_Tensor", normal_tensor_tensor},
      {"aten::log_normal", log_normal}, {"aten::exponential", exponential},
      {"aten::geometric", geometric}, {"aten::cauchy", cauchy},
      {"aten::bernoulli", bernoulli_self}, {"aten::bernoulli.p", bernoulli_float},
      {"aten::bernoulli_.float", bernoulli_float}, {"aten::bernoulli.Tensor", bernoulli_tensor},
      {"aten::random", random_full}, {"aten::random.to", random_to},
      {"aten::random.from", random_from},
      {"aten::native_dropout", native_dropout},
      {"aten::randperm.generator_out", randperm}, {"aten::multinomial", multinomial},
  };
  for (const auto& [name, fn] : ops) r.add(name, nonempty(fn));
  r.add("aten::native_dropout_backward", native_dropout_backward);
}

}  // namespace torch_tpu::lowering
