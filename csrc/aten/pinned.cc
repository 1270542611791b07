#include "pinned.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <mutex>
#include <unordered_set>

namespace torch_tpu::aten {

namespace {

std::mutex mu;
std::unordered_set<const void*>& live() {
  static auto* set = new std::unordered_set<const void*>;  // outlives static tensors
  return *set;
}

void free_pinned(void* data) {
  {
    std::lock_guard<std::mutex> lock(mu);
    live().erase(data);
  }
  c10::free_cpu(data);
}

// An at::HostAllocator, so `torch.accelerator`'s host-memory calls
// (empty_host_cache, which torch.accelerator.Graph makes on entry) find one
// for tpu. Nothing is cached: an allocation is freed with its tensor.
class PinnedAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    // At least one byte: an empty tensor still gets its own address.
    void* data = c10::alloc_cpu(std::max<size_t>(nbytes, 1));
    {
      std::lock_guard<std::mutex> lock(mu);
      live().insert(data);
    }
    return {data, data, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override { return {}; }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

PinnedAllocator& instance() {
  static PinnedAllocator allocator;
  return allocator;
}

REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &instance())

}  // namespace

c10::Allocator* pinned_allocator() { return &instance(); }

bool is_pinned(const void* data) {
  std::lock_guard<std::mutex> lock(mu);
  return live().count(data) > 0;
}

}  // namespace torch_tpu::aten
