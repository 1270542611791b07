// Cumulative ops: cumsum, cumprod, cummax, cummin, logcumsumexp.
// All are one inclusive scan (log-depth doubling) with a different combine.
#include <cmath>

#include "reduction.h"

namespace torch_tpu::lowering {

// Hillis–Steele: at step k every position combines with the value 2^k places
// before it (the identity where there is none): ceil(log2 n) steps of pad +
// elementwise, which XLA fuses, instead of reduce_window's n-wide windows.
Values scan(Builder& b, Values xs, int64_t dim, const Values& identities,
            const CombineFn& combine) {
  const int64_t n = xs.at(0).dim(dim);
  for (int64_t k = 1; k < n; k *= 2) {
    std::vector<int64_t> low(xs[0].rank(), 0), high(xs[0].rank(), 0);
    low[dim] = k;
    high[dim] = -k;  // negative padding drops the last k
    Values earlier;
    for (size_t i = 0; i < xs.size(); ++i) earlier.push_back(b.pad(xs[i], identities[i], low, high));
    xs = combine(b, earlier, xs);
  }
  return xs;
}

namespace {

Values add(Builder& b, const Values& e, const Values& l) { return {b.add(e[0], l[0])}; }
Values mul(Builder& b, const Values& e, const Values& l) { return {b.mul(e[0], l[0])}; }

// cumsum / cumprod (self, dim, dtype?): in the output type, 16-bit floats in
// f32 (CPU accumulates in float and rounds each element).
LoweringFn accumulate_fn(double identity, const CombineFn& f) {
  return [=](Context& c, const Args& a) {
    ElementType out = c.out().dtype;
    Value x = at_least_1d(c.b, c.b.convert(c.b.convert(a[0].tensor, out), accumulation_type(out)));
    if (x.dtype() == ElementType::kPred) x = c.b.convert(x, ElementType::kI64);
    int64_t d = wrap_dim(a[1].i, x.rank());
    Value id = c.b.constant(x.dtype(), identity);
    return Values{to_output(c, scan(c.b, {x}, d, {id}, f)[0])};
  };
}

// cummax/cummin: a later element replaces the running extreme when it is at
// least as large (small), or NaN; so ties and NaNs report the last index.
CombineFn running_extreme(bool max) {
  return [max](Builder& b, const Values& e, const Values& l) {
    Value wins = b.compare(max ? hlo::Compare::kGE : hlo::Compare::kLE, l[0], e[0]);
    wins = b.or_(wins, is_nan(b, l[0]));
    return Values{b.select(wins, l[0], e[0]), b.select(wins, l[1], e[1])};
  };
}

LoweringFn cumulative_extreme_fn(bool max) {
  return [=](Context& c, const Args& a) {
    Builder& b = c.b;
    Value x = orderable(b, at_least_1d(b, a[0].tensor));
    int64_t d = wrap_dim(a[1].i, x.rank());
    Value idx = b.iota({ElementType::kI64, x.shape()}, d);
    double init = max ? lowest(x.dtype()) : highest(x.dtype());
    Value id = x.dtype() == ElementType::kI64
                   ? b.constant_int(x.dtype(), max ? INT64_MIN : INT64_MAX)
                   : b.constant(x.dtype(), init);
    Values r = scan(b, {x, idx}, d, {id, b.constant(ElementType::kI64, -1)}, running_extreme(max));
    return Values{to_output(c, r[0], 0), to_output(c, r[1], 1)};
  };
}

// logcumsumexp as a scan over pairs (M, S) meaning M + log S: M the running
// maximum (an input element, exact), S = sum exp(x - M) in [1, n]. The result
// M + log S is rounded once, as CPU's double accumulation is; a scan of
// rounded log-sums would drift by ulps at large magnitudes, and the backward
// formula (exp(logcumsumexp(..) + self)) turns that drift into visible error.
// For complex x, M is the running maximum of the real parts and S complex.
Values combine_log_sums(Builder& b, const Values& e, const Values& l) {
  Value m = nan_max(b, e[0], l[0]);
  auto weight = [&](Value mi) {
    Value w = b.select(b.compare(hlo::Compare::kEQ, mi, m), splat_like(b, 1, mi), b.exp(b.sub(mi, m)));
    return b.convert(w, e[1].dtype());
  };
  return {m, b.add(b.mul(e[1], weight(e[0])), b.mul(l[1], weight(l[0])))};
}

// CPU's own loop over `dim` of complex x: cum = log_add_exp(x_i, cum) from
// -inf. Its imaginary parts are not the principal branch: each step adds the
// angle of 1 + exp(n - m) to the larger operand's.
Value log_add_exp_chain(Builder& b, Value x, int64_t dim) {
  std::vector<int64_t> perm{dim}, row_shape;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (i != dim) perm.push_back(i), row_shape.push_back(x.dim(i));
  Value xt = b.transpose(x, perm);
  std::vector<int64_t> one_row = xt.shape();
  one_row[0] = 1;
  ElementType part = part_type(x.dtype());
  Value neg_inf = b.full({part, row_shape}, -INFINITY);
  Value start = make_complex(b, neg_inf, b.full({part, row_shape}, 0), {x.dtype(), row_shape});
  Value zero = b.constant_int(ElementType::kI64, 0);
  auto at = [&](Builder& q, Value i) {
    Values starts(xt.rank(), zero);
    starts[0] = i;
    return starts;
  };
  Values state = b.while_loop(
      {zero, start, b.full(xt.type(), 0), xt},
      [&](Builder& q, const Values& v) {
        return Values{q.compare(hlo::Compare::kLT, v[0], q.constant_int(ElementType::kI64, x.dim(dim)))};
      },
      [&](Builder& q, const Values& v) {
        Value xi = q.reshape(q.dynamic_slice(v[3], at(q, v[0]), one_row), row_shape);
        Value cum = complex_log_add_exp(q, xi, v[1]);
        Value out = q.dynamic_update_slice(v[2], q.reshape(cum, one_row), at(q, v[0]));
        return Values{q.add(v[0], q.constant_int(ElementType::kI64, 1)), cum, out, v[3]};
      });
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  return b.transpose(state[2], inverse);
}

// logcumsumexp(self, dim): 16-bit floats accumulate in f32, as on CPU.
// Complex values as pairs too (CPU accumulates them in complex<double>): an
// element x starts as (re x, exp(i im x)); the principal logarithm of the sum
// is moved onto the branch of CPU's loop, run in the output precision (its
// value there drifts at large magnitudes, its branch does not). Where the loop
// is not finite (infinite or NaN parts) its value is CPU's.
Values logcumsumexp(Context& c, const Args& a) {
  ElementType out = c.out().dtype;
  if (hlo::is_complex(out)) {
    Builder& b = c.b;
    Value x = at_least_1d(b, b.convert(a[0].tensor, out));
    int64_t dim = wrap_dim(a[1].i, x.rank());
    Value re = real_part(b, x), zero = splat_like(b, 0, re);
    Value s = b.exp(make_complex(b, zero, imag_part(b, x), x.type()));
    Values ids{b.constant(part_type(out), -INFINITY), b.constant(out, 0)};
    Values r = scan(b, {re, s}, dim, ids, combine_log_sums);
    Value sum = b.add(make_complex(b, r[0], zero, x.type()), b.log(r[1]));
    Value chain = log_add_exp_chain(b, x, dim);
    Value turns = b.unary("stablehlo.round_nearest_even", b.div(b.sub(imag_part(b, chain), imag_part(b, sum)),
                                             splat_like(b, 2 * M_PI, zero)));
    Value im = b.add(imag_part(b, sum), b.mul(turns, splat_like(b, 2 * M_PI, zero)));
    Value finite = b.and_(b.is_finite(turns), b.is_finite(real_part(b, chain)));
    return {to_output(c, b.select(finite, make_complex(b, real_part(b, sum), im, x.type()), chain))};
  }
  Value x = at_least_1d(c.b, c.b.convert(c.b.convert(a[0].tensor, out), accumulation_type(out)));
  int64_t d = wrap_dim(a[1].i, x.rank());
  Values ids{c.b.constant(x.dtype(), -INFINITY), c.b.constant(x.dtype(), 0)};
  Values r = scan(c.b, {x, splat_like(c.b, 1, x)}, d, ids, combine_log_sums);
  return {to_output(c, c.b.add(r[0], c.b.log(r[1])))};
}

}  // namespace

void register_reduction_scan(Registry& r) {
  r.add("aten::cumsum", accumulate_fn(0, add));
  r.add("aten::cumprod", accumulate_fn(1, mul));
  r.add("aten::cummax", cumulative_extreme_fn(true));
  r.add("aten::cummin", cumulative_extreme_fn(false));
  r.add("aten::logcumsumexp", logcumsumexp);
}

}  // namespace torch_tpu::lowering
