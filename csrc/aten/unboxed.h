// Unboxed entry points of the lowered kernel.
//
// PyTorch calls a kernel that has only a boxed form by copying each argument
// into an IValue stack. Copying a tensor whose Python object is alive takes
// its refcount from 1 to 2, and PyTorch then increfs the Python object too,
// under the GIL, which the Python binding has just released: two GIL round
// trips per tensor argument. Operators whose C++ signature is one of the
// common shapes listed in unboxed.cc get a kernel that borrows its arguments
// instead; the rest keep the boxed kernel. Both run `run_lowered`.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch {
class Library;
}

namespace torch_tpu::aten {

struct Plan;

// Registers an unboxed kernel for `op` (named `name`, "aten::add.Tensor")
// when its signature is one listed; false when it is not (the caller
// registers the boxed kernel).
bool register_unboxed(torch::Library& m, const char* name, const c10::OperatorHandle& op,
                      const Plan& plan);

}  // namespace torch_tpu::aten
