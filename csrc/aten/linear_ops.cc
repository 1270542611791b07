// nn.Linear as one op each way on tpu: the autograd kernel of aten::linear
// (AutogradPrivateUse1), whose forward runs the lowered aten::linear and
// whose backward the lowered aten::linear_backward (all three gradients in
// one op; lowering/linear.cc). PyTorch's composite linear would record
// addmm or matmul forward and two matmuls and a sum backward: a Strict
// Eager training step launches fewer programs (a small GPT's 110 → 92) and
// Fused Eager records fewer ops.
//
// Where the one-op form does not apply, PyTorch's composite runs instead,
// with its exact semantics and errors: other ranks, dtypes or shapes than
// (..., in) · (out, in) + (out), forward-mode AD, and tensor subclasses
// (FakeTensor and functionalization under torch.compile, which then trace
// the composite as before). A backward that is itself differentiated
// (create_graph=True) uses differentiable ops.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/TensorSubclassLikeUtils.h>
#include <ATen/ops/linear_native.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "kernel.h"
#include "meta.h"
#include "op_list.h"

namespace torch_tpu::aten {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool one_op_form(const at::Tensor& input, const at::Tensor& weight,
                 const std::optional<at::Tensor>& bias) {
  // Subclasses first: reading a FakeTensor's sizes would specialize the
  // dynamic dimensions Dynamo traces.
  const bool has_bias = bias.has_value() && bias->defined();
  const std::array<const at::Tensor*, 3> all{&input, &weight, has_bias ? &*bias : &input};
  for (const at::Tensor* t : all)
    if (at::isTensorSubclassLike(*t) || t->unsafeGetTensorImpl()->has_symbolic_sizes_strides())
      return false;
  if (input.dim() < 1 || weight.dim() != 2 || input.size(-1) != weight.size(1)) return false;
  if (!at::isFloatingType(input.scalar_type()) || weight.scalar_type() != input.scalar_type())
    return false;
  if (has_bias && (bias->dim() != 1 || bias->size(0) != weight.size(0) ||
                   bias->scalar_type() != input.scalar_type()))
    return false;
  for (const at::Tensor* t : all)
    if (t->_fw_grad(/*level=*/0).defined()) return false;
  return true;
}

// The gradients of linear with differentiable ops (for create_graph=True).
variable_list differentiable_backward(const at::Tensor& input, const at::Tensor& weight,
                                      const at::Tensor& grad, std::array<bool, 3> mask) {
  at::Tensor g2 = grad.reshape({-1, grad.size(-1)});
  at::Tensor x2 = input.reshape({-1, input.size(-1)});
  return {mask[0] ? grad.matmul(weight) : at::Tensor(), mask[1] ? g2.t().mm(x2) : at::Tensor(),
          mask[2] ? g2.sum(0) : at::Tensor()};
}

struct Linear : public torch::autograd::Function<Linear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias) {
    ctx->save_for_backward({input, weight});
    ctx->saved_data["bias"] = bias.has_value() && bias->defined();
    at::AutoDispatchBelowADInplaceOrView below;
    return at::linear(input, weight, bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& grad = grads[0];
    std::array<bool, 3> mask{ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                             ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)};
    if (!grad.defined() || !(mask[0] || mask[1] || mask[2]))
      return {at::Tensor(), at::Tensor(), at::Tensor()};
    if (at::GradMode::is_enabled() || at::isTensorSubclassLike(grad))
      return differentiable_backward(input, weight, grad, mask);
    auto [gi, gw, gb] = at::linear_backward(input, grad, weight, mask);
    return {gi, gw, gb};
  }
};

at::Tensor linear_autograd(const at::Tensor& input, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias) {
  if (!one_op_form(input, weight, bias)) return at::native::linear(input, weight, bias);
  const bool bias_grad = bias.has_value() && bias->defined() && bias->requires_grad();
  if (!at::GradMode::is_enabled() || !(input.requires_grad() || weight.requires_grad() || bias_grad)) {
    at::AutoDispatchBelowADInplaceOrView below;  // nothing to differentiate: no graph node
    return at::linear(input, weight, bias);
  }
  return Linear::apply(input, weight, bias);
}

// The shapes of the requested gradients; PyTorch has no meta kernel for
// linear_backward (private to the tpu kernels' meta step, meta.h).
std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward_meta(
    const at::Tensor& input, const at::Tensor& grad, const at::Tensor& weight,
    std::array<bool, 3> mask) {
  auto like = [](const at::Tensor& t, at::IntArrayRef shape) {
    return at::detail::empty_meta(shape, t.scalar_type());
  };
  return {mask[0] ? like(input, input.sizes()) : at::Tensor(),
          mask[1] ? like(weight, weight.sizes()) : at::Tensor(),
          mask[2] ? like(grad, {weight.size(0)}) : at::Tensor()};
}

const bool registered = [] {
  add_private_meta("aten::linear_backward",
                   c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(linear_backward_meta)));
  return true;
}();

}  // namespace

bool has_tpu_autograd(const std::string& name) { return name == "aten::linear"; }

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  KernelList k(m, "composite", "AutogradPrivateUse1");
  k.impl("linear", TORCH_FN(linear_autograd));
}

}  // namespace torch_tpu::aten
