// Wiring ATen operators to lowerings: one boxed kernel serves every lowered
// operator. In-place and out= variants are derived from the schema of the
// functional operator the registry holds.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace torch::jit {}
namespace torch {
class Library;
}

namespace torch_tpu::aten {

// Registers the boxed kernel for every lowered operator and derived variant
// of namespace `ns` ("aten", or "tpu" for torch.ops.tpu; `m` is that
// namespace's PrivateUse1 library).
void register_lowered_ops(torch::Library& m, const std::string& ns = "aten");
// Operators (ATen names) served natively, sorted.
std::vector<std::string> native_ops();
// The same, each with the registry entry that serves it: itself when lowered,
// the functional operator for a derived in-place or out= variant.
std::map<std::string, std::string> native_lowerings();

// Debugging: log every dispatched op to stderr (TORCH_TPU_LOG_OPS=1).
void set_log_ops(bool on);

}  // namespace torch_tpu::aten
