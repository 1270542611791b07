// Internal to the convolution family (conv.cc, pool.cc, upsample.cc): the
// per-file registration functions that register_conv calls, and helpers they
// share.
#pragma once

#include "helpers.h"

namespace torch_tpu::lowering {

void register_pool(Registry& r);
void register_upsample(Registry& r);

// `v` repeated to `n` entries when PyTorch allows one value for all spatial
// dims (kernel_size=3 means 3x3).
std::vector<int64_t> expand(const std::vector<int64_t>& v, size_t n);

// x[..., :shape[i], ...]: the leading corner of `x` with `shape`.
Value crop(Builder& b, Value x, const std::vector<int64_t>& shape);

// The sizes of `x` from dim `first` on.
std::vector<int64_t> tail(const std::vector<int64_t>& shape, size_t first);

// x[..., index, ...] along `dim`, for a 1-d i64 `index`.
Value take(Builder& b, Value x, int64_t dim, Value index);

}  // namespace torch_tpu::lowering
