#include "storage.h"

#include <ATen/core/TensorBase.h>
#include <c10/util/Exception.h>

#include "device.h"

namespace torch_tpu::aten {

namespace {

constexpr int kMaxDevices = 64;

void free_state(void* ctx) {
  auto* s = static_cast<StorageState*>(ctx);
  auto& stats = memory_stats(s->device);
  stats.allocated -= static_cast<int64_t>(s->nbytes);
  ++stats.frees;
  delete s;
}

class TpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    int device = current_device();
    auto* s = new StorageState;
    s->nbytes = nbytes;
    s->device = device;
    auto& stats = memory_stats(device);
    int64_t now = stats.allocated += static_cast<int64_t>(nbytes);
    int64_t peak = stats.peak.load();
    while (now > peak && !stats.peak.compare_exchange_weak(peak, now)) {
    }
    ++stats.allocations;
    // The data pointer is the state itself: unique per storage, never
    // dereferenced as memory by anyone but us.
    return {s, s, &free_state, c10::Device(c10::DeviceType::PrivateUse1, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    TORCH_CHECK(false, "tpu storages cannot be copied as raw memory; use Tensor.copy_");
  }
};

}  // namespace

StorageState& state_of(const c10::Storage& storage) {
  TORCH_CHECK(storage.device_type() == c10::DeviceType::PrivateUse1,
              "expected a tpu storage, got one on ", storage.device());
  void* ctx = storage.data_ptr().get_context();
  TORCH_CHECK(ctx != nullptr && storage.data_ptr().get_deleter() == &free_state,
              "tpu storage without device state (was it created by torch_tpu?)");
  return *static_cast<StorageState*>(ctx);
}

StorageState& state_of(const at::TensorBase& tensor) { return state_of(tensor.storage()); }

c10::Allocator* allocator() {
  static TpuAllocator instance;
  return &instance;
}

MemoryStats& memory_stats(int device) {
  static MemoryStats stats[kMaxDevices];
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "bad tpu device index ", device);
  return stats[device];
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, allocator());

}  // namespace torch_tpu::aten
