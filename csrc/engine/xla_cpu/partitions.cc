#include "partitions.h"

#include <algorithm>
#include <string_view>

#include "../../hlo/kernel.h"
#include "../element_types.h"

namespace torch_tpu::engine::xla_cpu {

int64_t largest_signature_bytes(const std::string& mlir) {
  static constexpr std::string_view kMain = "func.func public @main(";
  size_t at = mlir.find(kMain);
  if (at == std::string::npos) return -1;
  size_t end = mlir.find('\n', at);
  std::string_view line = std::string_view(mlir).substr(at, end == std::string::npos
                                                                  ? std::string::npos
                                                                  : end - at);
  int64_t largest = 0;
  for (size_t open = line.find("tensor<"); open != std::string_view::npos;
       open = line.find("tensor<", open)) {
    size_t close = open + 7;  // the '>' that closes this tensor (complex<...> nests one)
    for (int depth = 1; close < line.size(); ++close) {
      if (line[close] == '<') ++depth;
      if (line[close] == '>' && --depth == 0) break;
    }
    if (close >= line.size()) return -1;
    hlo::TensorType type;
    try {
      type = hlo::parse_tensor_type(line.substr(open, close + 1 - open));
    } catch (const hlo::TypeError&) {
      return -1;  // a dynamic dimension, an encoding, an element type tpu tensors do not hold
    }
    largest = std::max(largest, type.numel() * static_cast<int64_t>(element_size(type.dtype)));
    open = close;
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
