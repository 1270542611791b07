// Storage of a `tpu` tensor: a flat device array behind the StorageImpl.
// Tensors are ordinary strided TensorImpls over it, so views alias exactly as
// on CPU; reads and writes of a view become slices, gathers or scatters in
// the program (see tensor_io.h).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

#include <cstddef>
#include <cstdint>

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

// The allocator registered for the PrivateUse1 device type. It is a
// c10::DeviceAllocator, so `torch.accelerator`'s memory API reads it.
c10::Allocator* allocator();

// Per-device statistics in PyTorch's allocator shape. Nothing is cached: a
// storage's device array is freed with it, so reserved == allocated == active
// and a storage is one segment. Device indices are checked (c10::Error).
void record_allocation(int device, size_t bytes);
void record_free(int device, size_t bytes);
void record_resize(int device, size_t old_bytes, size_t new_bytes);
c10::CachingDeviceAllocator::DeviceStats device_stats(int device);
void reset_peak_stats(int device);
void reset_accumulated_stats(int device);

}  // namespace torch_tpu::aten
