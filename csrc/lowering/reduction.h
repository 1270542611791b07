// Rules shared by the reduction family's files: reduction.cc (sums, extrema,
// moments, norms, softmax), reduction_scan.cc (cumulative ops) and
// reduction_sort.cc (sort, topk, order statistics).
#pragma once

#include <functional>

#include "helpers.h"

namespace torch_tpu::lowering {

// The dims a reduction runs over, normalized, sorted and unique. `dim` is an
// int, an int list or absent; absent means all dims, and so does an empty
// list when `empty_is_all` (sum, mean, amax, var, norms; not any/all.dims).
// A 0-dim tensor reduces over nothing.
std::vector<int64_t> reduction_dims(const Arg& dim, int64_t rank, bool empty_is_all = true);

// Extremes that propagate NaN, as PyTorch's do (stablehlo.maximum and
// minimum return the number on XLA:CPU). Non-floats use the plain ops.
Value nan_max(Builder& b, Value p, Value q);
Value nan_min(Builder& b, Value p, Value q);
Value reduce_extreme(Builder& b, Value x, const std::vector<int64_t>& dims, bool max);

// PyTorch's error for reducing an empty `dim` where there is no identity
// (max, median, mode, ...), which its meta functions do not all raise.
void require_nonempty(const Context& c, Value x, int64_t dim);

// `r`, reduced over `dims` of `shape`, broadcast back to `shape`.
Value broadcast_back(Builder& b, Value r, const std::vector<int64_t>& shape,
                     const std::vector<int64_t>& dims);

// `r` reshaped and converted to output `i` (reshaping covers keepdim).
Value to_output(Context& c, Value r, size_t i = 0);

// Elementwise "is NaN"; all false for non-float types.
Value is_nan(Builder& b, Value x);

// A 0-dim tensor as shape [1] (ops along a dim treat a scalar as one element).
Value at_least_1d(Builder& b, Value x);

// Types that order like PyTorch's comparisons: bool compares as an integer.
Value orderable(Builder& b, Value x);

// The element at position `pos` (i64, `x` reduced over `dim`) along `dim`.
Value pick(Builder& b, Value x, Value pos, int64_t dim);

// Inclusive scan along `dim`. `combine(earlier, later)` must be associative;
// `identities` are scalars that leave a value unchanged as `earlier`.
using CombineFn = std::function<Values(Builder&, const Values& earlier, const Values& later)>;
Values scan(Builder& b, Values xs, int64_t dim, const Values& identities,
            const CombineFn& combine);

void register_reduction_scan(Registry& r);
void register_reduction_sort(Registry& r);

}  // namespace torch_tpu::lowering
