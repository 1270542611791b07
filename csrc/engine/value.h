// A device array as the engine sees it: materialized (a PJRT buffer) or
// pending (a node of the program being recorded).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "../hlo/builder.h"
#include "../pjrt/buffer.h"

namespace torch_tpu::engine {

class DeviceValue {
 public:
  DeviceValue(hlo::TensorType type, int device) : type_(std::move(type)), device_(device) {}
  // A materialized value.
  DeviceValue(hlo::TensorType type, int device, pjrt::BufferPtr buffer)
      : type_(std::move(type)), device_(device), buffer_(std::move(buffer)) {}

  const hlo::TensorType& type() const { return type_; }
  int device() const { return device_; }
  bool materialized() const { return buffer_ != nullptr; }
  const pjrt::BufferPtr& buffer() const { return buffer_; }
  // Why this value will never be computed (its program failed), or null.
  const std::string* error() const { return error_.get(); }

 private:
  friend class Engine;
  hlo::TensorType type_;
  int device_;
  pjrt::BufferPtr buffer_;   // set once materialized
  uint64_t epoch_ = 0;       // the recording this node belongs to (if pending)
  hlo::Value node_;          // valid only while pending in that recording
  int32_t trace_ = -1;       // a deferred op's placeholder: its index in the trace
  // While pending: the materialized value this one replaces in its holder (a
  // storage updated in place). If the program fails, this value takes the
  // prior's buffer back, so nothing that existed before the program is lost.
  std::shared_ptr<DeviceValue> prior_;
  std::shared_ptr<const std::string> error_;  // set when its program failed
};

using ValuePtr = std::shared_ptr<DeviceValue>;

}  // namespace torch_tpu::engine
