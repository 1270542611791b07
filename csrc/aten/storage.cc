#include "storage.h"

#include <ATen/core/TensorBase.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <mutex>

#include "../engine/engine.h"
#include "autograd_thread.h"
#include "device.h"

namespace torch_tpu::aten {

namespace {

constexpr int kMaxDevices = 64;

// One device's counters: bytes and allocations. A Stat keeps current,
// peak and the running totals allocated/freed.
struct Counters {
  std::mutex mutex;
  c10::CachingAllocator::Stat bytes, count;
};

Counters& counters(int device) {
  static std::array<Counters, kMaxDevices> all;
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "tpu: bad device index ", device);
  return all[device];
}

void free_state(void* ctx) {
  auto* s = static_cast<StorageState*>(ctx);
  record_free(s->device, s->nbytes);
  delete s;
}

// Host memory, for plugins that report no device limit (XLA:CPU).
std::pair<size_t, size_t> host_memory_info() {
  long page = sysconf(_SC_PAGESIZE);
  long total = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
  if (page <= 0 || total <= 0) return {0, 0};
  return {static_cast<size_t>(std::max(avail, 0L)) * page, static_cast<size_t>(total) * page};
}

class TpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    note_tpu_work();  // this thread's backward runs on it (autograd_thread.h)
    int device = current_device();
    auto* s = new StorageState;
    s->nbytes = nbytes;
    s->device = device;
    record_allocation(device, nbytes);
    // The data pointer is the state itself: unique per storage, never
    // dereferenced as memory by anyone but us.
    return {s, s, &free_state, c10::Device(c10::DeviceType::PrivateUse1, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    TORCH_CHECK(false, "tpu storages cannot be copied as raw memory; use Tensor.copy_");
  }

  bool initialized() override { return true; }
  // Nothing is cached; finishing pending work lets the arrays of dead
  // tensors that queued programs still hold go.
  void emptyCache(c10::MempoolId_t) override {
    if (engine::Engine::initialized()) engine::Engine::get().synchronize();
  }
  // One queue per device: a storage is never reused before its last reader.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    return device_stats(checked(device));
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    reset_accumulated_stats(checked(device));
  }
  void resetPeakStats(c10::DeviceIndex device) override { reset_peak_stats(checked(device)); }
  // (free, total) bytes: the plugin's limit for the device, else the host's.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    int64_t limit = engine::Engine::get().client().memory_limit(checked(device));
    if (limit < 0) return host_memory_info();
    int64_t used = device_stats(device).reserved_bytes[0].current;
    return {static_cast<size_t>(std::max<int64_t>(limit - used, 0)), static_cast<size_t>(limit)};
  }

 private:
  // -1 is the current device, as torch.accelerator passes it.
  static int checked(c10::DeviceIndex device) {
    int index = device == -1 ? current_device() : device;
    check_device(index);
    return index;
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

void record_allocation(int device, size_t bytes) {
  auto& c = counters(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.bytes.increase(bytes);
  c.count.increase(1);
}

void record_free(int device, size_t bytes) {
  auto& c = counters(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.bytes.decrease(bytes);
  c.count.decrease(1);
}

void record_resize(int device, size_t old_bytes, size_t new_bytes) {
  auto& c = counters(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  if (new_bytes > old_bytes) c.bytes.increase(new_bytes - old_bytes);
  if (new_bytes < old_bytes) c.bytes.decrease(old_bytes - new_bytes);
}

c10::CachingDeviceAllocator::DeviceStats device_stats(int device) {
  auto& c = counters(device);
  c10::CachingAllocator::Stat bytes, count;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    bytes = c.bytes;
    count = c.count;
  }
  // Every storage is one allocation in one segment of its own size; pools
  // are not split, so all of it is the aggregate and the large pool.
  auto fill = [](c10::CachingAllocator::StatArray& a, const c10::CachingAllocator::Stat& s) {
    a[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)] = s;
    a[static_cast<size_t>(c10::CachingAllocator::StatType::LARGE_POOL)] = s;
  };
  c10::CachingDeviceAllocator::DeviceStats d;
  for (auto* a : {&d.allocation, &d.segment, &d.active}) fill(*a, count);
  for (auto* a : {&d.allocated_bytes, &d.reserved_bytes, &d.active_bytes, &d.requested_bytes})
    fill(*a, bytes);
  d.num_device_alloc = count.allocated;
  d.num_device_free = count.freed;
  return d;
}

void reset_peak_stats(int device) {
  auto& c = counters(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.bytes.reset_peak();
  c.count.reset_peak();
}

void reset_accumulated_stats(int device) {
  auto& c = counters(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.bytes.reset_accumulated();
  c.count.reset_accumulated();
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, allocator());

}  // namespace torch_tpu::aten
