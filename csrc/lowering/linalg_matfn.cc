// Matrix functions: linalg_matrix_exp as CPU PyTorch computes it (Bader,
// Blanes and Casas' optimized Taylor polynomials), step by step, so the two
// agree to rounding: the same degree from the same 1-norm thresholds, the
// same products and linear combinations in the same order, and the same
// scaling-and-squaring count, and for small matrices CPU's own product loop.
// CPU picks the degree (1, 2, 4, 8, 12 or 18) only for a single matrix; a
// batch of more than one always takes degree 18 with scaling and squaring.
// 16-bit inputs compute in f32 (CPU's own 16-bit result overflows to NaN/inf).
#include <array>
#include <cmath>
#include <optional>

#include "linalg_common.h"
#include "reduction.h"

namespace torch_tpu::lowering {

namespace {

using namespace linalg;

// The real type of a real or complex matrix (its norm's and scale's type).
ElementType real_type(ElementType t) { return hlo::is_complex(t) ? part_type(t) : t; }

// The coefficients as CPU's kernel holds them: in the compute type, so an f32
// program reads each value rounded to float (derived ones from rounded parts).
struct Rounding {
  bool f32;
  double operator()(double v) const { return f32 ? static_cast<float>(v) : v; }
};

// CPU's _compute_linear_combination: Σ c[j]·m[j] accumulated from zero in
// order, each product rounded on its own (CPU's loop is not contracted into
// fused multiply-adds).
Value combine(Builder& b, const std::vector<Value>& m, const std::vector<double>& c) {
  Value acc = splat_like(b, 0, m[0]);
  for (size_t j = 0; j < m.size(); ++j)
    acc = b.add(acc, unfused(b, b.mul(m[j], splat_like(b, c[j], m[j]))));
  return acc;
}

// CPU's matrix product for a [B, n, n] batch: below 400 multiply-adds per
// matrix its bmm runs a plain loop, each entry summed over k in order from
// zero with every product rounded, which this repeats (so squaring amplifies
// the same rounding on both sides); larger products go to MKL, whose order is
// its own, and take the full-precision dot.
Value product(Builder& b, Value x, Value y) {
  int64_t B = x.dim(0), n = x.dim(1);
  if (n * n * n >= 400) return matmul(b, x, y);
  Value acc = splat_like(b, 0, x);
  for (int64_t k = 0; k < n; ++k) {
    Value col = b.broadcast_to(b.slice(x, {0, 0, k}, {B, n, k + 1}), x.shape());
    Value row = b.broadcast_to(b.slice(y, {0, k, 0}, {B, k + 1, n}), x.shape());
    acc = b.add(acc, unfused(b, b.mul(col, row)));
  }
  return acc;
}

// The Taylor approximations of exp(a), a [B, n, n], by degree.
class Taylor {
 public:
  Taylor(Builder& b, Value a)
      : b_(b), r_{real_type(a.dtype()) == ElementType::kF32}, a_(a),
        id_(eye(b, a.dtype(), {a.dim(0)}, a.dim(1), a.dim(1))) {}

  Value t1() { return b_.add(id_, a_); }
  Value t2() { return b_.add(b_.add(id_, a_), b_.mul(a2(), splat_like(b_, 0.5, a_))); }

  Value t4() {
    Value q = combine(b_, {id_, a_, a2()}, {r_(1 / 2.0), r_(1 / 6.0), r_(1 / 24.0)});
    Value p = product(b_, a2(), q);
    return combine(b_, {id_, a_, a2(), p}, {1, 1, 0, 1});
  }

  Value t8() {
    double sqrt_177 = r_(0.1330413469565007072504e+2), x3 = r_(2. / 3.);
    double x1 = r_(x3 * ((1. + sqrt_177) / 88.)), x2 = r_(x3 * ((1. + sqrt_177) / 352.));
    double x4 = r_((-271. + 29. * sqrt_177) / (315. * x3));
    double x5 = r_((-11. + 11. * sqrt_177) / (1260. * x3));
    double x6 = r_((-99. + 11. * sqrt_177) / (5040. * x3));
    double x7 = r_((89. - sqrt_177) / (5040. * x3));
    double y2 = r_((857. - 58. * sqrt_177) / 630.);
    Value a4 = product(b_, a2(), combine(b_, {a_, a2()}, {x1, x2}));
    Value a8 = product(b_, combine(b_, {a2(), a4}, {x3, 1}),
                      combine(b_, {id_, a_, a2(), a4}, {x4, x5, x6, x7}));
    return combine(b_, {id_, a_, a2(), a4, a8}, {1, 1, y2, 0, 1});
  }

  Value t12() {
    static const double c[4][4] = {
        {9.0198e-16, 0.46932117595418237389, -0.20099424927047284052, -0.04623946134063071740},
        {5.31597895759871264183, 1.19926790417132231573, 0.01179296240992997031,
         0.01108844528519167989},
        {0.18188869982170434744, 0.05502798439925399070, 0.09351590770535414968,
         0.00610700528898058230},
        {-2.0861320e-13, -0.13181061013830184015, -0.02027855540589259079,
         -0.00675951846863086359}};
    std::vector<Value> bs = rows({id_, a_, a2(), a3()}, &c[0][0]);
    Value b2 = b_.add(bs[2], product(b_, bs[3], bs[3]));
    return b_.add(bs[0], product(b_, b_.add(bs[1], b2), b2));
  }

  Value t18() {
    static const double c[5][5] = {
        {0., -1.00365581030144618291e-01, -8.02924648241156932449e-03,
         -8.92138498045729985177e-04, 0.},
        {0., 3.97849749499645077844e-01, 1.36783778460411720168e+00, 4.98289622525382669416e-01,
         -6.37898194594723280150e-04},
        {-1.09676396052962061844e+01, 1.68015813878906206114e+00, 5.71779846478865511061e-02,
         -6.98210122488052056106e-03, 3.34975017086070470649e-05},
        {-9.04316832390810593223e-02, -6.76404519071381882256e-02, 6.75961301770459654925e-02,
         2.95552570429315521194e-02, -1.39180257516060693404e-05},
        {0., 0., -9.23364619367118555360e-02, -1.69364939002081722752e-02,
         -1.40086798182036094347e-05}};
    std::vector<Value> bs = rows({id_, a_, a2(), a3(), product(b_, a3(), a3())}, &c[0][0]);
    Value b3 = b_.add(bs[3], product(b_, bs[0], bs[4]));
    return b_.add(bs[1], product(b_, b_.add(bs[2], b3), b3));
  }

 private:
  Value a2() { return a2_ ? *a2_ : *(a2_ = product(b_, a_, a_)); }
  Value a3() { return a3_ ? *a3_ : *(a3_ = product(b_, a_, a2())); }

  // One combination of `m` per row of the row-major coefficients `c`.
  std::vector<Value> rows(const std::vector<Value>& m, const double* c) {
    size_t k = m.size();
    std::vector<Value> out;
    for (size_t i = 0; i < k; ++i) {
      std::vector<double> row;
      for (size_t j = 0; j < k; ++j) row.push_back(r_(c[i * k + j]));
      out.push_back(combine(b_, m, row));
    }
    return out;
  }

  Builder& b_;
  Rounding r_;
  Value a_, id_;
  std::optional<Value> a2_, a3_;
};

// CPU's thresholds on ‖a‖₁ for degrees 1, 2, 4, 8, 12 and 18.
std::array<double, 6> thetas(ElementType t) {
  if (t == ElementType::kF64)
    return {2.220446049250313e-16, 2.580956802971767e-08, 3.397168839976962e-04,
            4.991228871115323e-02, 2.996158913811580e-01, 1.090863719290036e+00};
  Rounding r{true};
  return {r(1.192092800768788e-07), r(5.978858893805233e-04), r(5.116619363445086e-02),
          r(5.800524627688768e-01), r(1.461661507209034e+00), r(3.010066362817634e+00)};
}

// The float of `t` with value 2^e for integer e (i32 or i64 matching `t`'s
// width) within the normal exponent range.
Value pow2(Builder& b, Value e, ElementType t) {
  bool f32 = t == ElementType::kF32;
  Value bits = b.mul(b.add(e, splat_like(b, f32 ? 127 : 1023, e)),
                     splat_like(b, f32 ? 8388608.0 : 4503599627370496.0, e));
  return b.bitcast_convert(bits, TensorType{t, e.shape()});
}

// CPU's squaring count ceil(log2(r)) clamped at 0, for r = ‖a‖₁ / θ ≥ 0, as a
// float (inf/NaN where r is). log2 is taken from r's exponent and the log of
// its mantissa, so an exact power of two gives an exact integer, and the sum
// rounds to the float type as log2f's result does.
Value log2_ceil(Builder& b, Value r) {
  bool f32 = r.dtype() == ElementType::kF32;
  ElementType it = f32 ? kI32 : ElementType::kI64;
  int mant = f32 ? 23 : 52, bias = f32 ? 127 : 1023;
  Value bits = b.bitcast_convert(r, TensorType{it, r.shape()});
  Value unit = splat(b, std::ldexp(1.0, mant), it, r.shape());
  Value field = b.div(bits, unit);  // the biased exponent (r's sign bit is clear)
  // r's mantissa as a value in [1, 2): its fraction bits under the exponent 0.
  Value fraction = b.sub(bits, b.mul(field, unit));
  Value m = b.bitcast_convert(b.add(fraction, b.mul(splat_like(b, bias, field), unit)), r.type());
  Value k = b.convert(b.sub(field, splat_like(b, bias, field)), r.dtype());
  Value lg = b.add(k, b.div(b.log(m), splat_like(b, std::log(2.0), m)));
  Value s = b.max(b.ceil(lg), splat_like(b, 0, lg));
  return b.select(b.is_finite(r), s, r);
}

// CPU's compute_T18_scale_square: a [B, n, n] scaled by 2^-s, the degree-18
// approximation, squared s times, s per matrix.
Value t18_scaled(Builder& b, Value a, Value norm) {
  ElementType t = real_type(a.dtype());
  Value s = log2_ceil(b, b.div(norm, splat_like(b, thetas(t)[5], norm)));
  Value finite = b.is_finite(s);
  ElementType it = t == ElementType::kF32 ? kI32 : ElementType::kI64;
  Value si = b.convert(b.select(finite, s, splat_like(b, 0, s)), it);
  Value half = b.div(si, splat_like(b, 2, si));
  // 2^-s as two normal factors: their product is exact, and s may exceed the
  // normal range by one.
  Value scale = b.mul(pow2(b, b.neg(half), t), pow2(b, b.neg(b.sub(si, half)), t));
  // s = inf scales by 0, s = NaN by NaN, as CPU's pow(2, -s) does.
  scale = b.select(finite, scale, b.select(is_nan(b, s), s, splat_like(b, 0, s)));
  Value p = Taylor(b, b.mul(a, b.convert(b.broadcast_in_dim(scale, a.shape(), {0}), a.dtype()))).t18();
  // CPU squares matrices grouped by ascending s, each group continuing from
  // the last; a non-finite s sorts last and converts to a negative count, so
  // that matrix is squared as often as the largest finite s.
  Value count = b.convert(si, kI32);
  Value most = reduce_max(b, count, {0});
  count = b.select(finite, count, b.broadcast_to(most, count.shape()));
  Values out = b.while_loop(
      {b.constant(kI32, 0), most, count, p},
      [](Builder& w, const Values& st) { return Values{w.compare(Compare::kLT, st[0], st[1])}; },
      [](Builder& w, const Values& st) {
        Value live = w.compare(Compare::kLT, w.broadcast_to(st[0], st[2].shape()), st[2]);
        Value sq = product(w, st[3], st[3]);
        Value next = w.select(w.broadcast_in_dim(live, st[3].shape(), {0}), sq, st[3]);
        return Values{w.add(st[0], w.constant(kI32, 1)), st[1], st[2], next};
      });
  return out[3];
}

// CPU's mexp on a [B, n, n] (n ≥ 2).
Value matrix_exp_flat(Builder& b, Value a) {
  Value norm = reduce_extreme(b, reduce_sum(b, b.abs(a), {1}), {1}, true);
  if (a.dim(0) > 1) return t18_scaled(b, a, norm);
  // One matrix: the degree whose norm interval holds ‖a‖₁; a NaN norm matches
  // none and leaves CPU's NaN fill.
  auto th = thetas(real_type(a.dtype()));
  Taylor taylor(b, a);
  auto pick = [&](Compare dir, double bound, Value then, Value otherwise) {
    Value hit = b.compare(dir, norm, splat_like(b, bound, norm));
    return b.select(b.broadcast_in_dim(hit, a.shape(), {0}), then, otherwise);
  };
  Value e = pick(Compare::kLE, th[0], taylor.t1(), splat_like(b, NAN, a));
  e = pick(Compare::kGT, th[0], taylor.t2(), e);
  e = pick(Compare::kGT, th[1], taylor.t4(), e);
  e = pick(Compare::kGT, th[2], taylor.t8(), e);
  e = pick(Compare::kGT, th[3], taylor.t12(), e);
  return pick(Compare::kGE, th[4], t18_scaled(b, a, norm), e);
}

Values matrix_exp(Context& c, const Args& a) {
  Value x = a[0].tensor;
  require_floating(c, x);
  int64_t r = x.rank(), n = x.dim(r - 1), B = 1;
  for (int64_t d = 0; d < r - 2; ++d) B *= x.dim(d);
  if (B * n == 0) return {x};
  ElementType compute = hlo::is_complex(x.dtype()) || x.dtype() == ElementType::kF64
                            ? x.dtype() : ElementType::kF32;
  Value xc = c.b.convert(x, compute);
  Value e = n == 1 ? c.b.exp(xc) : matrix_exp_flat(c.b, c.b.reshape(xc, {B, n, n}));
  return {c.b.convert(c.b.reshape(e, x.shape()), x.dtype())};
}

}  // namespace

void register_linalg_matfn(Registry& r) {
  r.add("aten::linalg_matrix_exp", matrix_exp);
}

}  // namespace torch_tpu::lowering
