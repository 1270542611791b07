#include "fallback.h"

#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <mutex>

#include "../engine/engine.h"

namespace torch_tpu::aten {

namespace {

std::mutex g_mu;
bool g_enabled = false;
std::map<std::string, int64_t> g_counts;

void tpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& name = op.schema().operator_name();
  std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    TORCH_CHECK_NOT_IMPLEMENTED(
        g_enabled, "The operator '", full,
        "' is not implemented for the tpu device yet. Set TORCH_TPU_CPU_FALLBACK=1 (or "
        "torch_tpu.set_cpu_fallback(True)) to run it on the CPU, at the cost of copies; "
        "please report it so it can be lowered natively.");
    first = g_counts[full]++ == 0;
  }
  if (first) TORCH_WARN("tpu: '", full, "' has no tpu lowering; running it on the CPU.");
  if (engine::Engine::initialized()) engine::Engine::get().metrics().count("cpu_fallback::" + full);
  at::native::cpu_fallback(op, stack);
}

}  // namespace

void set_cpu_fallback(bool on) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_enabled = on;
}

bool cpu_fallback_enabled() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_enabled;
}

std::map<std::string, int64_t> fallback_counts() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_counts;
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&tpu_fallback>());
}

}  // namespace torch_tpu::aten
