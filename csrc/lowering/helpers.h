// Shared rules for lowerings: PyTorch type promotion, broadcasting, dims.
#pragma once

#include <optional>

#include "registry.h"

namespace torch_tpu::lowering {

enum class Category { kBool, kInt, kFloat, kComplex };
Category category(ElementType t);

// torch.promote_types.
ElementType promote_types(ElementType a, ElementType b);
// torch.result_type over the tensor arguments at `indices`: dim>0 tensors,
// then 0-dim tensors, then Python scalars, each tier only raising the
// category (PyTorch's three-tier rule).
ElementType result_type(const Args& args, std::initializer_list<size_t> indices);

// The shape two shapes broadcast to (numpy rules); throws Unsupported.
std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a,
                                      const std::vector<int64_t>& b);
// Converts `v` to `dtype` and broadcasts it to `shape`.
Value coerce(Builder& b, Value v, ElementType dtype, const std::vector<int64_t>& shape);
// Converts and broadcasts to `t`.
inline Value coerce(Builder& b, Value v, const TensorType& t) {
  return coerce(b, v, t.dtype, t.shape);
}

// Normalizes a possibly negative dim for a tensor of `rank` (rank 0 acts as 1).
int64_t wrap_dim(int64_t dim, int64_t rank);
std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t rank);

// Scalar constant of `dtype` broadcast to `like`'s shape.
Value splat(Builder& b, double value, ElementType dtype, const std::vector<int64_t>& shape);
inline Value splat_like(Builder& b, double value, Value like) {
  return splat(b, value, like.dtype(), like.shape());
}

// Reductions with a monoid body, over `dims`. reduce_max/min follow
// stablehlo.maximum/minimum, whose NaN handling varies by backend: use them
// for integers, or see reduction.h for the NaN-propagating float forms.
Value reduce_sum(Builder& b, Value x, const std::vector<int64_t>& dims);
Value reduce_max(Builder& b, Value x, const std::vector<int64_t>& dims);
Value reduce_min(Builder& b, Value x, const std::vector<int64_t>& dims);
// Largest/smallest finite-or-infinite value of a type (init for max/min).
double lowest(ElementType t);
double highest(ElementType t);

// A run-time check (Builder::check) that `ok` (pred, any shape) holds
// everywhere; `message` says what was wrong, as PyTorch words it.
// `index_error`: PyTorch raises IndexError for it (else RuntimeError).
void check_all(Builder& b, Value ok, std::string message, bool index_error = true);
// check_all that every index lies in [lo, hi) (or equals `except`, if set).
void check_in_range(Builder& b, Value idx, int64_t lo, int64_t hi, std::string message,
                    std::optional<int64_t> except = std::nullopt, bool index_error = true);

// Keeps reduced dims as size 1: reshapes `x` reduced over `dims` of `shape`.
Value keepdim(Builder& b, Value x, const std::vector<int64_t>& shape,
              const std::vector<int64_t>& dims);

// The result of `x` accumulated in f32 when it is a 16-bit float (as PyTorch
// does on CPU for sums), else `x` unchanged.
ElementType accumulation_type(ElementType t);
inline bool is_half(ElementType t) { return accumulation_type(t) != t; }

// Complex numbers: the type of a complex type's parts (c64 -> f32, c128 ->
// f64), a complex value's real and imaginary parts, a complex value of type
// `t` from its parts, and the conjugate (the identity on real values).
ElementType part_type(ElementType complex);
Value real_part(Builder& b, Value z);
Value imag_part(Builder& b, Value z);
Value make_complex(Builder& b, Value re, Value im, const TensorType& t);
Value conj(Builder& b, Value z);

// A resampled (interpolated) value in the output's type: an integer output
// (uint8 images) is rounded to nearest and clamped to the type's range, as
// CPU's uint8 resampling kernels do; a float one is converted.
Value resampled_to(Builder& b, Value y, ElementType out);
// log(exp(x) + exp(y)) of complex x and y as CPU's kernel takes it: NaN in
// either part of either gives NaN + NaN i; with m the one of larger real part
// and n the other, equal infinite real parts give n (-inf) or
// log(exp(n) + exp(m)) (+inf), anything else log1p(exp(n - m)) + m.
Value complex_log_add_exp(Builder& b, Value x, Value y);

// PyTorch CPU's numerics for 16-bit float results (`opmath_type`): the op
// computes in f32 and rounds each result once. `f` sees f32 result types, so
// the operands it coerces widen exactly. Operands reach `f` as CPU's kernel
// receives them: tensors cast to the result dtype (as TensorIterator casts
// them); Scalars as they came unless `round_scalars` (add and sub read alpha
// and a Python number in the tensor dtype). With `wide_scalar_other`, a
// 0-dim second operand is read unrounded too, as CPU's mul and div read a
// scalar `other` (a bf16 tensor times a 0-dim f32 tensor multiplies by the
// f32 value; a 0-dim first operand is cast like any tensor). Other result
// types run `f` unchanged, so f32 programs are untouched. For elementwise ops
// only.
LoweringFn opmath(LoweringFn f, bool round_scalars = false, bool wide_scalar_other = false);

// The opposite case: where CPU computes a 16-bit op as a chain of 16-bit ATen
// ops (addr, composite losses), each step rounds. `x` (computed in f32)
// rounded to the values of the 16-bit float `t`, staying f32 — through
// reduce_precision, which compilers do not fold away as they may an f32 →
// 16-bit → f32 convert pair. The identity for other `t`.
Value round_like(Builder& b, Value x, ElementType t);

// `v` unchanged, but opaque to the compiler's rewrites: a product stays
// rounded (XLA:CPU contracts a product and the sum it feeds into one fused
// multiply-add, which CPU's scalar kernels do not), a sqrt stays a sqrt (1 /
// sqrt is not turned into the less exact rsqrt). The select keeps NaN.
Value unfused(Builder& b, Value v);

}  // namespace torch_tpu::lowering
