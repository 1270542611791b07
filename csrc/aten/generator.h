// The tpu random generator: a (seed, offset) pair. Random ops take both as
// program inputs and derive their bits on the device with a counter-based
// generator, so a new seed or offset never recompiles; each op advances the
// offset by the number of values it drew.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace torch_tpu::aten {

class TpuGenerator : public c10::GeneratorImpl {
 public:
  explicit TpuGenerator(c10::DeviceIndex device, uint64_t seed = 67280421310721ull);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override;
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  void set_state(const c10::TensorImpl& state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // Returns the current offset and advances it by `count` values.
  uint64_t advance(uint64_t count);

 private:
  TpuGenerator* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The default generator of tpu:`device` (created on first use).
const at::Generator& default_generator(c10::DeviceIndex device);

}  // namespace torch_tpu::aten
