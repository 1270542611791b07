#include "flags.h"

#include <cstdlib>
#include <string>

namespace torch_tpu::engine::xla_cpu {

// XLA:CPU's TreeReductionRewriter turns every reduction over a dimension
// longer than 32 into a reduce-window plus a reduce, and XLA:CPU runs
// reduce-window as a scalar loop that fuses nothing: a mean over a
// [8, 64, 512] f32 tensor took ~40x longer than with the pass off (softmax,
// layer_norm, loss and every gradient sum reduce). Its plain reduce emitter
// vectorizes and keeps f32 sums within PyTorch's tolerance (measured: 1e6
// elements, relative error 5e-8 like CPU's). The plugin reads XLA_FLAGS when its
// client is created (set after that, an --xla_dump_to showed reduce-windows
// again); a user who sets xla_disable_hlo_passes keeps their choice.
bool named_like_xla_cpu(const std::string& path) { return path.find("cpu") != std::string::npos; }

void tune_flags() {
  const char* old = std::getenv("XLA_FLAGS");
  std::string flags = old ? old : "";
  if (flags.find("xla_disable_hlo_passes") != std::string::npos) return;
  flags += (flags.empty() ? "" : " ") + std::string("--xla_disable_hlo_passes=tree_reduction_rewriter");
  setenv("XLA_FLAGS", flags.c_str(), 1);
}

const std::string& disabled_passes() {
  static const std::string passes = [] {
    const char* env = std::getenv("XLA_FLAGS");
    std::string flags = env ? env : "";
    static constexpr const char* kFlag = "xla_disable_hlo_passes=";
    size_t at = flags.rfind(kFlag);  // XLA takes the last one given
    if (at == std::string::npos) return std::string();
    at += std::string(kFlag).size();
    return flags.substr(at, flags.find_first_of(" \t\n", at) - at);
  }();
  return passes;
}

}  // namespace torch_tpu::engine::xla_cpu
