// Views as programs: reading a strided view (sizes, strides, offset) out of a
// flat storage array, and writing a value back into it. This is how tpu
// tensors alias exactly like CPU tensors while device arrays stay immutable.
#pragma once

#include "registry.h"

namespace torch_tpu::lowering {

struct Strided {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  int64_t numel() const;
  bool contiguous() const;  // row-major dense (size-1 dims ignored)
};

// The view of `flat` (rank 1). Uses slice/reshape/transpose/broadcast when the
// view is a strided box of the storage, a gather otherwise.
Value strided_read(Builder& b, Value flat, const Strided& view);
// `flat` with the view's elements replaced by `value` (shape view.sizes).
Value strided_write(Builder& b, Value flat, Value value, const Strided& view);
// Flat row-major layout of `value` for a dense view that covers the storage
// exactly (any permutation of dims); invalid Value when it does not.
Value dense_layout(Builder& b, Value value, const Strided& view, int64_t storage_numel);
// Whether dense_layout is valid: the view covers the storage exactly, its
// dims in some order row-major.
bool covers_densely(const Strided& view, int64_t storage_numel);

}  // namespace torch_tpu::lowering
