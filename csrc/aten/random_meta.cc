// Meta (shape-only) kernels for _sample_dirichlet, _standard_gamma_grad and
// _dirichlet_grad,
// which PyTorch gives none (the lowered kernel's meta step, meta.cc, needs
// their output type: the concentrations').
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <torch/library.h>

#include "meta.h"

namespace torch_tpu::aten {

namespace {

at::Tensor sample_dirichlet_meta(const at::Tensor& self, std::optional<at::Generator>) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "_sample_dirichlet: expected floating point concentrations, got ",
              self.scalar_type());
  return at::detail::empty_meta(self.sizes().vec(), self.scalar_type());
}

// _standard_gamma_grad(alpha, sample): alpha's shape and dtype.
at::Tensor standard_gamma_grad_meta(const at::Tensor& self, const at::Tensor& output) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()) && self.scalar_type() == output.scalar_type(),
              "_standard_gamma_grad: expected concentrations and samples of one floating point "
              "dtype, got ", self.scalar_type(), " and ", output.scalar_type());
  TORCH_CHECK(at::is_expandable_to(output.sizes(), self.sizes()),
              "_standard_gamma_grad: samples of shape ", output.sizes(),
              " do not broadcast to the concentrations' shape ", self.sizes());
  return at::detail::empty_meta(self.sizes().vec(), self.scalar_type());
}

// _dirichlet_grad(x, alpha, total): x's shape and dtype.
at::Tensor dirichlet_grad_meta(const at::Tensor& x, const at::Tensor& alpha, const at::Tensor& total) {
  for (const at::Tensor* t : {&alpha, &total}) {
    TORCH_CHECK(at::isFloatingType(x.scalar_type()) && t->scalar_type() == x.scalar_type(),
                "_dirichlet_grad: expected x, alpha and total of one floating point dtype, got ",
                x.scalar_type(), ", ", alpha.scalar_type(), " and ", total.scalar_type());
    TORCH_CHECK(at::is_expandable_to(t->sizes(), x.sizes()), "_dirichlet_grad: shape ", t->sizes(),
                " does not broadcast to x's shape ", x.sizes());
  }
  return at::detail::empty_meta(x.sizes().vec(), x.scalar_type());
}

}  // namespace

// Private to the tpu kernels (meta.h), registered with the library.
const bool registered = [] {
  add_private_meta("aten::_sample_dirichlet",
                   c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(sample_dirichlet_meta)));
  add_private_meta("aten::_standard_gamma_grad",
                   c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(standard_gamma_grad_meta)));
  add_private_meta("aten::_dirichlet_grad",
                   c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(dirichlet_grad_meta)));
  return true;
}();

}  // namespace torch_tpu::aten
