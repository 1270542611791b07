// Operators that fill gaps of the OpInfo sweep without a family of their own:
// hash_tensor and logcumsumexp here, and (through register_linalg_lstsq)
// geqrf and linalg_lstsq, and linalg_ldl_factor_ex.
#include <cmath>

#include "reduction.h"

namespace torch_tpu::lowering {

void register_linalg_lstsq(Registry& r);  // linalg_lstsq.cc
void register_linalg_ldl(Registry& r);    // linalg_ldl.cc

namespace {

// The 64-bit pattern CPU hashes: floats widened to f64, integers and bools
// to i64 (sign-extended), then reinterpreted as u64.
Value as_u64(Builder& b, Value x) {
  TensorType u64{ElementType::kU64, x.shape()};
  if (x.dtype() == ElementType::kU64) return x;
  if (hlo::is_float(x.dtype()))
    return b.bitcast_convert(b.convert(x, ElementType::kF64), u64);
  if (x.dtype() == ElementType::kPred || x.dtype() == ElementType::kU8 ||
      x.dtype() == ElementType::kU16 || x.dtype() == ElementType::kU32)
    return b.convert(x, ElementType::kU64);
  return b.bitcast_convert(b.convert(x, ElementType::kI64), u64);
}

// hash_tensor(self, dim, keepdim, mode): xor of the elements' u64 patterns
// over `dim` (all dims when empty); mode 0 is the only mode.
Values hash_tensor(Context& c, const Args& a) {
  if (a[3].i != 0) throw Unsupported(c.op + " mode " + std::to_string(a[3].i));
  Value x = a[0].tensor;
  if (hlo::is_complex(x.dtype())) throw Unsupported(c.op + " of a complex tensor");
  std::vector<int64_t> dims = a[1].ints;
  if (dims.empty()) {
    for (int64_t d = 0; d < x.rank(); ++d) dims.push_back(d);
  }
  dims = wrap_dims(dims, x.rank());
  if (x.rank() == 0) dims.clear();
  Value u = as_u64(c.b, x);
  Value zero = c.b.constant(ElementType::kU64, 0);
  Value h = c.b.reduce({u}, {zero}, dims, [](Builder& w, const Values& s) {
    return Values{w.xor_(s[0], s[1])};
  })[0];
  return {c.b.reshape(h, c.out().shape)};
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

void register_ops_gaps(Registry& r) {
  r.add("aten::hash_tensor", hash_tensor);
  r.add("aten::logcumsumexp", logcumsumexp);
  register_linalg_lstsq(r);
  register_linalg_ldl(r);
}

}  // namespace torch_tpu::lowering
