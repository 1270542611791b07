// XLA:CPU's compiler flags the engine sets (docs/design.md, XLA:CPU tuning).
#pragma once

#include <string>

namespace torch_tpu::engine::xla_cpu {

// Whether the plugin at `path` is XLA:CPU, judged by its file name. Only for
// the flags below: XLA parses XLA_FLAGS when the client is created, before a
// platform name exists. Everything else recognises the plugin by its
// platform name (the target profile, hlo/target.h).
bool named_like_xla_cpu(const std::string& path);

// Adds --xla_disable_hlo_passes=tree_reduction_rewriter to XLA_FLAGS unless
// the user chose passes to disable. Call before the client is created.
void tune_flags();

// The passes XLA_FLAGS disables (--xla_disable_hlo_passes, comma-separated;
// empty if none), read once: XLA parsed the flags when the client was
// created, after tune_flags.
const std::string& disabled_passes();

}  // namespace torch_tpu::engine::xla_cpu
