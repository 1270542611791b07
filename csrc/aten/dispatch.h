// Wiring ATen operators to lowerings: one boxed kernel serves every lowered
// operator. In-place and out= variants are derived from the schema of the
// functional operator the registry holds.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>

#include "../lowering/registry.h"

namespace torch::jit {}
namespace torch {
class Library;
}

namespace torch_tpu::aten {

// Registers the boxed kernel for every lowered operator and derived variant
// of namespace `ns` ("aten", or "tpu" for torch.ops.tpu; `m` is that
// namespace's PrivateUse1 library).
void register_lowered_ops(torch::Library& m, const std::string& ns = "aten");
// Serves operator `h` with lowering `fn` (named `lowering_name` in errors,
// traces and the op list) through the shared kernel, registered in `m`;
// `functional`: an in-place variant's functional operator.
void serve(torch::Library& m, const c10::OperatorHandle& h, const lowering::LoweringFn* fn,
           const std::string& lowering_name,
           std::optional<c10::OperatorHandle> functional = std::nullopt);
// Operators (ATen names) served natively, sorted (users' StableHLO kernels,
// custom_kernels.h, left out).
std::vector<std::string> native_ops();
// Every served operator, each with the registry entry that serves it: itself
// when lowered, the functional operator for a derived in-place or out=
// variant, "stablehlo:<op>" for a user's kernel.
std::map<std::string, std::string> native_lowerings();

// Debugging: log every dispatched op to stderr (TORCH_TPU_LOG_OPS=1).
void set_log_ops(bool on);

}  // namespace torch_tpu::aten
