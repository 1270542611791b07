// A meta (shape-only) kernel for fractional_max_pool3d_backward, which
// PyTorch gives none (the 2-d one is a structured kernel with its own). The
// lowered kernel's meta step (meta.cc) needs it for the gradient's type: the
// input's.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <torch/library.h>

#include "meta.h"

namespace torch_tpu::aten {

namespace {

at::Tensor fractional_max_pool3d_backward_meta(const at::Tensor& grad_output,
                                               const at::Tensor& self, at::IntArrayRef,
                                               at::IntArrayRef output_size,
                                               const at::Tensor& indices) {
  TORCH_CHECK(grad_output.sizes() == indices.sizes(), "fractional_max_pool3d_backward: "
              "grad_output ", grad_output.sizes(), " and indices ", indices.sizes(), " differ");
  TORCH_CHECK(output_size.size() == 3 && grad_output.dim() == self.dim(),
              "fractional_max_pool3d_backward: expected a 3-d output_size and grad_output of "
              "the input's rank");
  return at::detail::empty_meta(self.sizes().vec(), grad_output.scalar_type());
}

}  // namespace

// Private to the tpu kernels (meta.h), registered with the library.
const bool registered = [] {
  add_private_meta("aten::fractional_max_pool3d_backward",
                   c10::KernelFunction::makeFromUnboxedFunction(
                       TORCH_FN(fractional_max_pool3d_backward_meta)));
  return true;
}();

}  // namespace torch_tpu::aten
