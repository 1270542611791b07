#include "device.h"

#include <ATen/Context.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "../engine/engine.h"
#include "stream.h"

namespace torch_tpu::aten {

namespace {
thread_local int t_current_device = 0;
}  // namespace

int current_device() { return t_current_device; }

int device_count() noexcept {
  try {
    auto& e = engine::Engine::get();
    static bool wired = [&] {
      // Engine warnings (recompilations) surface as Python warnings.
      e.set_warning_handler([](const std::string& m) { TORCH_WARN(m); });
      // So do the compile cache's (a damaged or repaired disk entry).
      e.cache().set_warning_handler([](const std::string& m) { TORCH_WARN(m); });
      // Quick compiles round a few ops differently from optimized ones
      // (engine/cache.h): not under torch.use_deterministic_algorithms.
      e.cache().set_quick_allowed([] { return !at::globalContext().deterministicAlgorithms(); });
      return true;
    }();
    (void)wired;
    return e.device_count();
  } catch (...) {
    return 0;
  }
}

void check_device(int index) {
  int n = device_count();
  TORCH_CHECK_INDEX(index >= 0 && index < n, "tpu:", index, " is not a valid device: ", n,
                    " tpu device(s) are available (set TORCH_TPU_NUM_DEVICES for more "
                    "on the CPU plugin)");
}

void set_current_device(int index) {
  check_device(index);
  t_current_device = index;
}

namespace {

struct TpuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kType, t_current_device); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kType, "expected a tpu device, got ", d);
    set_current_device(d.index() < 0 ? 0 : d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    t_current_device = d.index() < 0 ? 0 : d.index();
  }
  // Streams and events: stream.h (one execution order per device).
  c10::Stream getStream(c10::Device d) const override { return streams::current(d); }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return streams::default_stream(d);
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return streams::create(d);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const override {
    return streams::create(d);
  }
  c10::Stream exchangeStream(c10::Stream s) const override { return streams::exchange(s); }
  void record(void** event, const c10::Stream& s, const c10::DeviceIndex /*device*/,
              const c10::EventFlag flag) const override {
    streams::record(event, s, flag);
  }
  // Work launched after the event is ordered after it already.
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* event) const override { return event == nullptr || streams::query(event); }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) streams::synchronize(event);
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device*/) const override {
    return streams::elapsed_ms(start, end);
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*device*/) const noexcept override {
    streams::destroy(event);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count());
  }
  void synchronizeDevice(const c10::DeviceIndex) const override {
    engine::Engine::get().synchronize();
  }
  bool queryStream(const c10::Stream&) const override { return streams::query(); }
  void synchronizeStream(const c10::Stream&) const override { streams::synchronize(); }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace
}  // namespace torch_tpu::aten
