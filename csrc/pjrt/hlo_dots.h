// Reads an optimized XLA program (a serialized HloModuleProto, as
// PJRT_Executable_OptimizedProgram returns it) for the dots with bf16
// operands and an f32 result, and says whether XLA:CPU runs each of them:
// its generic dot kernel (DotThunk) rejects that type combination, its bf16
// gemm (XNNPACK) takes a row-major [batch..., m, k] lhs with an rhs of
// [batch..., k, n] or [batch..., n, k].
#pragma once

#include <string_view>

namespace torch_tpu::pjrt {

// True when every bf16 x bf16 -> f32 dot of `hlo_module_proto` has a form
// the bf16 gemm takes; false when one does not or the bytes do not parse.
bool bf16_dots_in_gemm_form(std::string_view hlo_module_proto);

}  // namespace torch_tpu::pjrt
