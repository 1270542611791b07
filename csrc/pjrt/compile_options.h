// Compile options a caller sets over our defaults (the user layer's
// torch.tpu.compiler.custom_compiler_options): XLA debug options by name,
// carried in CompileOptionsProto.env_option_overrides, and the two effort
// levels of ExecutableBuildOptionsProto.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>

namespace torch_tpu::pjrt {

using OptionValue = std::variant<std::string, bool, int64_t, double>;

class CompileOverrides {
 public:
  // The effort-level options ("O0".."O3"); every other name is an XLA
  // debug option, checked by the plugin at compile time.
  static constexpr const char* kOptimizationLevel = "xla_optimization_level";
  static constexpr const char* kMemoryFittingLevel = "xla_memory_fitting_level";

  // Throws std::invalid_argument for an empty name or a bad effort level.
  void set(const std::string& name, OptionValue value);
  bool empty() const { return values_.empty(); }
  const std::map<std::string, OptionValue>& values() const { return values_; }
  // A canonical text of the options (name, type and value of each, sorted):
  // part of the compile-cache keys. Empty when there are none.
  const std::string& text() const { return text_; }
  // The bytes to append to a serialized CompileOptionsProto (protobuf
  // merges a repeated embedded message field into the earlier one).
  std::string encode() const;

 private:
  std::map<std::string, OptionValue> values_;
  std::string text_;
};

// Protobuf wire helpers for the hand-encoded CompileOptionsProto.
void put_varint(std::string& out, uint64_t v);
void put_int_field(std::string& out, int field, int64_t v);
void put_bytes_field(std::string& out, int field, const std::string& bytes);

}  // namespace torch_tpu::pjrt
