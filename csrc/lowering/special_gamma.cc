// The gamma family: digamma, polygamma, Hurwitz zeta and the regularized
// incomplete gamma functions, with CPU's conventions at poles and edges.
//  - digamma: the recurrence ψ(x) = ψ(x+1) - 1/x up to 10, then the
//    asymptotic series; reflection with the fractional part below 0.
//  - trigamma (polygamma n = 1): CPU's own scheme (reflection through
//    sin(πx) in the working precision), so values near the poles round alike.
//  - polygamma n ≥ 2: (-1)^{n+1} n! ζ(n+1, x).
//  - ζ(s, q): a direct sum until q + N ≥ 10 + s, then Euler–Maclaurin with
//    twelve Bernoulli terms; the sum runs in a while loop, so negative q
//    (integer s) works as on CPU.
//  - igamma/igammac: the power series of P below x = a + 1, Lentz's
//    continued fraction for Q above, each looping until every element has
//    converged.
//  - _standard_gamma_grad: d x / d alpha of a Gamma(alpha, 1) sample x at
//    fixed CDF (implicit reparameterization), by CPU's three regimes: a
//    series of the CDF for x < 0.8, Rice's saddle-point expansion for
//    alpha > 8, else Jankowiak and Obermeyer's bivariate rational fit.
//  - _dirichlet_grad: the same for a Beta(alpha, total - alpha) marginal of a
//    Dirichlet sample, by CPU's four regimes (series near x = 0 and x = 1,
//    a saddle-point expansion when both parameters exceed 6, else a
//    rational correction to an analytic approximation).
#include <cmath>
#include <utility>
#include <vector>

#include "special_common.h"

namespace torch_tpu::lowering {

namespace {

using namespace special;

Value is_nan(Builder& b, Value x) { return b.compare(Compare::kNE, x, x); }
Value is_integer(Builder& b, Value x) {
  return b.compare(Compare::kEQ, x, b.unary("stablehlo.round_nearest_even", x));
}
double epsilon(Value x) { return wide(x) ? 1.1e-16 : 6e-8; }


// Any element of a predicate tensor set (a scalar i1), for loop conditions.
Value any(Builder& b, Value pred) {
  std::vector<int64_t> all(pred.rank());
  for (int64_t d = 0; d < pred.rank(); ++d) all[d] = d;
  Value as_int = b.convert(pred, ElementType::kI32);
  return b.compare(Compare::kGT, reduce_max(b, as_int, all), b.constant(ElementType::kI32, 0));
}

// B_{2k} for k = 1..12.
const double kBernoulli[] = {1.0 / 6,     -1.0 / 30,      1.0 / 42,          -1.0 / 30,
                             5.0 / 66,    -691.0 / 2730,  7.0 / 6,           -3617.0 / 510,
                             43867.0 / 798, -174611.0 / 330, 854513.0 / 138, -236364091.0 / 2730};

// ---- digamma, trigamma ------------------------------------------------------------------

// ψ(x) for x > 0.
Value digamma_positive(Builder& b, Value x) {
  Value acc = k(b, 0, x);
  for (int i = 0; i < 10; ++i) {
    Value below = lt(b, x, 10);
    acc = b.select(below, b.sub(acc, b.div(k(b, 1, x), x)), acc);
    x = b.select(below, b.add(x, k(b, 1, x)), x);
  }
  std::vector<double> c;  // Σ B_{2k} / (2k x^{2k}) as a polynomial in 1/x²
  for (int j = 0; j < 7; ++j) c.push_back(kBernoulli[j] / (2.0 * (j + 1)));
  Value inv2 = b.div(k(b, 1, x), b.mul(x, x));
  Value tail = b.mul(inv2, polynomial(b, inv2, c));
  return b.add(acc, b.sub(b.sub(b.log(x), b.div(k(b, 0.5, x), x)), tail));
}

// ψ(x): reflection ψ(x) = ψ(1-x) - π/tan(πr) below 0 with r = x - round(x)
// (exact and at most 1/2, so πr keeps its relative precision near the poles);
// ∓∞ at ±0, NaN at negative integers.
Value digamma(Builder& b, Value x) {
  Value neg = lt(b, x, 0);
  Value r = b.sub(x, b.unary("stablehlo.round_nearest_even", x));
  Value pi_r = b.mul(k(b, M_PI, x), r);
  Value reflect = b.div(k(b, M_PI, x), b.unary("stablehlo.tan", pi_r));
  Value base = digamma_positive(b, b.select(neg, b.sub(k(b, 1, x), x), x));
  Value out = b.select(neg, b.sub(base, reflect), base);
  out = b.select(b.and_(neg, is_integer(b, x)), k(b, NAN, x), out);
  return b.select(eq(b, x, 0), b.neg(b.div(k(b, 1, x), x)), out);
}

// CPU's trigamma: below 1/2, -π²/sin²(πx) and x → 1 - x with the sign
// flipped; six recurrence steps; then 1/x + 1/(2x²) + Σ B_{2k}/x^{2k+1}.
Value trigamma(Builder& b, Value x) {
  Value reflect = lt(b, x, 0.5);
  Value s = b.unary("stablehlo.sine", b.mul(k(b, M_PI, x), x));
  Value pi2 = b.mul(k(b, M_PI, x), k(b, M_PI, x));
  Value acc = b.select(reflect, b.neg(b.div(pi2, b.mul(s, s))), k(b, 0, x));
  x = b.select(reflect, b.sub(k(b, 1, x), x), x);
  for (int i = 0; i < 6; ++i) {
    acc = b.add(acc, b.div(k(b, 1, x), b.mul(x, x)));
    x = b.add(x, k(b, 1, x));
  }
  Value ixx = b.div(k(b, 1, x), b.mul(x, x));
  Value inner = b.sub(k(b, 1.0 / 30, x), b.mul(ixx, k(b, 1.0 / 42, x)));
  inner = b.mul(ixx, b.sub(k(b, 1.0 / 6, x), b.mul(ixx, inner)));
  Value series = b.add(b.add(k(b, 1, x), b.div(k(b, 1, x), b.mul(k(b, 2, x), x))), inner);
  acc = b.add(acc, b.div(series, x));
  return b.select(reflect, b.neg(acc), acc);
}

// ---- Hurwitz zeta ----------------------------------------------------------------------

// ±|v|^-s, negative for a negative base and an odd integer s.
Value signed_power(Builder& b, Value v, Value s) {
  Value mag = b.pow(b.abs(v), b.neg(s));
  Value odd = b.compare(Compare::kNE, b.rem(s, k(b, 2, s)), k(b, 0, s));
  return b.select(b.and_(lt(b, v, 0), odd), b.neg(mag), mag);
}

// Σ_{i<N} (q+i)^-s for a per-element N, in one loop to the largest N.
Value zeta_direct(Builder& b, Value s, Value q, Value n) {
  std::vector<int64_t> all(n.rank());
  for (int64_t d = 0; d < n.rank(); ++d) all[d] = d;
  Value last = reduce_max(b, b.convert(n, ElementType::kI64), all);
  Value i0 = b.constant(ElementType::kI64, 0);
  Values out = b.while_loop(
      {i0, last, s, q, n, k(b, 0, q)},
      [](Builder& w, const Values& st) { return Values{w.compare(Compare::kLT, st[0], st[1])}; },
      [](Builder& w, const Values& st) {
        Value i = w.broadcast_to(w.convert(st[0], st[3].dtype()), st[3].shape());
        Value live = w.compare(Compare::kLT, i, st[4]);
        Value term = signed_power(w, w.add(st[3], i), st[2]);
        Value acc = w.select(live, w.add(st[5], term), st[5]);
        return Values{w.add(st[0], w.constant(ElementType::kI64, 1)), st[1], st[2], st[3], st[4], acc};
      });
  return out[5];
}

// ζ(s, w) for w ≥ 10 + s by Euler–Maclaurin:
// w^{1-s}/(s-1) + w^{-s}/2 + Σ_k B_{2k}/(2k)! (s)_{2k-1} w^{-s-2k+1}.
Value zeta_tail(Builder& b, Value s, Value w) {
  Value ws = b.pow(w, b.neg(s));
  Value acc = b.add(b.div(b.mul(ws, w), b.sub(s, k(b, 1, s))), b.mul(ws, k(b, 0.5, s)));
  Value rising = s, power = b.div(ws, w), inv2 = b.div(k(b, 1, w), b.mul(w, w));
  double fact = 1;  // (2k)!
  for (int j = 1; j <= 12; ++j) {
    fact *= (2.0 * j - 1) * (2 * j);
    acc = b.add(acc, b.mul(k(b, kBernoulli[j - 1] / fact, s), b.mul(rising, power)));
    Value next = b.mul(b.add(s, k(b, 2.0 * j - 1, s)), b.add(s, k(b, 2.0 * j, s)));
    rising = b.mul(rising, next);
    power = b.mul(power, inv2);
  }
  return acc;
}

// CPU's domain: ∞ at s = 1, NaN below; for q ≤ 0, ∞ at integers and NaN
// for a non-integer s.
Value zeta(Builder& b, Value s, Value q) {
  Value target = b.add(s, k(b, 10, s));
  Value n = b.max(b.ceil(b.sub(target, q)), k(b, 0, q));
  // Past a billion terms (q < -1e9 or s > 1e9) the loop is not run at all:
  // such calls would not finish on CPU either.
  n = b.select(b.or_(is_nan(b, n), gt(b, n, 1e9)), k(b, 0, q), n);
  Value good_s = b.select(b.compare(Compare::kGE, s, k(b, 1, s)), s, k(b, 2, s));
  Value r = b.add(zeta_direct(b, good_s, q, n), zeta_tail(b, good_s, b.add(q, n)));
  Value q_pole = b.and_(b.compare(Compare::kLE, q, k(b, 0, q)), is_integer(b, q));
  Value q_bad_s = b.and_(b.compare(Compare::kLE, q, k(b, 0, q)), b.not_(is_integer(b, s)));
  r = b.select(q_bad_s, k(b, NAN, r), r);
  r = b.select(q_pole, k(b, INFINITY, r), r);
  r = b.select(lt(b, s, 1), k(b, NAN, r), r);
  r = b.select(eq(b, s, 1), k(b, INFINITY, r), r);
  return b.select(b.or_(is_nan(b, s), is_nan(b, q)), k(b, NAN, r), r);
}

// ψ^(n)(x) as CPU computes it: digamma, trigamma, else (-1)^{n+1} n! ζ(n+1, x).
Value polygamma(Builder& b, int64_t n, Value x) {
  if (n == 0) return digamma(b, x);
  if (n == 1) return trigamma(b, x);
  double factorial = std::exp(std::lgamma(n + 1.0));
  Value z = zeta(b, k(b, double(n + 1), x), x);
  return b.mul(k(b, (n % 2 ? 1 : -1) * factorial, x), z);
}

// ---- incomplete gamma ---------------------------------------------------------------------

constexpr int kMaxIterations = 20000;  // ~√(a log(1/ε)) terms are needed near x = a

// log(x^a e^-x / Γ(a+1)). For a ≥ 10 the large terms cancel analytically:
// a log(x/a) - (x - a) - ½ log(2πa) - R(a), with a log(x/a) formed through
// log1p and R the Stirling remainder of log Γ(a+1), so f32 keeps its digits
// where x ≈ a ≫ 1.
Value log_gamma_weight(Builder& b, Value a, Value x) {
  Value direct = b.sub(b.sub(b.mul(a, b.log(x)), x), b.unary("chlo.lgamma", b.add(a, k(b, 1, a))));
  Value big = gt(b, a, 10);
  Value sa = b.select(big, a, k(b, 10, a));
  Value d = b.sub(x, sa);
  Value main = b.sub(b.mul(sa, b.unary("stablehlo.log_plus_one", b.div(d, sa))), d);
  Value inv = b.div(k(b, 1, a), sa), inv2 = b.mul(inv, inv);
  Value rest = b.mul(inv, polynomial(b, inv2, {1.0 / 12, -1.0 / 360, 1.0 / 1260, -1.0 / 1680, 1.0 / 1188}));
  Value half_log = b.mul(k(b, 0.5, a), b.log(b.mul(k(b, 2 * M_PI, a), sa)));
  return b.select(big, b.sub(b.sub(main, half_log), rest), direct);
}

// P(a, x) = x^a e^-x / Γ(a+1) Σ_n x^n / ((a+1)…(a+n)), for x < a + 1.
Value igamma_series(Builder& b, Value a, Value x) {
  double eps = epsilon(x);
  Value i0 = b.constant(ElementType::kI64, 0);
  Values out = b.while_loop(
      {i0, a, x, k(b, 1, x), k(b, 1, x), a},
      [eps](Builder& w, const Values& s) {
        Value more = w.compare(Compare::kGT, w.abs(s[3]), w.mul(w.abs(s[4]), k(w, eps, s[4])));
        Value cap = w.compare(Compare::kLT, s[0], w.constant(ElementType::kI64, kMaxIterations));
        return Values{w.and_(cap, any(w, more))};
      },
      [](Builder& w, const Values& s) {
        Value ap = w.add(s[5], k(w, 1, s[5]));
        Value term = w.mul(s[3], w.div(s[2], ap));
        return Values{w.add(s[0], w.constant(ElementType::kI64, 1)), s[1], s[2], term,
                      w.add(s[4], term), ap};
      });
  return b.mul(out[4], b.exp(log_gamma_weight(b, a, x)));
}

// Q(a, x) = x^a e^-x / Γ(a) · 1/(x+1-a - 1(1-a)/(x+3-a - 2(2-a)/(…))), for x ≥ a + 1,
// by Lentz's method. An element stops once its step factor is within a few
// ulps of 1 (more steps would only random-walk its rounding).
Value igammac_fraction(Builder& b, Value a, Value x) {
  double eps = 4 * epsilon(x), tiny = wide(x) ? 1e-300 : 1e-30;
  Value bb = b.sub(b.add(x, k(b, 1, x)), a);
  Value d = b.div(k(b, 1, x), bb);
  Value i0 = b.constant(ElementType::kI64, 1);
  Value done = b.not_(b.and_(b.is_finite(x), b.is_finite(a)));  // their values are fixed later
  // state: i, a, b_i, c, d, h, done
  Values out = b.while_loop(
      {i0, a, bb, k(b, 1 / tiny, x), d, d, done},
      [](Builder& w, const Values& s) {
        Value cap = w.compare(Compare::kLT, s[0], w.constant(ElementType::kI64, kMaxIterations));
        return Values{w.and_(cap, any(w, w.not_(s[6])))};
      },
      [tiny, eps](Builder& w, const Values& s) {
        Value fi = w.broadcast_to(w.convert(s[0], s[1].dtype()), s[1].shape());
        Value an = w.mul(w.neg(fi), w.sub(fi, s[1]));
        Value bn = w.add(s[2], k(w, 2, s[2]));
        auto guard = [&](Value v) {
          return w.select(w.compare(Compare::kLT, w.abs(v), k(w, tiny, v)), k(w, tiny, v), v);
        };
        Value dn = w.div(k(w, 1, bn), guard(w.add(w.mul(an, s[4]), bn)));
        Value cn = guard(w.add(bn, w.div(an, s[3])));
        Value delta = w.mul(dn, cn);
        Value h = w.select(s[6], s[5], w.mul(s[5], delta));
        Value close = w.compare(Compare::kLE, w.abs(w.sub(delta, k(w, 1, delta))), k(w, eps, delta));
        return Values{w.add(s[0], w.constant(ElementType::kI64, 1)), s[1], bn, cn, dn, h,
                      w.or_(s[6], close)};
      });
  return b.mul(b.mul(out[5], a), b.exp(log_gamma_weight(b, a, x)));
}

// P (lower = true) or Q, with CPU's edge values.
Value incomplete_gamma(Builder& b, Value a, Value x, bool lower) {
  Value use_series = b.compare(Compare::kLT, x, b.add(a, k(b, 1, a)));
  Value ok = b.and_(gt(b, a, 0), gt(b, x, 0));
  Value sa = b.select(ok, a, k(b, 1, a)), sx = b.select(ok, x, k(b, 1, x));
  Value ser_a = b.select(use_series, sa, k(b, 1, a)), ser_x = b.select(use_series, sx, k(b, 0.5, x));
  Value cf_a = b.select(use_series, k(b, 1, a), sa), cf_x = b.select(use_series, k(b, 3, x), sx);
  Value p = igamma_series(b, ser_a, ser_x), q = igammac_fraction(b, cf_a, cf_x);
  Value one = k(b, 1, x), zero = k(b, 0, x);
  Value r = lower ? b.select(use_series, p, b.sub(one, q)) : b.select(use_series, b.sub(one, p), q);
  Value a_inf = eq(b, a, INFINITY), x_inf = eq(b, x, INFINITY);
  r = b.select(x_inf, lower ? one : zero, r);
  r = b.select(a_inf, b.select(x_inf, k(b, NAN, x), lower ? zero : one), r);
  r = b.select(eq(b, x, 0), lower ? zero : one, r);
  r = b.select(eq(b, a, 0), b.select(gt(b, x, 0), lower ? one : zero, k(b, NAN, x)), r);
  Value bad = b.or_(b.or_(lt(b, a, 0), lt(b, x, 0)), b.or_(is_nan(b, a), is_nan(b, x)));
  return b.select(bad, k(b, NAN, x), r);
}

// ---- registration -------------------------------------------------------------------------

// ---- reparameterized gamma gradient ---------------------------------------------------

// The thresholds as CPU's kernel writes them: float literals.
double f32(double v) { return static_cast<float>(v); }

// x < 0.8: -(∂/∂α P(α, x)) / p(x; α) with P's series Σ (-x)^i / (i! (α + i)).
Value gamma_grad_small_x(Builder& b, Value alpha, Value x) {
  Value numer = k(b, 1, x), denom = alpha;
  Value s1 = b.div(numer, denom), s2 = b.div(numer, b.mul(denom, denom));
  for (int i = 1; i <= 5; ++i) {
    numer = b.mul(numer, b.div(b.neg(x), k(b, i, x)));
    denom = b.add(denom, k(b, 1, x));
    s1 = b.add(s1, b.div(numer, denom));
    s2 = b.add(s2, b.div(numer, b.mul(denom, denom)));
  }
  Value pow_xa = b.pow(x, alpha);
  Value pdf = b.mul(b.pow(x, b.sub(alpha, k(b, 1, x))), b.exp(b.neg(x)));
  Value cdf_alpha = b.sub(b.mul(b.sub(b.log(x), digamma(b, alpha)), b.mul(pow_xa, s1)), b.mul(pow_xa, s2));
  Value r = b.neg(b.div(cdf_alpha, pdf));
  return b.select(is_nan(b, r), k(b, 0, r), r);
}

// alpha > 8: the saddle-point expansion, its own polynomial within 10 % of
// the mean.
Value gamma_grad_large_alpha(Builder& b, Value alpha, Value x) {
  auto c = [&](double v) { return k(b, v, x); };
  Value a2 = b.mul(alpha, alpha);
  Value n1 = b.add(c(1), b.mul(b.mul(c(24), alpha), b.add(c(1), b.mul(c(12), alpha))));
  Value n2 = b.add(b.sub(b.add(b.mul(c(1440), a2), b.mul(b.mul(c(6), x), b.sub(c(53), b.mul(c(120), x)))),
                         b.div(b.mul(b.mul(c(65), x), x), alpha)),
                   b.mul(alpha, b.add(c(107), b.mul(c(3600), x))));
  Value near = b.div(b.mul(n1, n2), b.mul(b.mul(c(1244160), a2), a2));
  Value denom = b.sqrt(b.mul(c(8), alpha));
  Value diff = b.sub(alpha, x);
  Value term2 = b.div(denom, diff);
  Value lx = b.log(b.div(x, alpha));
  Value term3 = b.pow(b.sub(b.sub(x, alpha), b.mul(alpha, lx)), c(-1.5));
  Value term23 = b.select(b.compare(Compare::kLT, x, alpha), b.sub(term2, term3), b.add(term2, term3));
  Value term1 = b.sub(b.mul(lx, term23),
                      b.div(b.mul(b.sqrt(b.div(c(2), alpha)), b.add(alpha, x)), b.mul(diff, diff)));
  Value stirling = b.add(c(1), b.mul(b.div(c(1), b.mul(c(12), alpha)),
                                     b.add(c(1), b.div(c(1), b.mul(c(24), alpha)))));
  Value far = b.neg(b.div(b.mul(stirling, b.mul(x, term1)), denom));
  Value inside = b.and_(b.compare(Compare::kLE, b.mul(c(f32(0.9)), alpha), x),
                        b.compare(Compare::kLE, x, b.mul(c(f32(1.1)), alpha)));
  return b.select(inside, near, far);
}

// Otherwise: exp(p / q), p and q cubic in log(alpha) with coefficients
// quadratic in log(x / alpha).
Value gamma_grad_rational(Builder& b, Value alpha, Value x) {
  static const double kCoef[3][8] = {
      {0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1, 0.32668115, 0.10406089, 0.0014179084},
      {0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113, -0.0035938915,
       -0.00058392623},
      {0.040121004, -0.0065914022, -0.0026286047, -0.0013441777, 0.017050642, -0.0021309326,
       0.00085092367, -1.5247877e-07}};
  Value u = b.log(b.div(x, alpha)), v = b.log(alpha);
  std::vector<Value> cv;
  for (int i = 0; i < 8; ++i)
    cv.push_back(b.add(k(b, kCoef[0][i], x), b.mul(u, b.add(k(b, kCoef[1][i], x), b.mul(u, k(b, kCoef[2][i], x))))));
  auto cubic = [&](int at) {
    return b.add(cv[at], b.mul(v, b.add(cv[at + 1], b.mul(v, b.add(cv[at + 2], b.mul(v, cv[at + 3]))))));
  };
  return b.exp(b.div(cubic(0), cubic(4)));
}

// ---- reparameterized Beta / Dirichlet gradient -----------------------------------------

// x near 0: the series of d/dalpha of the Beta CDF over the pdf (ten terms).
Value beta_grad_alpha_small(Builder& b, Value x, Value alpha, Value beta) {
  auto c = [&](double v) { return k(b, v, x); };
  Value factor = b.sub(b.sub(digamma(b, alpha), digamma(b, b.add(alpha, beta))), b.log(x));
  Value numer = c(1);
  Value series = b.mul(b.div(numer, alpha), b.add(factor, b.div(c(1), alpha)));
  for (int i = 1; i <= 10; ++i) {
    numer = b.mul(numer, b.div(b.mul(b.sub(c(i), beta), x), c(i)));
    Value denom = b.add(alpha, c(i));
    series = b.add(series, b.mul(b.div(numer, denom), b.add(factor, b.div(c(1), denom))));
  }
  Value r = b.mul(b.mul(x, b.pow(b.sub(c(1), x), b.neg(beta))), series);
  return b.select(is_nan(b, r), c(0), r);
}

// x near 0: the same with respect to beta (eight terms).
Value beta_grad_beta_small(Builder& b, Value x, Value alpha, Value beta) {
  auto c = [&](double v) { return k(b, v, x); };
  Value factor = b.sub(digamma(b, b.add(alpha, beta)), digamma(b, beta));
  Value numer = c(1), betas = c(1), dbetas = c(0), series = b.div(factor, alpha);
  for (int i = 1; i <= 8; ++i) {
    numer = b.mul(numer, b.div(b.neg(x), c(i)));
    dbetas = b.add(b.mul(dbetas, b.sub(beta, c(i))), betas);
    betas = b.mul(betas, b.sub(beta, c(i)));
    series = b.add(series, b.mul(b.div(numer, b.add(alpha, c(i))), b.add(dbetas, b.mul(factor, betas))));
  }
  Value r = b.neg(b.mul(b.pow(b.sub(c(1), x), b.sub(c(1), beta)), series));
  return b.select(is_nan(b, r), c(0), r);
}

// alpha, beta > 6: the saddle-point expansion, a polynomial within 0.1
// standard deviations of the mean.
Value beta_grad_alpha_mid(Builder& b, Value x, Value alpha, Value beta) {
  auto c = [&](double v) { return k(b, v, x); };
  auto add = [&](Value p, Value q) { return b.add(p, q); };
  auto mul = [&](Value p, Value q) { return b.mul(p, q); };
  Value total = add(alpha, beta), mean = b.div(alpha, total);
  Value sd = b.div(b.sqrt(b.div(mul(alpha, beta), add(total, c(1)))), total);
  Value b2 = mul(beta, beta), omx = b.sub(c(1), x);
  // poly = 47 x β⁴ + α((43 + 20(16 + 27β)x)β³ + α(3(59 + 180β - 90x)β² +
  //        α((453 + 1620β(1 - x) - 455x)β + α(8(1 - x)(135β - 11)))))
  Value inner = mul(mul(c(8), omx), b.sub(mul(c(135), beta), c(11)));
  inner = mul(alpha, inner);
  inner = add(mul(b.sub(add(c(453), mul(mul(c(1620), beta), omx)), mul(c(455), x)), beta), inner);
  inner = mul(alpha, inner);
  inner = add(mul(mul(c(3), b.sub(add(c(59), mul(c(180), beta)), mul(c(90), x))), b2), inner);
  inner = mul(alpha, inner);
  inner = add(mul(mul(add(c(43), mul(mul(c(20), add(c(16), mul(c(27), beta))), x)), b2), beta), inner);
  Value poly = add(mul(mul(mul(c(47), x), b2), b2), mul(alpha, inner));
  Value pre_num = b.div(mul(add(c(1), mul(c(12), alpha)), add(c(1), mul(c(12), beta))), mul(total, total));
  Value pre_den = mul(mul(mul(mul(mul(mul(c(12960), alpha), alpha), alpha), beta), beta),
                      add(c(1), mul(c(12), total)));
  Value near = b.div(mul(b.div(pre_num, omx), poly), pre_den);

  auto corr = [&](Value v) {  // 1 + 1/(12 v) + 1/(288 v²)
    return add(add(c(1), b.div(c(1), mul(c(12), v))), b.div(c(1), mul(mul(c(288), v), v)));
  };
  Value prefactor = b.div(b.neg(x), b.sqrt(b.div(mul(mul(c(2), alpha), beta), total)));
  Value stirling = b.div(mul(corr(alpha), corr(beta)), corr(total));
  Value xm1 = b.sub(x, c(1));
  Value t1_num = b.sub(add(mul(mul(c(2), mul(alpha, alpha)), xm1), mul(mul(alpha, beta), xm1)), mul(x, b2));
  Value axbx = add(mul(alpha, xm1), mul(beta, x));
  Value t1_den = mul(mul(mul(b.sqrt(b.div(mul(c(2), alpha), beta)), b.pow(total, c(1.5))), axbx), axbx);
  Value t2 = mul(c(0.5), b.log(b.div(alpha, mul(total, x))));
  Value t3 = b.div(b.sqrt(b.div(mul(mul(c(8), alpha), beta), total)), axbx);
  Value t4_base = add(mul(beta, b.log(b.div(beta, mul(total, omx)))), mul(alpha, b.log(b.div(alpha, mul(total, x)))));
  Value t4 = b.pow(t4_base, c(-1.5));
  Value t34 = add(t3, b.select(b.compare(Compare::kLT, x, mean), t4, b.neg(t4)));
  Value far = mul(mul(stirling, prefactor), add(b.div(t1_num, t1_den), mul(t2, t34)));
  Value band = mul(c(0.1), sd);
  Value inside = b.and_(b.compare(Compare::kLE, b.sub(mean, band), x), b.compare(Compare::kLE, x, add(mean, band)));
  return b.select(inside, near, far);
}

// Otherwise: p / q times x (ψ(total) - ψ(alpha)) / beta, p and q quadratic in
// log x and log(alpha / x), cubic in log(total x / alpha).
Value beta_grad_rational(Builder& b, Value x, Value alpha, Value total) {
  static const double kC[2][3][3][4] = {
      {{{1.003668233, -0.01061107488, -0.0657888334, 0.01201642863},
        {0.6336835991, -0.3557432599, 0.05486251648, -0.001465281033},
        {-0.03276231906, 0.004474107445, 0.002429354597, -0.0001557569013}},
       {{0.221950385, -0.3187676331, 0.01799915743, 0.01074823814},
        {-0.2951249643, 0.06219954479, 0.01535556598, 0.001550077057},
        {0.02155310298, 0.004170831599, 0.001292462449, 6.976601077e-05}},
       {{-0.05980841433, 0.008441916499, 0.01085618172, 0.002319392565},
        {0.02911413504, 0.01400243777, -0.002721828457, 0.000751041181},
        {0.005900514878, -0.001936558688, -9.495446725e-06, 5.385558597e-05}}},
      {{{1, -0.02924021934, -0.04438342661, 0.007285809825},
        {0.6357567472, -0.3473456711, 0.05454656494, -0.002407477521},
        {-0.03301322327, 0.004845219414, 0.00231480583, -0.0002307248149}},
       {{0.5925320577, -0.1757678135, 0.01505928619, 0.000564515273},
        {0.1014815858, -0.06589186703, 0.01272886114, -0.0007316646956},
        {-0.007258481865, 0.001096195486, 0.0003934994223, -4.12701925e-05}},
       {{0.06469649321, -0.0236701437, 0.002902096474, -5.896963079e-05},
        {0.001925008108, -0.002869809258, 0.0008000589141, -6.063713228e-05},
        {-0.0003477407336, 6.959756487e-05, 1.097287507e-05, -1.650964693e-06}}}};
  Value u = b.log(x);
  Value la = b.sub(b.log(alpha), u);
  Value lb = b.sub(b.log(total), la);
  Value pu[3] = {k(b, 1, x), u, b.mul(u, u)}, pa[3] = {k(b, 1, x), la, b.mul(la, la)};
  Value pq[2] = {k(b, 0, x), k(b, 0, x)};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      Value ua = b.mul(pu[i], pa[j]);
      for (int n = 0; n < 2; ++n) {
        const double* cc = kC[n][i][j];
        Value cubic = b.add(k(b, cc[0], x),
                            b.mul(lb, b.add(k(b, cc[1], x), b.mul(lb, b.add(k(b, cc[2], x), b.mul(lb, k(b, cc[3], x)))))));
        pq[n] = b.add(pq[n], b.mul(ua, cubic));
      }
    }
  Value approx = b.div(b.mul(x, b.sub(digamma(b, total), digamma(b, alpha))), b.sub(total, alpha));
  return b.mul(b.div(pq[0], pq[1]), approx);
}

// CPU computes the series in the input's type and the other two regimes in
// double (the saddle-point terms cancel to second order near the mean: in
// float32 they lose up to 10 %); so does this.
Value dirichlet_grad(Builder& b, Value x, Value alpha, Value total) {
  Value beta = b.sub(total, alpha);
  Value one_minus = b.sub(k(b, 1, x), x);
  Value boundary = b.mul(b.mul(total, x), one_minus);
  auto f64 = [&](Value v) { return b.convert(v, ElementType::kF64); };
  Value xd = f64(x), ad = f64(alpha), td = f64(total);
  Value out = b.convert(beta_grad_rational(b, xd, ad, td), x.dtype());
  Value mid = b.convert(beta_grad_alpha_mid(b, xd, ad, b.sub(td, ad)), x.dtype());
  out = b.select(b.and_(gt(b, alpha, 6), gt(b, beta, 6)), mid, out);
  Value near_one = b.and_(b.compare(Compare::kGE, x, k(b, 0.5, x)), lt(b, boundary, 0.75));
  out = b.select(near_one, b.neg(beta_grad_beta_small(b, one_minus, beta, alpha)), out);
  Value near_zero = b.and_(b.compare(Compare::kLE, x, k(b, 0.5, x)), lt(b, boundary, 2.5));
  return b.select(near_zero, beta_grad_alpha_small(b, x, alpha, beta), out);
}

Value standard_gamma_grad(Builder& b, Value alpha, Value x) {
  Value out = gamma_grad_rational(b, alpha, x);
  out = b.select(gt(b, alpha, 8), gamma_grad_large_alpha(b, alpha, x), out);
  return b.select(lt(b, x, f32(0.8)), gamma_grad_small_x(b, alpha, x), out);
}

TensorType compute_type(const Context& c) { return {accumulation_type(c.out().dtype), c.out().shape}; }

void require_full_width(const Context& c) {
  ElementType t = c.out().dtype;
  if (t == ElementType::kF16 || t == ElementType::kBF16)
    throw Unsupported(c.op + " is not implemented for 16-bit floats (as on CPU)");
}

Values digamma_op(Context& c, const Args& a) {
  Value x = coerce(c.b, a[0].tensor, compute_type(c));
  return {c.b.convert(digamma(c.b, x), c.out().dtype)};
}

// polygamma(n, self) and polygamma_(self, n).
LoweringFn polygamma_op(size_t n_at, size_t x_at) {
  return [n_at, x_at](Context& c, const Args& a) {
    Value x = coerce(c.b, a[x_at].tensor, compute_type(c));
    return Values{c.b.convert(polygamma(c.b, a[n_at].i, x), c.out().dtype)};
  };
}

Values zeta_op(Context& c, const Args& a) {
  require_full_width(c);
  TensorType t = compute_type(c);
  Value r = zeta(c.b, coerce(c.b, a[0].tensor, t), coerce(c.b, a[1].tensor, t));
  return {c.b.convert(r, c.out().dtype)};
}

// _standard_gamma_grad(self = alpha, output = the sample x), computed in
// double as CPU's kernel does.
Values standard_gamma_grad_op(Context& c, const Args& a) {
  require_full_width(c);
  TensorType t{ElementType::kF64, c.out().shape};
  Value r = standard_gamma_grad(c.b, coerce(c.b, a[0].tensor, t), coerce(c.b, a[1].tensor, t));
  return {c.b.convert(r, c.out().dtype)};
}

// _dirichlet_grad(x, alpha, total), broadcast together.
Values dirichlet_grad_op(Context& c, const Args& a) {
  require_full_width(c);
  TensorType t = compute_type(c);
  Value r = dirichlet_grad(c.b, coerce(c.b, a[0].tensor, t), coerce(c.b, a[1].tensor, t),
                           coerce(c.b, a[2].tensor, t));
  return {c.b.convert(r, c.out().dtype)};
}

LoweringFn incomplete_gamma_op(bool lower) {
  return [lower](Context& c, const Args& a) {
    TensorType t = compute_type(c);
    Value r = incomplete_gamma(c.b, coerce(c.b, a[0].tensor, t), coerce(c.b, a[1].tensor, t), lower);
    return Values{c.b.convert(r, c.out().dtype)};
  };
}

}  // namespace

// Registered after the elementwise family: replaces its chlo-based digamma.
void register_special_gamma(Registry& r) {
  r.add("aten::digamma", digamma_op);
  r.add("aten::polygamma", polygamma_op(0, 1));
  r.add("aten::polygamma_", polygamma_op(1, 0));
  for (const char* op : {"aten::special_zeta", "aten::special_zeta.self_scalar",
                         "aten::special_zeta.other_scalar"})
    r.add(op, zeta_op);
  r.add("aten::igamma", incomplete_gamma_op(true));
  r.add("aten::igammac", incomplete_gamma_op(false));
  r.add("aten::_standard_gamma_grad", standard_gamma_grad_op);
  r.add("aten::_dirichlet_grad", dirichlet_grad_op);
}

}  // namespace torch_tpu::lowering
