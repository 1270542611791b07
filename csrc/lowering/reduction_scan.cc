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
Values combine_log_sums(Builder& b, const Values& e, const Values& l) {
  Value m = nan_max(b, e[0], l[0]);
  auto weight = [&](Value mi) {
    return b.select(b.compare(hlo::Compare::kEQ, mi, m), splat_like(b, 1, mi), b.exp(b.sub(mi, m)));
  };
  return {m, b.add(b.mul(e[1], weight(e[0])), b.mul(l[1], weight(l[0])))};
}

// logcumsumexp(self, dim): 16-bit floats accumulate in f32, as on CPU.
Values logcumsumexp(Context& c, const Args& a) {
  ElementType out = c.out().dtype;
  if (hlo::is_complex(out)) throw Unsupported(c.op + " of a complex tensor");
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
