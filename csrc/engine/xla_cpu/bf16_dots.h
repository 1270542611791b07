// Compiling programs whose dots take bf16 split terms (lowering/precision.h):
// XLA:CPU runs a bf16 x bf16 -> f32 dot in its bf16 gemm only in some forms,
// and which form a dot ends up in depends on the whole optimized program.
// The marked dots (hlo::kBf16SplitMarker) that would reach XLA:CPU's generic
// dot kernel, which rejects that type pair, are compiled again in f32.
#pragma once

#include <cstdint>
#include <string>

#include "../../pjrt/client.h"

namespace torch_tpu::engine::xla_cpu {

// Compiles `mlir`; when it has marked dots, checks the optimized program
// (check_bf16_dots, hlo_dots.h) and compiles again with the groups of unsafe
// dots in f32, or all of them when that cannot be told. `quick`, `overrides`:
// see pjrt::Client::compile.
pjrt::ExecutablePtr compile_checked(const pjrt::Client& client, const std::string& mlir,
                                    bool quick = false,
                                    const pjrt::CompileOverrides& overrides = {});

// Programs compiled again with all of their split dots in f32, and with only
// some of them.
struct Bf16SplitStats {
  int64_t fallbacks = 0, partial = 0;
};
Bf16SplitStats bf16_split_stats();

}  // namespace torch_tpu::engine::xla_cpu
