// Gather/scatter building blocks shared by the indexing and shape families.
//
// Index semantics on tpu: negative indices wrap (the dim size is added where
// an index is < 0). Out-of-range indices are checked on the device
// (check_in_range, a Builder::check): the engine reports a violation as
// PyTorch's error at the next host read or synchronize. With the checks off
// they follow XLA: gathers clamp the start index into range and scatters
// drop out-of-range updates.
#pragma once

#include "helpers.h"

namespace torch_tpu::lowering {

// Combine rule of a scatter: replace, or reduce with the current value.
enum class Combine { kReplace, kAdd, kMul, kMax, kMin };

// Advanced indexing (`x[i, :, j]`): `indices` holds one entry per leading dim
// of `self`, an invalid Value for a full slice. The index tensors broadcast
// together; their dims go where the first index is when the indexed dims are
// adjacent, else in front (NumPy's rule).
Value index_gather(Builder& b, Value self, const Values& indices, const TensorType& out);
// `self` with `values` (broadcast to the shape index_gather would return)
// written at the indexed places, combined by `combine`.
Value index_scatter(Builder& b, Value self, const Values& indices, Value values,
                    Combine combine);

// `x` along `dim` at the static positions `idx` (a gather of constants).
Value take_static(Builder& b, Value x, int64_t dim, const std::vector<int64_t>& idx);
// Zeros of `size` along `dim` with the slices of `g` added at positions `idx`
// (the adjoint of take_static).
Value add_static(Builder& b, Value g, int64_t dim, const std::vector<int64_t>& idx,
                 int64_t size);

// Inclusive prefix sum of a rank-1 value (log-step doubling).
Value prefix_sum(Builder& b, Value x);

}  // namespace torch_tpu::lowering
