// Storage of a `tpu` tensor: a flat device array behind the StorageImpl.
// Tensors are ordinary strided TensorImpls over it, so views alias exactly as
// on CPU; reads and writes of a view become slices, gathers or scatters in
// the program (see tensor_io.h).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include <atomic>
#include <cstddef>

#include "../engine/value.h"

namespace at {
class TensorBase;
}

namespace torch_tpu::aten {

struct StorageState {
  engine::ValuePtr value;  // flat [nbytes / element size]; null until written
  hlo::ElementType dtype = hlo::ElementType::kU8;  // the value's element type
  size_t nbytes = 0;
  int device = 0;
};

// The state behind a tpu storage / tensor. Throws c10::Error for others.
StorageState& state_of(const c10::Storage& storage);
StorageState& state_of(const at::TensorBase& tensor);

// The allocator registered for the PrivateUse1 device type.
c10::Allocator* allocator();

struct MemoryStats {
  std::atomic<int64_t> allocated{0}, peak{0}, allocations{0}, frees{0};
};
MemoryStats& memory_stats(int device);

}  // namespace torch_tpu::aten
