// A meta (shape-only) kernel for _sample_dirichlet, which PyTorch gives none
// (the lowered kernel's meta step, meta.cc, needs its output type: the
// concentrations').
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

}  // namespace

// Private to the tpu kernels (meta.h), registered with the library.
const bool registered = [] {
  add_private_meta("aten::_sample_dirichlet",
                   c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(sample_dirichlet_meta)));
  return true;
}();

}  // namespace torch_tpu::aten
