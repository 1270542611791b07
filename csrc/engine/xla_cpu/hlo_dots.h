// Reads an optimized XLA program (a serialized HloModuleProto, as
// PJRT_Executable_OptimizedProgram returns it) for the dots with bf16
// operands and an f32 result, and says whether XLA:CPU runs each of them:
// its generic dot kernel (DotThunk) rejects that type combination, its bf16
// gemm (XNNPACK) takes a row-major [batch..., m, k] lhs with an rhs of
// [batch..., k, n] or [batch..., n, k].
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace torch_tpu::engine::xla_cpu {

// A dot XLA:CPU would not run: bf16 x bf16 -> f32 outside the gemm forms,
// or one bf16 operand.
struct UnsafeDot {
  std::string op_name;  // its metadata (the StableHLO loc name); XLA drops it
                        // on some rewrites (batch-dot-simplification)
  // Element counts of the result and operands: a reshape, transpose or
  // bitcast of the dot or its operands keeps them.
  int64_t out = 0, lhs = 0, rhs = 0;
};

struct Bf16DotCheck {
  bool read = false;  // the program parsed; when false the rest says nothing
  std::vector<UnsafeDot> unsafe;
  bool all_safe() const { return read && unsafe.empty(); }
};

// Reads an optimized program as PJRT_Executable_OptimizedProgram gives it:
// `format` "hlo_with_config" (a serialized HloModuleProtoWithConfig, what
// XLA's plugins return) or "hlo" (a serialized HloModuleProto).
Bf16DotCheck check_bf16_dots(std::string_view format, std::string_view code);

}  // namespace torch_tpu::engine::xla_cpu
