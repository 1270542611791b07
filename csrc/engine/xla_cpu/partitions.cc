#include "partitions.h"

#include <algorithm>
#include <string_view>

namespace torch_tpu::engine::xla_cpu {

namespace {

// Bytes per element of a StableHLO element type; 0 for one not known here.
int64_t element_bytes(std::string_view t) {
  if (t == "f32" || t == "i32" || t == "ui32") return 4;
  if (t == "f64" || t == "i64" || t == "ui64" || t == "complex<f32>") return 8;
  if (t == "complex<f64>") return 16;
  if (t == "f16" || t == "bf16" || t == "i16" || t == "ui16") return 2;
  if (t == "i1" || t == "i8" || t == "ui8" || t.substr(0, 2) == "f8") return 1;
  return 0;
}

// Bytes of `type`, the text between "tensor<" and its closing '>'; -1 when
// a dimension is unknown ('?') or the element type is not known here.
int64_t tensor_bytes(std::string_view type) {
  type = type.substr(0, type.find(','));  // a bounds encoding follows a comma
  int64_t elements = 1;
  for (;;) {
    size_t x = type.find('x');
    // The element type starts at the first character that is not a digit.
    if (x == std::string_view::npos || type.substr(0, x).find_first_not_of("0123456789") !=
                                           std::string_view::npos)
      break;
    if (x == 0) return -1;
    int64_t d = 0;
    for (char ch : type.substr(0, x)) d = d * 10 + (ch - '0');
    elements *= d;
    type.remove_prefix(x + 1);
  }
  int64_t bytes = element_bytes(type);
  return bytes ? elements * bytes : -1;
}

}  // namespace

int64_t largest_signature_bytes(const std::string& mlir) {
  static constexpr std::string_view kMain = "func.func public @main(";
  size_t at = mlir.find(kMain);
  if (at == std::string::npos) return -1;
  size_t end = mlir.find('\n', at);
  std::string_view line = std::string_view(mlir).substr(at, end == std::string::npos
                                                                  ? std::string::npos
                                                                  : end - at);
  int64_t largest = 0;
  for (size_t t = line.find("tensor<"); t != std::string_view::npos;
       t = line.find("tensor<", t)) {
    t += 7;
    size_t close = t;  // the '>' that closes this tensor (complex<...> nests one)
    for (int depth = 1; close < line.size(); ++close) {
      if (line[close] == '<') ++depth;
      if (line[close] == '>' && --depth == 0) break;
    }
    if (close >= line.size()) return -1;
    int64_t bytes = tensor_bytes(line.substr(t, close - t));
    if (bytes < 0) return -1;
    largest = std::max(largest, bytes);
    t = close;
  }
  return largest;
}

pjrt::CompileOverrides unpartitioned_if_small(const std::string& mlir,
                                              const pjrt::CompileOverrides& overrides,
                                              const std::string& disabled) {
  static constexpr const char* kDisable = "xla_disable_hlo_passes";
  if (overrides.values().count(kDisable)) return overrides;
  int64_t largest = largest_signature_bytes(mlir);
  if (largest < 0 || largest > kSmallProgramBytes) return overrides;
  pjrt::CompileOverrides out = overrides;
  out.set(kDisable, disabled.empty() ? std::string(kPartitionPass)
                                     : disabled + "," + kPartitionPass);
  return out;
}

}  // namespace torch_tpu::engine::xla_cpu
