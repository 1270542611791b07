// PrivateUse1 hooks: what PyTorch asks of an accelerator backend (generators,
// availability, device of a pointer, storage resize from Python).
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Storage.h>

#include "device.h"
#include "generator.h"
#include "pinned.h"
#include "storage.h"
#include "tensor_io.h"

namespace torch_tpu::aten {

namespace {

struct TpuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device < 0 ? current_device() : device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return at::make_generator<TpuGenerator>(device < 0 ? current_device() : device);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    return c10::Device(c10::DeviceType::PrivateUse1,
                       static_cast<StorageState*>(data)->device);
  }
  // PJRT copies host memory itself; "pinned" host tensors are ordinary ones,
  // remembered so that is_pinned() says so (pinned.h).
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
  bool hasPrimaryContext(c10::DeviceIndex device) const override {
    return device >= 0 && device < device_count();
  }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count());
  }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(current_device());
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto old = getCurrentDevice();
    set_current_device(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage(storage, newsize);
  }
};

struct Registrar {
  Registrar() { at::RegisterPrivateUse1HooksInterface(new TpuHooks); }
} registrar;

}  // namespace
}  // namespace torch_tpu::aten
