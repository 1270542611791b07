// StableHLO custom kernels: a user's StableHLO function (text) as the tpu
// kernel of an operator defined through torch.library (custom_op or
// Library.define). The call runs through the shared lowered-op kernel, so it
// is recorded like any ATen op: in Strict and Debug Eager, inside Fused
// programs and inside torch.compile graphs; its output types come from the
// operator's fake/meta function, and autograd from what torch.library was
// told (register_autograd).
#pragma once

#include <string>
#include <vector>

namespace torch_tpu::aten {

// Makes `text` (hlo/kernel.h: an MLIR module or func.func definitions) the
// tpu kernel of operator `name` ("mylib::op" or "mylib::op.overload").
// Raises ValueError/TypeError (as c10 errors) for an unknown or mutating
// operator, non-tensor arguments, a kernel whose parameter count differs,
// or an operator that already has one.
void register_stablehlo_kernel(const std::string& name, const std::string& text);
// Serves operator `name` on tpu with the StableHLO kernels it will be given
// (register_stablehlo_kernel), before it has any: kernels made on demand
// (jax.export per input signature, from the operator's fake function, which
// runs before the lowering looks a kernel up) need the tpu kernel in place.
// The same checks and errors as register_stablehlo_kernel.
void serve_stablehlo_operator(const std::string& name);
// The operators given a StableHLO kernel, with its entry symbol.
std::vector<std::pair<std::string, std::string>> stablehlo_kernels();

}  // namespace torch_tpu::aten
