// A device array as the engine sees it: materialized (a PJRT buffer) or
// pending (a node of the program being recorded).
#pragma once

#include <cstdint>
#include <memory>

#include "../hlo/builder.h"
#include "../pjrt/buffer.h"

namespace torch_tpu::engine {

class DeviceValue {
 public:
  DeviceValue(hlo::TensorType type, int device) : type_(std::move(type)), device_(device) {}

  const hlo::TensorType& type() const { return type_; }
  int device() const { return device_; }
  bool materialized() const { return buffer_ != nullptr; }
  const pjrt::BufferPtr& buffer() const { return buffer_; }

 private:
  friend class Engine;
  hlo::TensorType type_;
  int device_;
  pjrt::BufferPtr buffer_;   // set once materialized
  uint64_t epoch_ = 0;       // the recording this node belongs to (if pending)
  hlo::Value node_;          // valid only while pending in that recording
  int32_t trace_ = -1;       // a deferred op's placeholder: its index in the trace
};

using ValuePtr = std::shared_ptr<DeviceValue>;

}  // namespace torch_tpu::engine
