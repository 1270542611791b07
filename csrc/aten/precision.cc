#include "precision.h"

#include <ATen/Context.h>

#include <atomic>

namespace torch_tpu::aten {

namespace {
std::atomic<int> g_override{-1};
// torch's setting when torch_tpu loaded: a later change is the user's choice.
const at::Float32MatmulPrecision g_initial = at::globalContext().float32MatmulPrecision();
}  // namespace

lowering::Precision current_precision() {
  int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return static_cast<lowering::Precision>(o);
  auto p = at::globalContext().float32MatmulPrecision();
  // Any call of set_float32_matmul_precision (even "highest", torch's
  // initial value) leaves the per-backend setting off its initial "none".
  bool chosen = p != g_initial || at::globalContext().float32Precision(
      at::Float32Backend::CUDA, at::Float32Op::MATMUL) != at::Float32Precision::NONE;
  if (!chosen) return lowering::Precision::kDefault;
  switch (p) {
    case at::Float32MatmulPrecision::HIGHEST: return lowering::Precision::kHighest;
    case at::Float32MatmulPrecision::HIGH: return lowering::Precision::kHigh;
    case at::Float32MatmulPrecision::MEDIUM: return lowering::Precision::kDefault;
  }
  return lowering::Precision::kDefault;
}

void set_precision_override(int precision) { g_override = precision; }
int precision_override() { return g_override; }

}  // namespace torch_tpu::aten
