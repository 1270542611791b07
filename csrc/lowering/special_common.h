// Small helpers shared by the special-function lowerings (special.cc,
// special_bessel.cc, special_gamma.cc): comparisons with a constant, splats,
// polynomials.
#pragma once

#include <vector>

#include "helpers.h"

namespace torch_tpu::lowering::special {

using hlo::Compare;

// `v` in the type of `like`.
inline Value k(Builder& b, double v, Value like) { return splat_like(b, v, like); }
inline Value lt(Builder& b, Value x, double v) { return b.compare(Compare::kLT, x, k(b, v, x)); }
inline Value gt(Builder& b, Value x, double v) { return b.compare(Compare::kGT, x, k(b, v, x)); }
inline Value eq(Builder& b, Value x, double v) { return b.compare(Compare::kEQ, x, k(b, v, x)); }
inline bool wide(Value x) { return x.dtype() == ElementType::kF64; }

// c[0] + c[1] y + c[2] y² + ... (Horner).
inline Value polynomial(Builder& b, Value y, const std::vector<double>& c) {
  Value acc = k(b, c.back(), y);
  for (size_t i = c.size() - 1; i-- > 0;) acc = b.add(k(b, c[i], y), b.mul(acc, y));
  return acc;
}

}  // namespace torch_tpu::lowering::special
