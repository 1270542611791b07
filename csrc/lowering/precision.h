// TPU matmul numerics, emitted explicitly so that every plugin gives the
// numbers a TPU gives (ARCHITECTURE.md, Precision). An f32 operand is split
// into bf16-representable terms x = hi + mid + lo (reduce_precision to
// 8 exponent / 7 mantissa bits); the modes sum products of terms:
//
//   DEFAULT  hi·hi                                   1 product
//   HIGH     hi·hi + hi·mid + mid·hi                 3 products (bf16x3)
//   HIGHEST  HIGH + mid·mid + hi·lo + lo·hi          6 products (bf16x6)
//   FLOAT32  the plugin's own f32 contraction
//
// Each product of bf16-exact operands is exact in f32, so any f32 contraction
// (XLA:CPU, TF32 on a GPU, one bf16 pass on a TPU) computes it the same way;
// the products are accumulated in f32, smallest terms first.
#pragma once

#include <functional>

#include "registry.h"

namespace torch_tpu::lowering {

// A bilinear contraction of two operands (dot_general, convolution, ...)
// whose result dtype is f32 when the operands are f32.
using Contraction = std::function<Value(Value lhs, Value rhs)>;

// `f(lhs, rhs)` at precision `p`: f32 operands use the bf16 split above;
// other dtypes call `f` once.
Value precise(Builder& b, Precision p, Value lhs, Value rhs, const Contraction& f);

// The bf16-representable terms of an f32 `x`: {hi, mid, lo}, first `n`.
Values bf16_terms(Builder& b, Value x, int n);

// The dot_general precision attribute of a contraction at `p` on `dtype`
// operands: DEFAULT for bf16-exact split terms, HIGHEST for a plain f32 or
// f64 contraction (so a GPU does not use TF32, a TPU uses all its passes).
const char* dot_precision_name(Precision p, ElementType dtype);

struct DotDims {
  std::vector<int64_t> lhs_batch, rhs_batch, lhs_contract, rhs_contract;
};

// lhs·rhs (dot_general) with TPU numerics: f32 by `c.precision`; bf16 and f16
// with f32 accumulation, rounded once to their dtype (as a TPU MXU does);
// other dtypes plain. Where the target says so (`c.target.bf16_split_dots`,
// `checked_bf16_dots`: XLA:CPU), the split terms and bf16 operands enter the
// dot as marked bf16 values (engine/xla_cpu/bf16_dots.h). The result has the operands' dtype unless
// `keep_f32` is set for 16-bit operands (for fused epilogues).
Value precise_dot(Context& c, Value lhs, Value rhs, const DotDims& dims, bool keep_f32 = false);

}  // namespace torch_tpu::lowering
