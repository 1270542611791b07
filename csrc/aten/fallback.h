// Operators with no lowering: a clear NotImplementedError, or — with
// TORCH_TPU_CPU_FALLBACK=1 — a run on the CPU with one warning per operator.
#pragma once

#include <map>
#include <string>

namespace torch_tpu::aten {

void set_cpu_fallback(bool on);
bool cpu_fallback_enabled();
std::map<std::string, int64_t> fallback_counts();

}  // namespace torch_tpu::aten
