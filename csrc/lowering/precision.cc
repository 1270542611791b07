#include "precision.h"

namespace torch_tpu::lowering {

Values bf16_terms(Builder& b, Value x, int n) {
  Values terms;
  Value rest = x;
  for (int i = 0; i < n; ++i) {
    Value term = b.reduce_precision(rest, 8, 7);  // round to bf16, stay f32
    terms.push_back(term);
    if (i + 1 < n) rest = b.sub(rest, term);      // exact in f32
  }
  return terms;
}

namespace {

int term_count(Precision p) {
  switch (p) {
    case Precision::kDefault: return 1;
    case Precision::kHigh: return 2;
    default: return 3;
  }
}

}  // namespace

Value precise(Builder& b, Precision p, Value lhs, Value rhs, const Contraction& f) {
  if (lhs.dtype() != ElementType::kF32 || p == Precision::kFloat32) return f(lhs, rhs);
  int n = term_count(p);
  Values x = bf16_terms(b, lhs, n), y = bf16_terms(b, rhs, n);
  Value top = f(x[0], y[0]);
  if (n == 1) return top;
  Value sum = b.add(f(x[0], y[1]), f(x[1], y[0]));
  if (n == 3) {
    Value small = b.add(b.add(f(x[0], y[2]), f(x[2], y[0])), f(x[1], y[1]));
    sum = b.add(small, sum);
  }
  // Where hi·hi is inf or NaN an operand was: the correction terms would turn
  // an inf into NaN (inf · 0), so the leading product is the answer.
  return b.select(b.is_finite(top), b.add(sum, top), top);
}

const char* dot_precision_name(Precision p, ElementType dtype) {
  switch (dtype) {
    case ElementType::kBF16: return "DEFAULT";
    case ElementType::kF32: return p == Precision::kFloat32 ? "HIGHEST" : "DEFAULT";
    case ElementType::kF16:
    case ElementType::kF64:
    case ElementType::kC64:
    case ElementType::kC128: return "HIGHEST";
    default: return "";
  }
}

Value precise_dot(Context& c, Value lhs, Value rhs, const DotDims& d, bool keep_f32) {
  ElementType t = lhs.dtype();
  bool half = t == ElementType::kBF16 || t == ElementType::kF16;
  ElementType acc = half ? ElementType::kF32 : t;
  const char* name = dot_precision_name(c.precision, t);
  Value r = precise(c.b, c.precision, lhs, rhs, [&](Value l, Value r) {
    return c.b.dot_general(l, r, d.lhs_batch, d.rhs_batch, d.lhs_contract, d.rhs_contract, acc,
                           name);
  });
  return half && !keep_f32 ? c.b.convert(r, t) : r;
}

}  // namespace torch_tpu::lowering
