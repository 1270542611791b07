// Meta kernels for the fused optimizer steps PyTorch leaves without one (the
// `tensor_lr` overloads, `_fused_sgd_` and `_fused_adagrad_`), so the lowered kernel's meta step
// (dispatch.cc) runs for them as for `_fused_adam_`. The steps write their
// arguments in place and return nothing: the meta kernel has nothing to
// compute; the argument checks are checks.cc's `fused_step_lists`.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "meta.h"

namespace torch_tpu::aten {

namespace {

void fused_step_meta(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  torch::jit::drop(*stack, op.schema().arguments().size());
}

}  // namespace

// Private to the tpu kernels (meta.h), registered with the library.
const bool registered = [] {
  for (const char* name : {"_fused_adam_.tensor_lr", "_fused_adamw_.tensor_lr", "_fused_sgd_",
                           "_fused_sgd_.tensor_lr", "_fused_adagrad_", "_fused_adagrad_.tensor_lr"})
    add_private_meta(std::string("aten::") + name,
                     c10::KernelFunction::makeFromBoxedFunction<&fused_step_meta>());
  return true;
}();

}  // namespace torch_tpu::aten
