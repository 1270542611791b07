// XLA:CPU's compiler flags the engine sets (docs/design.md, XLA:CPU tuning).
#pragma once

namespace torch_tpu::engine::xla_cpu {

// Adds --xla_disable_hlo_passes=tree_reduction_rewriter to XLA_FLAGS unless
// the user chose passes to disable. Call before the plugin's first compile.
void tune_flags();

}  // namespace torch_tpu::engine::xla_cpu
