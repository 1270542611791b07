// CPU's argument checks that PyTorch's meta functions leave to the CPU
// kernels (checks.cc), and CPU's wording for an error the tpu found
// (cpu_errors.cc).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <vector>

#include "meta.h"

namespace torch_tpu::aten {

// One check of a call, after meta inference: raises as CPU would.
using Check = void (*)(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args,
                       const OpMeta& meta, c10::ArrayRef<at::Tensor> mutated);

// The checks of an operator, chosen once at registration by its name.
std::vector<Check> checks_for(const c10::FunctionSchema& schema);

// Runs `op` on the CPU with zero-filled stand-ins for its tpu tensors (same
// sizes, strides and dtypes) when they are small; CPU's exception, if any,
// propagates. Called where the tpu already found the call wrong, so the user
// reads CPU's message and exception type for the same mistake.
void raise_as_cpu(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args);

}  // namespace torch_tpu::aten
