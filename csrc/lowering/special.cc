// Special functions: modified Bessel functions of the first kind (series and
// asymptotic expansions), erfcx, ndtri, log_ndtr, mvlgamma
// and the orthogonal polynomial families (Chebyshev, Hermite, Laguerre,
// Legendre) by their three-term recurrences. 16-bit floats compute in f32.
#include <climits>
#include <cmath>
#include <functional>

#include "special_common.h"

namespace torch_tpu::lowering {

void register_pointwise_extra(Registry& r);
void register_special_bessel(Registry& r);
void register_special_gamma(Registry& r);

namespace {

using namespace special;


using UnaryOp = Value (*)(Builder&, Value);

// PyTorch's CPU kernels of several special functions take only f32/f64;
// 16-bit inputs fail there, and so here.
void require_full_width(const Context& c, bool full_width_only) {
  ElementType t = c.out().dtype;
  if (full_width_only && (t == ElementType::kF16 || t == ElementType::kBF16))
    throw Unsupported(c.op + " is not implemented for 16-bit floats (as on CPU)");
}

// One input at argument 0 in the compute type, f, then the output type.
LoweringFn float_unary(UnaryOp f, bool full_width_only = false) {
  return [f, full_width_only](Context& c, const Args& a) {
    require_full_width(c, full_width_only);
    Value x = coerce(c.b, a[0].tensor, accumulation_type(c.out().dtype), c.out().shape);
    return Values{c.b.convert(f(c.b, x), c.out().dtype)};
  };
}

// ---- modified Bessel functions I0, I1 ------------------------------------------


// Σ_k y^k / (k! (k+ν)!) with y = x²/4, nested from the innermost term; every
// term is positive, so the sum is accurate for any |x| it converges for.
Value bessel_series(Builder& b, Value ax, int nu) {
  Value y = b.mul(k(b, 0.25, ax), b.mul(ax, ax));
  Value acc = k(b, 1, ax);
  for (int n = wide(ax) ? 48 : 32; n >= 1; --n)
    acc = b.add(k(b, 1, ax), b.mul(acc, b.div(y, k(b, double(n) * (n + nu), ax))));
  return nu == 0 ? acc : b.mul(acc, b.mul(k(b, 0.5, ax), ax));
}

// The large-|x| expansion of I_ν(x) e^-x √(2πx): Σ_k Π_j ((2j-1)² - 4ν²) / (8j x).
Value bessel_asymptotic(Builder& b, Value ax, int nu) {
  Value acc = k(b, 1, ax);
  for (int n = wide(ax) ? 30 : 12; n >= 1; --n) {
    double num = double(2 * n - 1) * (2 * n - 1) - 4.0 * nu * nu;
    acc = b.add(k(b, 1, ax), b.mul(acc, b.div(k(b, num / (8.0 * n), ax), ax)));
  }
  return b.div(acc, b.sqrt(b.mul(k(b, 2 * M_PI, ax), ax)));
}

constexpr double kSeriesLimit = 20;

// I_ν(x) e^-|x| (scaled) or I_ν(x); I0 is even, I1 odd.
Value bessel_i(Builder& b, Value x, int nu, bool scaled) {
  Value ax = b.abs(x);
  Value small = lt(b, ax, kSeriesLimit);
  Value safe_big = b.select(small, k(b, kSeriesLimit, ax), ax);
  Value safe_small = b.select(small, ax, k(b, 0, ax));
  Value series = bessel_series(b, safe_small, nu);
  Value asym = bessel_asymptotic(b, safe_big, nu);
  Value r = scaled ? b.select(small, b.mul(series, b.exp(b.neg(ax))), asym)
                  : b.select(small, series, b.mul(b.exp(ax), asym));
  if (scaled) r = b.select(eq(b, ax, INFINITY), k(b, 0, ax), r);  // unscaled: NaN, as on CPU
  if (nu == 1) r = b.select(lt(b, x, 0), b.neg(r), r);
  return b.select(b.compare(Compare::kNE, x, x), x, r);
}

Value i0(Builder& b, Value x) { return bessel_i(b, x, 0, false); }
Value i0e(Builder& b, Value x) { return bessel_i(b, x, 0, true); }
Value i1(Builder& b, Value x) { return bessel_i(b, x, 1, false); }
Value i1e(Builder& b, Value x) { return bessel_i(b, x, 1, true); }

// ---- error function family --------------------------------------------------------

// exp(x²) erfc(x). Below 1.5: directly, with x² split so exp sees it exactly
// enough; above: the continued fraction 1/√π / (x + (1/2)/(x + 1/(x + ...))).
Value erfcx(Builder& b, Value x) {
  Value near = lt(b, x, 1.5);
  Value xn = b.select(near, x, k(b, 0, x));
  Value hi = b.reduce_precision(xn, wide(x) ? 11 : 8, wide(x) ? 26 : 11);
  Value sq_lo = b.mul(b.sub(xn, hi), b.add(xn, hi));
  Value direct = b.mul(b.mul(b.exp(b.mul(hi, hi)), b.exp(sq_lo)), b.unary("chlo.erfc", xn));
  Value xf = b.select(near, k(b, 1.5, x), x);
  Value t = xf;
  for (int n = wide(x) ? 120 : 32; n >= 1; --n) t = b.add(xf, b.div(k(b, 0.5 * n, x), t));
  Value cf = b.div(k(b, 1 / std::sqrt(M_PI), x), t);
  Value r = b.select(near, direct, cf);
  return b.select(eq(b, x, -INFINITY), k(b, INFINITY, x), r);
}

// log Φ(x): log1p(-erfc(x/√2)/2) above -1, log(erfcx(-x/√2)/2) - x²/2 below.
Value log_ndtr_tail(Builder& b, Value x) {
  Value t = b.mul(x, k(b, M_SQRT1_2, x));
  return b.sub(b.log(b.mul(erfcx(b, b.neg(t)), k(b, 0.5, x))), b.mul(t, t));
}
Value log_ndtr(Builder& b, Value x) {
  Value t = b.mul(x, k(b, M_SQRT1_2, x));
  Value upper = b.unary("stablehlo.log_plus_one", b.mul(b.unary("chlo.erfc", t), k(b, -0.5, x)));
  return b.select(lt(b, x, -1), log_ndtr_tail(b, b.min(x, k(b, -1, x))), upper);
}

// Φ⁻¹(p): the lower half q = min(p, 1 - p) solves log Φ(x) = log q by Newton
// steps (log Φ is concave, so they approach from the left without overshoot),
// Φ/φ = √(π/2) erfcx(-x/√2) keeping each step free of overflow.
Value ndtri(Builder& b, Value p) {
  Value q = b.min(p, b.sub(k(b, 1, p), p));
  Value safe_q = b.select(gt(b, q, 0), q, k(b, 0.25, q));
  Value logq = b.log(safe_q);
  Value central = b.mul(k(b, M_SQRT2, q), b.unary("chlo.erf_inv", b.sub(b.mul(k(b, 2, q), safe_q), k(b, 1, q))));
  Value tail = b.neg(b.sqrt(b.mul(k(b, -2, q), logq)));
  Value x = b.select(gt(b, safe_q, 1e-3), central, tail);
  for (int i = 0; i < (wide(p) ? 8 : 6); ++i) {
    Value ratio = b.mul(k(b, std::sqrt(M_PI / 2), x), erfcx(b, b.mul(x, k(b, -M_SQRT1_2, x))));
    x = b.sub(x, b.mul(b.sub(log_ndtr_tail(b, x), logq), ratio));
    x = b.min(x, k(b, 0, x));
  }
  x = b.select(eq(b, q, 0), k(b, -INFINITY, x), x);
  x = b.select(gt(b, p, 0.5), b.neg(x), x);
  Value bad = b.or_(b.or_(lt(b, p, 0), gt(b, p, 1)), b.compare(Compare::kNE, p, p));
  return b.select(bad, k(b, NAN, p), x);
}

// ---- mvlgamma ---------------------------------------------------------------------------

// Σ_{i<p} lgamma(x - i/2) + p(p-1)/4 log π. (CPU's check that every x is
// above (p-1)/2 needs the values on the host; it is not repeated here.)
Values mvlgamma(Context& c, const Args& a) {
  Builder& b = c.b;
  TensorType t{accumulation_type(c.out().dtype), c.out().shape};
  Value x = coerce(b, a[0].tensor, t);
  int64_t p = a[1].i;
  Value s = k(b, p * (p - 1) / 4.0 * std::log(M_PI), x);
  for (int64_t i = 0; i < p; ++i) s = b.add(s, b.unary("chlo.lgamma", b.sub(x, k(b, i / 2.0, x))));
  return {b.convert(s, c.out().dtype)};
}

// ---- orthogonal polynomials ----------------------------------------------------------
// p_n(x) for an integer tensor n, as PyTorch evaluates them: special values
// first (n < 0, |x| = 1, a trigonometric form for large n inside (-1, 1)),
// else the three-term recurrence p_{j+1} = step(j, x, p_{j-1}, p_j) from
// p_0 = 1 and p_1, run in one loop up to max(n) with each element frozen
// once it reaches its own n.

constexpr int64_t kNoLimit = int64_t{1} << 62;

using Step = std::function<Value(Builder&, Value j, Value x, Value p, Value q)>;

Value recurrence(Builder& b, Value x, Value n, Value p1, const Step& step, int64_t limit) {
  std::vector<int64_t> all(n.rank());
  for (int64_t d = 0; d < n.rank(); ++d) all[d] = d;
  Value last = b.min(reduce_max(b, n, all), b.constant(ElementType::kI64, limit));
  Value j0 = b.constant(ElementType::kI64, 1);
  Values out = b.while_loop(
      {j0, last, x, n, k(b, 1, x), p1},
      [](Builder& w, const Values& s) { return Values{w.compare(Compare::kLT, s[0], s[1])}; },
      [&step](Builder& w, const Values& s) {
        Value j = w.broadcast_to(w.convert(s[0], s[2].dtype()), s[2].shape());
        Value live = w.compare(Compare::kLT, w.broadcast_to(s[0], s[3].shape()), s[3]);
        Value r = step(w, j, s[2], s[4], s[5]);
        return Values{w.add(s[0], w.constant(ElementType::kI64, 1)), s[1], s[2], s[3],
                      w.select(live, s[5], s[4]), w.select(live, r, s[5])};
      });
  return out[5];
}

enum class Kind { kT, kU, kV, kW };

// Chebyshev polynomials of the four kinds at y (x, or 2x - 1 for the
// shifted ones), with PyTorch's closed forms above n = `trig_above`.
Value chebyshev(Builder& b, Value y, Value n, Kind kind, int64_t trig_above, bool shifted) {
  Value nf = b.convert(n, y.dtype());
  Value one = k(b, 1, y), two_n1 = b.add(b.add(nf, nf), one);
  Value even = b.compare(Compare::kEQ, b.rem(n, splat_like(b, 2, n)), splat_like(b, 0, n));
  Value pos = gt(b, y, 0), pos_or_even = b.or_(pos, even);
  Value alt1 = b.select(pos_or_even, one, b.neg(one));
  Value alt_odd = b.select(even, two_n1, b.neg(two_n1));
  Value theta = b.unary("chlo.acos", y);
  auto sin = [&](Value v) { return b.unary("stablehlo.sine", v); };
  auto cos = [&](Value v) { return b.unary("stablehlo.cosine", v); };
  Value nh = b.add(nf, k(b, 0.5, y)), n1 = b.add(nf, one);
  Value p1, edge, trig;
  switch (kind) {
    case Kind::kT:
      p1 = y, edge = alt1, trig = cos(b.mul(nf, theta));
      break;
    case Kind::kU:
      p1 = b.add(y, y), edge = b.select(pos_or_even, n1, b.neg(n1));
      trig = b.select(b.compare(Compare::kNE, sin(theta), k(b, 0, y)),
                      b.div(sin(b.mul(n1, theta)), sin(theta)),
                      b.div(b.mul(n1, cos(b.mul(n1, theta))), y));
      break;
    case Kind::kV: {
      p1 = b.sub(b.add(y, y), one), edge = b.select(pos, one, alt_odd);
      Value half = b.mul(theta, k(b, 0.5, y));
      trig = b.select(b.compare(Compare::kNE, sin(half), one), b.div(cos(b.mul(nh, theta)), cos(half)),
                      alt_odd);
      break;
    }
    case Kind::kW: {
      p1 = b.add(b.add(y, y), one);
      Value even1 = b.select(even, one, b.neg(one));
      edge = b.select(pos, two_n1, even1);
      Value half = b.mul(theta, k(b, 0.5, y));
      trig = b.select(b.compare(Compare::kNE, cos(half), one), b.div(sin(b.mul(nh, theta)), sin(half)),
                      shifted ? even1 : edge);
      break;
    }
  }
  Value r = recurrence(b, y, n, p1, [](Builder& w, Value, Value x, Value p, Value q) {
    return w.sub(w.mul(w.add(x, x), q), p);
  }, kNoLimit);
  r = b.select(b.compare(Compare::kEQ, n, splat_like(b, 1, n)), p1, r);
  r = b.select(b.compare(Compare::kEQ, n, splat_like(b, 0, n)), one, r);
  Value inside = lt(b, b.abs(y), 1);
  r = b.select(b.and_(inside, b.compare(Compare::kGT, n, splat_like(b, trig_above, n))), trig, r);
  r = b.select(eq(b, b.abs(y), 1), edge, r);
  return b.select(b.compare(Compare::kLT, n, splat_like(b, 0, n)), k(b, 0, y), r);
}

// n < 0 → 0, n = 0 → 1, n = 1 → p1, else the recurrence (NaN past `limit`).
Value simple_family(Builder& b, Value x, Value n, Value p1, const Step& step, int64_t limit) {
  Value r = recurrence(b, x, n, p1, step, limit);
  r = b.select(b.compare(Compare::kEQ, n, splat_like(b, 1, n)), p1, r);
  r = b.select(b.compare(Compare::kGT, n, splat_like(b, limit, n)), k(b, NAN, x), r);
  r = b.select(b.compare(Compare::kEQ, n, splat_like(b, 0, n)), k(b, 1, x), r);
  return b.select(b.compare(Compare::kLT, n, splat_like(b, 0, n)), k(b, 0, x), r);
}

using Polynomial = std::function<Value(Builder&, Value x, Value n)>;

LoweringFn polynomial_fn(Polynomial f) {
  return [f](Context& c, const Args& a) {
    require_full_width(c, true);
    TensorType t{accumulation_type(c.out().dtype), c.out().shape};
    Value x = coerce(c.b, a[0].tensor, t);
    Value n = c.b.convert(coerce(c.b, a[1].tensor, t), ElementType::kI64);
    return Values{c.b.convert(f(c.b, x, n), c.out().dtype)};
  };
}

Polynomial chebyshev_fn(Kind kind, bool shifted) {
  static const int64_t unshifted[] = {6, 8, 8, 8}, shifted_at[] = {6, 6, 6, 4};
  int64_t above = (shifted ? shifted_at : unshifted)[static_cast<int>(kind)];
  return [=](Builder& b, Value x, Value n) {
    Value y = shifted ? b.sub(b.add(x, x), k(b, 1, x)) : x;
    return chebyshev(b, y, n, kind, above, shifted);
  };
}

int64_t hermite_limit(Value x) { return wide(x) ? 512 : 128; }

Value hermite_h(Builder& b, Value x, Value n) {
  return simple_family(b, x, n, b.add(x, x), [](Builder& w, Value j, Value x, Value p, Value q) {
    return w.sub(w.mul(w.add(x, x), q), w.mul(w.add(j, j), p));
  }, hermite_limit(x));
}

Value hermite_he(Builder& b, Value x, Value n) {
  return simple_family(b, x, n, x, [](Builder& w, Value j, Value x, Value p, Value q) {
    return w.sub(w.mul(x, q), w.mul(j, p));
  }, hermite_limit(x));
}

Value laguerre(Builder& b, Value x, Value n) {
  Value r = simple_family(b, x, n, b.sub(k(b, 1, x), x), [](Builder& w, Value j, Value x, Value p, Value q) {
    Value a = w.add(w.add(j, j), w.sub(k(w, 1, x), x));
    return w.div(w.sub(w.mul(a, q), w.mul(j, p)), w.add(j, k(w, 1, j)));
  }, kNoLimit);
  Value at_zero = b.and_(eq(b, x, 0), b.compare(Compare::kGE, n, splat_like(b, 0, n)));
  return b.select(at_zero, k(b, 1, x), r);
}

Value legendre(Builder& b, Value x, Value n) {
  Value r = simple_family(b, x, n, x, [](Builder& w, Value j, Value x, Value p, Value q) {
    Value a = w.mul(w.add(w.add(j, j), k(w, 1, j)), x);
    return w.div(w.sub(w.mul(a, q), w.mul(j, p)), w.add(j, k(w, 1, j)));
  }, kNoLimit);
  Value even = b.compare(Compare::kEQ, b.rem(n, splat_like(b, 2, n)), splat_like(b, 0, n));
  Value edge = b.select(b.or_(gt(b, x, 0), even), k(b, 1, x), k(b, -1, x));
  Value at_edge = b.and_(eq(b, b.abs(x), 1), b.compare(Compare::kGE, n, splat_like(b, 0, n)));
  return b.select(at_edge, edge, r);
}

}  // namespace

void register_special_polynomials(Registry& r) {
  const std::pair<const char*, Polynomial> families[] = {
      {"chebyshev_polynomial_t", chebyshev_fn(Kind::kT, false)},
      {"chebyshev_polynomial_u", chebyshev_fn(Kind::kU, false)},
      {"chebyshev_polynomial_v", chebyshev_fn(Kind::kV, false)},
      {"chebyshev_polynomial_w", chebyshev_fn(Kind::kW, false)},
      {"shifted_chebyshev_polynomial_t", chebyshev_fn(Kind::kT, true)},
      {"shifted_chebyshev_polynomial_u", chebyshev_fn(Kind::kU, true)},
      {"shifted_chebyshev_polynomial_v", chebyshev_fn(Kind::kV, true)},
      {"shifted_chebyshev_polynomial_w", chebyshev_fn(Kind::kW, true)},
      {"hermite_polynomial_h", hermite_h}, {"hermite_polynomial_he", hermite_he},
      {"laguerre_polynomial_l", laguerre}, {"legendre_polynomial_p", legendre},
  };
  for (const auto& [name, f] : families)
    for (const char* overload : {"", ".x_scalar", ".n_scalar"})
      r.add(std::string("aten::special_") + name + overload, polynomial_fn(f));
}

void register_special(Registry& r) {
  register_pointwise_extra(r);
  register_special_polynomials(r);
  register_special_bessel(r);
  register_special_gamma(r);  // replaces elementwise's digamma
  const std::pair<const char*, UnaryOp> unaries[] = {
      {"aten::i0", i0}, {"aten::special_i0e", i0e}, {"aten::special_i1", i1},
      {"aten::special_i1e", i1e},
  };
  for (const auto& [op, f] : unaries) r.add(op, float_unary(f));
  const std::pair<const char*, UnaryOp> full_width[] = {
      {"aten::special_modified_bessel_i0", i0}, {"aten::special_modified_bessel_i1", i1},
      {"aten::special_erfcx", erfcx}, {"aten::special_ndtri", ndtri},
      {"aten::special_log_ndtr", log_ndtr},
  };
  for (const auto& [op, f] : full_width) r.add(op, float_unary(f, true));
  r.add("aten::mvlgamma", mvlgamma);
}

}  // namespace torch_tpu::lowering
