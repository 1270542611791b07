#include "generator.h"

#include <ATen/ops/empty.h>
#include <c10/core/TensorImpl.h>

#include <deque>
#include <mutex>
#include <random>

#include "device.h"

namespace torch_tpu::aten {

TpuGenerator::TpuGenerator(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void TpuGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t TpuGenerator::seed() {
  uint64_t s = std::random_device{}();
  s = (s << 32) ^ std::random_device{}();
  set_current_seed(s);
  return s;
}

void TpuGenerator::set_state(const c10::TensorImpl& state) {
  TORCH_CHECK(state.numel() == 16 && state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
              "tpu generator state must be a uint8 tensor of 16 bytes (seed, offset); got ",
              state.numel(), " elements");
  const auto* p = static_cast<const uint64_t*>(state.data());
  seed_ = p[0];
  offset_ = p[1];
}

c10::intrusive_ptr<c10::TensorImpl> TpuGenerator::get_state() const {
  at::Tensor t = at::empty({16}, at::TensorOptions().dtype(at::kByte));
  auto* p = static_cast<uint64_t*>(t.data_ptr());
  p[0] = seed_;
  p[1] = offset_;
  return t.getIntrusivePtr();
}

uint64_t TpuGenerator::advance(uint64_t count) {
  uint64_t now = offset_;
  offset_ += (count + 3) / 4 * 4;  // keep offsets aligned to 128-bit draws
  return now;
}

TpuGenerator* TpuGenerator::clone_impl() const {
  auto* g = new TpuGenerator(device().index(), seed_);
  g->offset_ = offset_;
  return g;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::mutex mu;
  static std::deque<at::Generator> generators;
  std::lock_guard<std::mutex> lock(mu);
  check_device(device);
  while (static_cast<int>(generators.size()) <= device) {
    generators.push_back(at::make_generator<TpuGenerator>(
        static_cast<c10::DeviceIndex>(generators.size())));
  }
  return generators[device];
}


}  // namespace torch_tpu::aten
