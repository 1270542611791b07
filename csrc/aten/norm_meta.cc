// A meta (shape-only) kernel for native_batch_norm_backward that honours its
// output_mask. PyTorch's (its decomposition's) always returns the input's
// gradient, while the lowering returns the gradients the mask asks for, as
// CPU's kernel does: a batch norm over an input that needs no gradient (a
// model's first layer on its data) failed its backward with "returned 2
// values, expected 3".
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <torch/library.h>

#include "meta.h"

namespace torch_tpu::aten {

namespace {

using Opt = std::optional<at::Tensor>;

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_meta(
    const at::Tensor& grad_out, const at::Tensor& input, const Opt& weight, const Opt&, const Opt&,
    const Opt&, const Opt&, bool, double, std::array<bool, 3> output_mask) {
  TORCH_CHECK(input.dim() >= 2, "native_batch_norm_backward: the input must have at least 2 "
              "dimensions, got ", input.sizes());
  TORCH_CHECK(grad_out.sizes() == input.sizes(), "native_batch_norm_backward: grad_out ",
              grad_out.sizes(), " and input ", input.sizes(), " differ");
  auto weight_dtype = weight.has_value() && weight->defined() ? weight->scalar_type()
                                                              : input.scalar_type();
  auto channels = [&] { return at::detail::empty_meta({input.size(1)}, weight_dtype); };
  at::Tensor gi, gw, gb;
  if (output_mask[0]) gi = at::detail::empty_meta(input.sizes().vec(), input.scalar_type());
  if (output_mask[1]) gw = channels();
  if (output_mask[2]) gb = channels();
  return {gi, gw, gb};
}

}  // namespace

// Private to the tpu kernels (meta.h), registered with the library.
const bool registered = [] {
  add_private_meta("aten::native_batch_norm_backward",
                   c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(batch_norm_backward_meta)));
  return true;
}();

}  // namespace torch_tpu::aten
