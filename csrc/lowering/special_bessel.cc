// Bessel functions of orders 0 and 1 (J, Y, K and e^x K), the spherical j0
// and Airy's Ai. No fitted tables: each region uses a formula whose error
// is known in closed form, with its size chosen for the working precision
// (16-bit floats are rejected, as on CPU):
//  - J and Y below R: Bessel's integral J_n(x) = (1/2π)∫cos(nθ - x sin θ)dθ
//    over one period by the trapezoid rule, which converges geometrically
//    for a periodic analytic integrand (the error is J_{M-n}(x) for M
//    points); Y from Neumann's series of J_{2k} (A&S 9.1.88) and its
//    derivative, so all four share one set of samples cos/sin(x sin θ_j).
//  - J and Y above R: Hankel's asymptotic expansion (its least term is
//    about e^{-2x}).
//  - K: the power series below 2; e^x K_ν(x) = ∫ e^{-x(cosh t - 1)} cosh νt dt
//    by the trapezoid rule on the half line up to 20; the asymptotic
//    expansion above.
//  - Ai: Taylor steps of Ai'' = x Ai from Ai(0), Ai'(0) on [-X, 1] (stable:
//    oscillatory or short); Ai = √(x/3) K_{1/3}(ζ)/π above 1; the oscillatory
//    asymptotic expansion below -X.
#include <cmath>
#include <utility>
#include <vector>

#include "special_common.h"

namespace torch_tpu::lowering {

namespace {

using namespace special;

constexpr double kEuler = 0.57721566490153286061;

Value sin(Builder& b, Value x) { return b.unary("stablehlo.sine", x); }
Value cos(Builder& b, Value x) { return b.unary("stablehlo.cosine", x); }
double tolerance(Value x) { return wide(x) ? 1e-18 : 1e-10; }


// Picks `big` where `use_big`, evaluating each side on inputs clamped to its
// own region so that neither produces spurious overflow or NaN.
Value piecewise(Builder& b, Value use_big, Value x, double edge,
                const std::function<Value(Value)>& small, const std::function<Value(Value)>& big) {
  Value e = k(b, edge, x);
  return b.select(use_big, big(b.select(use_big, x, e)), small(b.select(use_big, e, x)));
}

// ---- asymptotic expansions ---------------------------------------------------------

// a_k(ν) = Π_{j≤k} (4ν² - (2j-1)²) / (k! 8^k), the coefficients of Hankel's
// expansions, up to the last one still shrinking and above `tol` at x = `at`.
std::vector<double> hankel_coefficients(double nu, double at, double tol) {
  std::vector<double> a{1};
  for (int j = 1; j < 80; ++j) {
    double next = a.back() * (4 * nu * nu - (2.0 * j - 1) * (2 * j - 1)) / (8.0 * j * at);
    if (std::abs(next) >= std::abs(a.back()) || std::abs(a.back()) < tol) break;
    a.push_back(next);
  }
  for (size_t j = 0; j < a.size(); ++j) a[j] *= std::pow(at, double(j));  // back to a_k
  return a;
}

// Σ s_k a_k / x^k with signs s_k = +1 (K's expansion) or the (P, Q) split of
// J and Y: P = Σ (-1)^m a_{2m} x^{-2m}, Q = Σ (-1)^m a_{2m+1} x^{-2m-1}.
Value sum_in_inverse(Builder& b, Value inv, const std::vector<double>& c) {
  return c.empty() ? k(b, 0, inv) : polynomial(b, inv, c);
}
std::pair<Value, Value> hankel_pq(Builder& b, Value x, double nu, double at) {
  std::vector<double> a = hankel_coefficients(nu, at, tolerance(x)), p, q;
  for (size_t j = 0; j < a.size(); ++j) {
    double sign = (j / 2) % 2 ? -1 : 1;
    (j % 2 ? q : p).push_back(sign * a[j]);
  }
  Value inv = b.div(k(b, 1, x), x), inv2 = b.mul(inv, inv);
  return {sum_in_inverse(b, inv2, p), b.mul(inv, sum_in_inverse(b, inv2, q))};
}

// ---- J0, J1, Y0, Y1 -------------------------------------------------------------------

// Where Hankel's expansion takes over, and the trapezoid points per period.
double hankel_from(Value x) { return wide(x) ? 20 : 12; }
int points(Value x) { return wide(x) ? 120 : 72; }

// A combination Σ coef_n J_n(x) = Σ_r c_r cos(x sin θ_r) + s_r sin(x sin θ_r),
// folded onto the quarter period θ_r = 2πr/M, r = 0..M/4 (sin θ_r ≥ 0).
struct Weights {
  std::vector<double> c, s;
};

Weights fold(int m, const std::vector<std::pair<int, double>>& terms) {
  Weights w{std::vector<double>(m / 4 + 1), std::vector<double>(m / 4 + 1)};
  for (int i = 0; i < m; ++i) {
    int quarter = i / (m / 4);
    int r = quarter == 0 ? i : quarter == 1 ? m / 2 - i : quarter == 2 ? i - m / 2 : m - i;
    if (i == m / 4) r = m / 4;
    double sign = i > m / 2 ? -1 : 1, theta = 2 * M_PI * i / m;
    for (const auto& [n, coef] : terms) {
      w.c[r] += coef * std::cos(n * theta) / m;
      w.s[r] += sign * coef * std::sin(n * theta) / m;
    }
  }
  return w;
}

Value apply(Builder& b, Value x, const Weights& w) {
  int m = static_cast<int>(w.c.size() - 1) * 4;
  Value acc = k(b, 0, x);
  for (size_t r = 0; r < w.c.size(); ++r) {
    Value arg = b.mul(x, k(b, std::sin(2 * M_PI * r / m), x));
    if (std::abs(w.c[r]) > 1e-15) acc = b.add(acc, b.mul(k(b, w.c[r], x), cos(b, arg)));
    if (std::abs(w.s[r]) > 1e-15) acc = b.add(acc, b.mul(k(b, w.s[r], x), sin(b, arg)));
  }
  return acc;
}

// Neumann's series to J_{2K+1}: J_n(R) is negligible past n = 2K, and the
// M points keep the aliased J_{M-n} negligible for every n ≤ 2K + 1.
int neumann_terms(Value x) { return wide(x) ? 28 : 16; }

// (Y0 - (2/π)(log(x/2) + γ) J0): -(4/π) Σ_k (-1)^k J_{2k} / k.
Weights y0_rest(Value x) {
  std::vector<std::pair<int, double>> t;
  for (int kk = 1; kk <= neumann_terms(x); ++kk) t.push_back({2 * kk, -4 / M_PI * (kk % 2 ? -1 : 1) / kk});
  return fold(points(x), t);
}
// (Y1 - (2/π)((log(x/2) + γ) J1 - J0/x)): (2/π) Σ_k (-1)^k (J_{2k-1} - J_{2k+1}) / k.
Weights y1_rest(Value x) {
  std::vector<std::pair<int, double>> t;
  for (int kk = 1; kk <= neumann_terms(x); ++kk) {
    double c = 2 / M_PI * (kk % 2 ? -1 : 1) / kk;
    t.push_back({2 * kk - 1, c});
    t.push_back({2 * kk + 1, -c});
  }
  return fold(points(x), t);
}

Value j_integral(Builder& b, Value x, int n) { return apply(b, x, fold(points(x), {{n, 1.0}})); }

Value log_term(Builder& b, Value x) {  // (2/π)(log(x/2) + γ)
  return b.mul(k(b, 2 / M_PI, x), b.add(b.log(b.mul(x, k(b, 0.5, x))), k(b, kEuler, x)));
}

Value y_integral(Builder& b, Value x, int n) {
  if (n == 0) return b.add(b.mul(log_term(b, x), j_integral(b, x, 0)), apply(b, x, y0_rest(x)));
  Value j0_over_x = b.div(j_integral(b, x, 0), x);
  Value lead = b.sub(b.mul(log_term(b, x), j_integral(b, x, 1)), b.mul(k(b, 2 / M_PI, x), j0_over_x));
  return b.add(lead, apply(b, x, y1_rest(x)));
}

// Hankel: J = √(2/πx)(P cos χ - Q sin χ), Y = √(2/πx)(P sin χ + Q cos χ),
// χ = x - (2n+1)π/4 (formed as CPU forms it, so large x rounds alike).
Value hankel(Builder& b, Value x, int n, bool y) {
  auto [p, q] = hankel_pq(b, x, n, hankel_from(x));
  Value chi = b.sub(x, k(b, (2 * n + 1) * M_PI / 4, x));
  Value c = cos(b, chi), s = sin(b, chi);
  Value r = y ? b.add(b.mul(p, s), b.mul(q, c)) : b.sub(b.mul(p, c), b.mul(q, s));
  return b.mul(r, b.sqrt(b.div(k(b, 2 / M_PI, x), x)));
}

Value bessel_j(Builder& b, Value x, int n) {
  Value ax = b.abs(x), R = k(b, hankel_from(x), x);
  Value r = piecewise(b, b.compare(Compare::kGT, ax, R), ax, hankel_from(x),
                      [&](Value v) { return j_integral(b, v, n); },
                      [&](Value v) { return hankel(b, v, n, false); });
  return n == 1 ? b.select(lt(b, x, 0), b.neg(r), r) : r;
}

Value bessel_y(Builder& b, Value x, int n) {
  Value pos = b.max(x, k(b, 0, x));
  Value r = piecewise(b, gt(b, x, hankel_from(x)), pos, hankel_from(x),
                      [&](Value v) { return y_integral(b, v, n); },
                      [&](Value v) { return hankel(b, v, n, true); });
  r = b.select(eq(b, x, 0), k(b, -INFINITY, x), r);
  return b.select(lt(b, x, 0), k(b, NAN, x), r);
}

Value j0(Builder& b, Value x) { return bessel_j(b, x, 0); }
Value j1(Builder& b, Value x) { return bessel_j(b, x, 1); }
Value y0(Builder& b, Value x) { return bessel_y(b, x, 0); }
Value y1(Builder& b, Value x) { return bessel_y(b, x, 1); }

// ---- K0, K1 and e^x K -------------------------------------------------------------------

constexpr double kQuadratureUpTo = 20;

// e^z K_ν(z) for z ≥ z_min: the trapezoid rule on ∫_0^T e^{-z(cosh t - 1)} cosh νt dt
// up to 20 (its error is about e^{0.74 z - 8.2/h}); Hankel's expansion above.
Value scaled_k_quadrature(Builder& b, Value z, double nu, double z_min) {
  double h = wide(z) ? 0.15 : 0.2, log_tol = -std::log(tolerance(z));
  Value acc = k(b, 0.5, z);  // the t = 0 node, halved
  for (int j = 1;; ++j) {
    double t = j * h, c = std::cosh(t) - 1;
    if (z_min * c - nu * t > log_tol) break;
    Value node = b.exp(b.mul(z, k(b, -c, z)));
    acc = b.add(acc, nu == 0 ? node : b.mul(node, k(b, std::cosh(nu * t), z)));
  }
  return b.mul(acc, k(b, h, z));
}
Value scaled_k_asymptotic(Builder& b, Value z, double nu) {
  std::vector<double> a = hankel_coefficients(nu, kQuadratureUpTo, tolerance(z));
  Value series = polynomial(b, b.div(k(b, 1, z), z), a);
  return b.mul(series, b.sqrt(b.div(k(b, M_PI / 2, z), z)));
}
Value scaled_k(Builder& b, Value z, double nu, double z_min) {
  return piecewise(b, gt(b, z, kQuadratureUpTo), z, kQuadratureUpTo,
                   [&](Value v) { return scaled_k_quadrature(b, v, nu, z_min); },
                   [&](Value v) { return scaled_k_asymptotic(b, v, nu); });
}

// Below 2 (A&S 9.6.13): with y = x²/4 and harmonic numbers H_k,
// K0 = Σ y^k/k!² (H_k - log(x/2) - γ),
// K1 = 1/x + (x/2) Σ y^k/(k!(k+1)!) (log(x/2) + γ - (H_k + H_{k+1})/2).
Value k_series(Builder& b, Value x, int n) {
  int terms = wide(x) ? 15 : 10;
  std::vector<double> plain, harmonic;
  double fact = 1, h = 0;
  for (int j = 0; j < terms; ++j) {
    if (j > 0) fact *= j, h += 1.0 / j;
    double denom = n == 0 ? fact * fact : fact * fact * (j + 1);
    plain.push_back(1 / denom);
    harmonic.push_back((n == 0 ? h : (2 * h + 1.0 / (j + 1)) / 2) / denom);
  }
  Value y = b.mul(k(b, 0.25, x), b.mul(x, x));
  Value lg = b.add(b.log(b.mul(x, k(b, 0.5, x))), k(b, kEuler, x));
  Value p = polynomial(b, y, plain), hs = polynomial(b, y, harmonic);
  if (n == 0) return b.sub(hs, b.mul(lg, p));
  Value sum = b.sub(b.mul(lg, p), hs);
  return b.add(b.div(k(b, 1, x), x), b.mul(b.mul(x, k(b, 0.5, x)), sum));
}

Value bessel_k(Builder& b, Value x, int n, bool scaled) {
  Value pos = b.max(x, k(b, 0, x));
  Value r = piecewise(b, gt(b, x, 2), pos, 2,
                      [&](Value v) { return scaled ? b.mul(k_series(b, v, n), b.exp(v)) : k_series(b, v, n); },
                      [&](Value v) {
                        Value s = scaled_k(b, v, n, 2);
                        return scaled ? s : b.mul(s, b.exp(b.neg(v)));
                      });
  r = b.select(eq(b, x, 0), k(b, INFINITY, x), r);
  return b.select(lt(b, x, 0), k(b, NAN, x), r);
}

Value k0(Builder& b, Value x) { return bessel_k(b, x, 0, false); }
Value k1(Builder& b, Value x) { return bessel_k(b, x, 1, false); }
Value k0e(Builder& b, Value x) { return bessel_k(b, x, 0, true); }
Value k1e(Builder& b, Value x) { return bessel_k(b, x, 1, true); }

// ---- spherical j0, Airy Ai ---------------------------------------------------------------

Value spherical_j0(Builder& b, Value x) {
  Value r = b.div(sin(b, x), x);
  r = b.select(eq(b, x, 0), k(b, 1, x), r);
  return b.select(eq(b, b.abs(x), INFINITY), k(b, 0, x), r);
}

// Where Ai's oscillatory expansion takes over (its least term ~ e^{-2ζ}), and
// the Taylor steps and degree that reach it from 0.
double airy_from(Value x) { return wide(x) ? 10 : 6; }
int airy_steps(Value x) { return wide(x) ? 20 : 12; }
int airy_degree(Value x) { return wide(x) ? 28 : 18; }

// One Taylor step of y'' = x y from x0 by h: with c_n the Taylor coefficients,
// e_n = c_n h^{n-1} obeys e_{n+2} = (x0 e_n + h e_{n-1}) h² / ((n+2)(n+1)).
Values airy_step(Builder& w, const Values& s, int degree) {
  Value x0 = s[1], y = s[2], yp = s[3], h = s[4];
  Value h2 = w.mul(h, h);
  std::vector<Value> e(degree + 1);
  e[1] = yp;
  e[2] = w.mul(w.mul(x0, y), w.mul(h, k(w, 0.5, h)));
  e[3] = w.div(w.mul(w.add(w.mul(x0, yp), y), h2), k(w, 6, h));
  for (int m = 4; m <= degree; ++m)
    e[m] = w.div(w.mul(w.add(w.mul(x0, e[m - 2]), w.mul(h, e[m - 3])), h2), k(w, double(m) * (m - 1), h));
  Value sum = e[degree], dsum = w.mul(k(w, degree, h), e[degree]);
  for (int m = degree - 1; m >= 1; --m) {  // small terms first
    sum = w.add(sum, e[m]);
    dsum = w.add(dsum, w.mul(k(w, m, h), e[m]));
  }
  Value one = w.constant(ElementType::kI64, 1);
  return {w.add(s[0], one), w.add(x0, h), w.add(y, w.mul(h, sum)), dsum, h};
}

Value airy_taylor(Builder& b, Value x) {
  int steps = airy_steps(x), degree = airy_degree(x);
  Value h = b.div(x, k(b, steps, x));
  Value i0 = b.constant(ElementType::kI64, 0);
  Values out = b.while_loop(
      {i0, k(b, 0, x), k(b, 0.355028053887817239260, x), k(b, -0.258819403792806798405, x), h},
      [steps](Builder& w, const Values& s) {
        return Values{w.compare(Compare::kLT, s[0], w.constant(ElementType::kI64, steps))};
      },
      [degree](Builder& w, const Values& s) { return airy_step(w, s, degree); });
  return out[2];
}

// Ai(x) = √(x/3) e^{-ζ} (e^ζ K_{1/3}(ζ)) / π with ζ = 2x^{3/2}/3, for x ≥ 1.
Value airy_decaying(Builder& b, Value x) {
  Value zeta = b.div(b.mul(k(b, 2, x), b.mul(x, b.sqrt(x))), k(b, 3, x));
  Value s = scaled_k(b, zeta, 1.0 / 3, 2.0 / 3);
  Value pre = b.mul(b.sqrt(b.div(x, k(b, 3, x))), k(b, 1 / M_PI, x));
  return b.mul(b.mul(pre, s), b.exp(b.neg(zeta)));
}

// Ai(x) = (sin t P - cos t Q) / (√π (-x)^{1/4}), t = ζ + π/4 (as CPU forms it),
// P = Σ (-1)^k u_{2k} ζ^{-2k}, Q = Σ (-1)^k u_{2k+1} ζ^{-2k-1}, for x ≤ -X.
Value airy_oscillating(Builder& b, Value x) {
  Value zeta = b.div(b.mul(b.mul(k(b, -2, x), x), b.sqrt(b.neg(x))), k(b, 3, x));
  Value t = b.add(zeta, k(b, M_PI / 4, x));
  double at = 2 * std::pow(airy_from(x), 1.5) / 3;
  std::vector<double> p, q;
  double u = 1;
  for (int j = 0; j < 60; ++j) {
    double last = u / std::pow(at, j - 1);
    if (j > 0) u *= (6.0 * j - 5) * (6.0 * j - 3) * (6.0 * j - 1) / ((2.0 * j - 1) * 216 * j);
    double term = std::abs(u) / std::pow(at, j);
    if (term < tolerance(x) || (j > 0 && term >= std::abs(last))) break;
    (j % 2 ? q : p).push_back(((j / 2) % 2 ? -1 : 1) * u);
  }
  Value inv = b.div(k(b, 1, x), zeta), inv2 = b.mul(inv, inv);
  Value P = sum_in_inverse(b, inv2, p), Q = b.mul(inv, sum_in_inverse(b, inv2, q));
  Value r = b.sub(b.mul(sin(b, t), P), b.mul(cos(b, t), Q));
  return b.div(r, b.mul(k(b, std::sqrt(M_PI), x), b.sqrt(b.sqrt(b.neg(x)))));
}

Value airy_ai(Builder& b, Value x) {
  double X = airy_from(x);
  Value taylor = airy_taylor(b, b.clamp(k(b, -X, x), x, k(b, 1, x)));
  Value r = b.select(b.compare(Compare::kGE, x, k(b, 1, x)), airy_decaying(b, b.max(x, k(b, 1, x))), taylor);
  r = b.select(lt(b, x, -X), airy_oscillating(b, b.min(x, k(b, -X, x))), r);
  r = b.select(gt(b, x, 103.892), k(b, 0, x), r);
  r = b.select(eq(b, b.abs(x), INFINITY), k(b, NAN, x), r);
  return b.select(b.compare(Compare::kNE, x, x), x, r);
}

using UnaryOp = Value (*)(Builder&, Value);

// Integers and bool promote to the default float (PyTorch's meta function
// says which); 16-bit floats are rejected, as on CPU.
LoweringFn special_unary(UnaryOp f) {
  return [f](Context& c, const Args& a) {
    ElementType t = c.out().dtype;
    if (t != ElementType::kF32 && t != ElementType::kF64)
      throw Unsupported(c.op + " is implemented for float32 and float64 only (as on CPU)");
    Value x = coerce(c.b, a[0].tensor, t, c.out().shape);
    return Values{f(c.b, x)};
  };
}

}  // namespace

void register_special_bessel(Registry& r) {
  const std::pair<const char*, UnaryOp> ops[] = {
      {"bessel_j0", j0}, {"bessel_j1", j1}, {"bessel_y0", y0}, {"bessel_y1", y1},
      {"modified_bessel_k0", k0}, {"modified_bessel_k1", k1},
      {"scaled_modified_bessel_k0", k0e}, {"scaled_modified_bessel_k1", k1e},
      {"spherical_bessel_j0", spherical_j0}, {"airy_ai", airy_ai},
  };
  for (const auto& [name, f] : ops) r.add(std::string("aten::special_") + name, special_unary(f));
}

}  // namespace torch_tpu::lowering
