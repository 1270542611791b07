// On-device random numbers. A generator argument arrives as two u64 program
// inputs (seed, offset); the bits come from a counter-based generator keyed by
// both, so a new seed or offset is a new input value, never a new program.
// Distributions are built from those bits: uniforms from the top mantissa
// bits, normals by Box-Muller, integers by modulo, permutations and
// multinomial draws by sorting random keys, gamma, Dirichlet and Poisson
// draws by rejection in a while loop.
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

// A standard normal by Box-Muller from two uniforms on [0, 1).
Value box_muller(Builder& b, Value u1, Value u2) {
  Value radius = b.sqrt(b.mul(splat_like(b, -2.0, u1), b.log(open_low(b, u1))));
  Value angle = b.mul(u2, splat_like(b, 2 * M_PI, u2));
  return b.mul(radius, b.unary("stablehlo.cosine", angle));
}

// Standard normals by Box-Muller, in the compute type.
Value std_normal(Builder& b, const Arg& gen, const TensorType& t) {
  Values u = uniforms(b, gen, t, 2);
  return box_muller(b, u[0], u[1]);
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
  // CPU's value checks, on the device (reported at the next host read).
  Value finite = c.b.and_(c.b.is_finite(p), c.b.compare(Compare::kGE, p, splat_like(c.b, 0, p)));
  check_all(c.b, finite, "probability tensor contains either `inf`, `nan` or element < 0",
            /*index_error=*/false);
  Value total = reduce_sum(c.b, p, {1});
  check_all(c.b, c.b.compare(Compare::kGT, total, splat_like(c.b, 0, total)),
            "invalid multinomial distribution (sum of probabilities <= 0)", /*index_error=*/false);
  Value idx = a[2].b ? sample_with_replacement(c.b, a[3], p, s)
                     : sample_without_replacement(c.b, a[3], p, s);
  return {c.b.convert(c.b.reshape(idx, t.shape), t.dtype)};
}

// ---- gamma and Dirichlet: rejection sampling -------------------------------------
//
// CPU's gamma sampler (Marsaglia and Tsang's acceptance-rejection; alpha < 1
// boosted to alpha + 1 and scaled by u^(1/alpha)) for every element at once:
// a while loop draws a normal and a uniform for every element per round (the
// generator state rides through the loop) and keeps the first accepted
// proposal; it ends when every element has accepted. An alpha that is
// negative, NaN or infinite would never accept: it gives NaN at once, so the
// loop always ends.

// A rejection loop's condition: some element (`done` false) still draws.
Values still_drawing(Builder& q, Value done) {
  std::vector<int64_t> dims(static_cast<size_t>(done.rank()));
  for (size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<int64_t>(i);
  Value all = q.reduce({done}, {q.constant_bits(ElementType::kPred, 1)}, dims,
                       [](Builder& r, const Values& x) { return Values{r.and_(x[0], x[1])}; })[0];
  return {q.not_(all)};
}

// One round's `count` uniforms on [0, 1) of `shape` in `ct` from the loop's
// generator state: {new state, uniforms...}.
Values round_uniforms(Builder& q, Value state, const std::vector<int64_t>& shape, int64_t count,
                      ElementType ct) {
  std::vector<int64_t> all{count};
  all.insert(all.end(), shape.begin(), shape.end());
  Values drawn = q.rng_bit_generator(state, TensorType{kU64, all}, "THREE_FRY");
  Values out{drawn[0]};
  std::vector<int64_t> start(all.size(), 0), limit = all;
  for (int64_t i = 0; i < count; ++i) {
    start[0] = i;
    limit[0] = i + 1;
    out.push_back(unit(q, q.reshape(q.slice(drawn[1], start, limit), shape),
                       mantissa_digits(ct), ct));
  }
  return out;
}

// Gamma(alpha, 1) samples of `alpha`'s shape, in alpha's (compute) type.
Value standard_gamma_of(Builder& b, const Arg& gen, Value alpha) {
  ElementType ct = alpha.dtype();
  const std::vector<int64_t>& shape = alpha.shape();
  const int digits = mantissa_digits(ct);
  auto full = [&](Builder& q, double v) { return q.full(TensorType{ct, shape}, v); };
  Values first = b.rng_bit_generator(draw_state(b, gen), TensorType{kU64, shape}, "THREE_FRY");
  Value boost_u = unit(b, first[1], digits, ct);
  Value small = b.compare(hlo::Compare::kLT, alpha, full(b, 1));
  Value scale = b.select(small, b.pow(open_low(b, boost_u), b.div(full(b, 1), alpha)), full(b, 1));
  Value a = b.select(small, b.add(alpha, full(b, 1)), alpha);
  Value d = b.sub(a, full(b, 1.0 / 3.0));
  Value c = b.div(full(b, 1), b.sqrt(b.mul(full(b, 9), d)));
  Value valid = b.and_(b.compare(hlo::Compare::kGE, alpha, full(b, 0)), b.is_finite(alpha));
  // State: rng state, done, result, d, c (d and c ride along).
  Values out = b.while_loop(
      {first[0], b.not_(valid), full(b, NAN), d, c},
      [](Builder& q, const Values& v) { return still_drawing(q, v[1]); },
      [&](Builder& q, const Values& v) {
        Values drawn = round_uniforms(q, v[0], shape, 3, ct);
        Value x = box_muller(q, drawn[1], drawn[2]), u = open_low(q, drawn[3]);
        Value dd = v[3], y = q.add(full(q, 1), q.mul(v[4], x));
        Value vv = q.mul(q.mul(y, y), y), xx = q.mul(x, x);
        Value squeeze = q.compare(hlo::Compare::kLT, u,
                                  q.sub(full(q, 1), q.mul(full(q, 0.0331), q.mul(xx, xx))));
        Value bound = q.add(q.mul(full(q, 0.5), xx),
                            q.mul(dd, q.add(q.sub(full(q, 1), vv), q.log(vv))));
        Value ok = q.and_(q.compare(hlo::Compare::kGT, y, full(q, 0)),
                          q.or_(squeeze, q.compare(hlo::Compare::kLT, q.log(u), bound)));
        Value take = q.and_(ok, q.not_(v[1]));
        return Values{drawn[0], q.or_(v[1], ok), q.select(take, q.mul(dd, vv), v[2]), v[3], v[4]};
      });
  Value sample = b.mul(out[2], scale);
  // alpha == 0 draws 0, which CPU's _standard_gamma lifts to the smallest
  // positive normal number of the type, as every sample.
  return b.select(b.compare(hlo::Compare::kEQ, alpha, full(b, 0)), full(b, 0), sample);
}

// The smallest positive normal number of `t`, below which CPU lifts samples.
double tiny(ElementType t) {
  switch (t) {
    case ElementType::kF64: return std::numeric_limits<double>::min();
    case ElementType::kF16: return 6.103515625e-05;
    case ElementType::kBF16: return std::numeric_limits<float>::min();
    default: return std::numeric_limits<float>::min();
  }
}

// max(sample, tiny) in the result type, NaN kept.
Value lifted(Builder& b, Value sample, ElementType t) {
  Value r = b.convert(sample, t);
  Value low = splat_like(b, tiny(t), r);
  return b.select(b.compare(hlo::Compare::kLT, r, low), low, r);
}

// _standard_gamma(self, generator): Gamma(self, 1).
Values standard_gamma(Context& c, const Args& a) {
  ElementType t = c.out().dtype;
  Value alpha = c.b.convert(a[0].tensor, compute_type(t));
  return {lifted(c.b, standard_gamma_of(c.b, a[1], alpha), t)};
}

// _sample_dirichlet(self, generator): gammas of the concentrations (lifted
// above zero, as CPU), normalized along the last dim.
Values sample_dirichlet(Context& c, const Args& a) {
  ElementType t = c.out().dtype;
  Value alpha = c.b.convert(a[0].tensor, compute_type(t));
  Value g = c.b.convert(lifted(c.b, standard_gamma_of(c.b, a[1], alpha), t), alpha.dtype());
  int64_t last = g.rank() - 1;
  Value sum = reduce_sum(c.b, g, {last});
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < last; ++i) keep.push_back(i);
  return {c.b.convert(c.b.div(g, c.b.broadcast_in_dim(sum, g.shape(), keep)), t)};
}

// poisson(self, generator): CPU's sampler per element in one while loop: for
// a rate below 10 the product of uniforms until it falls to exp(-rate) (the
// count of factors above it), for 10 and more Hoermann's transformed
// rejection (PTRS); each round draws two uniforms per element. A negative,
// NaN or infinite rate gives NaN at once; a zero rate 0.
Values poisson(Context& c, const Args& a) {
  Builder& b = c.b;
  ElementType t = c.out().dtype, ct = compute_type(t);
  Value rate = b.convert(a[0].tensor, ct);
  const std::vector<int64_t> shape = rate.shape();
  auto full = [&](Builder& q, double v) { return q.full(TensorType{ct, shape}, v); };
  Value valid = b.and_(b.compare(hlo::Compare::kGE, rate, full(b, 0)), b.is_finite(rate));
  Value zero = b.compare(hlo::Compare::kEQ, rate, full(b, 0));
  Value large = b.compare(hlo::Compare::kGE, rate, full(b, 10));
  // PTRS constants (used where the rate is large).
  Value loglam = b.log(rate);
  Value bb = b.add(full(b, 0.931), b.mul(full(b, 2.53), b.sqrt(rate)));
  Value aa = b.add(full(b, -0.059), b.mul(full(b, 0.02483), bb));
  Value invalpha = b.add(full(b, 1.1239), b.div(full(b, 1.1328), b.sub(bb, full(b, 3.4))));
  Value vr = b.sub(full(b, 0.9277), b.div(full(b, 3.6224), b.sub(bb, full(b, 2))));
  Value enlam = b.exp(b.neg(rate));
  Value init_result = b.select(zero, full(b, 0), full(b, NAN));
  // State: rng, done, result, count, product; then the per-element constants.
  Values out = b.while_loop(
      {draw_state(b, a[1]), b.or_(b.not_(valid), zero), init_result, full(b, 0), full(b, 1),
       rate, large, loglam, bb, aa, invalpha, vr, enlam},
      [](Builder& q, const Values& v) { return still_drawing(q, v[1]); },
      [&](Builder& q, const Values& v) {
        Values drawn = round_uniforms(q, v[0], shape, 2, ct);
        Value u1 = drawn[1], u2 = drawn[2];
        Value lam = v[5], is_large = v[6], ll = v[7], B = v[8], A = v[9];
        Value ia = v[10], VR = v[11], en = v[12];
        // Small rates: one more factor.
        Value prod = q.mul(v[4], u1);
        Value small_stop = q.compare(hlo::Compare::kLE, prod, en);
        // Large rates: one PTRS attempt.
        Value U = q.sub(u1, full(q, 0.5)), V = u2;
        Value us = q.sub(full(q, 0.5), q.abs(U));
        Value k = q.floor(q.add(q.mul(q.add(q.div(q.mul(full(q, 2), A), us), B), U),
                                q.add(lam, full(q, 0.43))));
        Value quick = q.and_(q.compare(hlo::Compare::kGE, us, full(q, 0.07)),
                             q.compare(hlo::Compare::kLE, V, VR));
        Value reject = q.or_(q.compare(hlo::Compare::kLT, k, full(q, 0)),
                             q.and_(q.compare(hlo::Compare::kLT, us, full(q, 0.013)),
                                    q.compare(hlo::Compare::kGT, V, us)));
        Value lhs = q.sub(q.add(q.log(V), q.log(ia)), q.log(q.add(q.div(A, q.mul(us, us)), B)));
        Value rhs = q.sub(q.add(q.neg(lam), q.mul(k, ll)),
                          q.unary("chlo.lgamma", q.add(k, full(q, 1))));
        Value accept = q.or_(quick, q.and_(q.not_(reject), q.compare(hlo::Compare::kLE, lhs, rhs)));
        Value stop = q.select(is_large, accept, small_stop);
        Value take = q.and_(stop, q.not_(v[1]));
        Value value = q.select(is_large, k, v[3]);
        Value count = q.select(q.or_(is_large, small_stop), v[3], q.add(v[3], full(q, 1)));
        return Values{drawn[0], q.or_(v[1], stop), q.select(take, value, v[2]), count, prod,
                      v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12]};
      });
  return {b.convert(out[2], t)};
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
      {"aten::_standard_gamma", standard_gamma}, {"aten::_sample_dirichlet", sample_dirichlet},
      {"aten::poisson", poisson},
  };
  for (const auto& [name, fn] : ops) r.add(name, nonempty(fn));
  r.add("aten::native_dropout_backward", native_dropout_backward);
}

}  // namespace torch_tpu::lowering
