#include "pinned.h"

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

class PinnedAllocator final : public c10::Allocator {
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
};

}  // namespace

c10::Allocator* pinned_allocator() {
  static PinnedAllocator instance;
  return &instance;
}

bool is_pinned(const void* data) {
  std::lock_guard<std::mutex> lock(mu);
  return live().count(data) > 0;
}

}  // namespace torch_tpu::aten
