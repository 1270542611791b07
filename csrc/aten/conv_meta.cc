// Meta (shape-only) kernels for the backend convolution hooks. PyTorch gives
// `convolution_overrideable` and `convolution_backward_overrideable` only a
// CompositeExplicitAutograd stub that throws, so the lowered kernel's meta step
// (dispatch.cc) needs these to learn the result shapes. Most argument checks
// ran in the composite `aten::convolution` above the backend; the ones CPU's
// kernel path adds (dtypes, dilation, output padding) are here, and the
// kernel then raises CPU's own message (checks.h).
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "meta.h"

namespace torch_tpu::aten {

namespace {

at::Tensor meta_empty(std::vector<int64_t> shape, const at::Tensor& like) {
  return at::detail::empty_meta(shape, like.scalar_type());
}

at::Tensor convolution_meta(const at::Tensor& input, const at::Tensor& weight,
                            const std::optional<at::Tensor>& /*bias*/, at::IntArrayRef stride,
                            at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                            at::IntArrayRef output_padding, int64_t groups) {
  TORCH_CHECK(input.scalar_type() == weight.scalar_type(), "expected scalar type ",
              input.scalar_type(), " but found ", weight.scalar_type());
  for (size_t d = 0; d < dilation.size(); ++d) {
    TORCH_CHECK(dilation[d] > 0, "dilation should be greater than zero");
    TORCH_CHECK(!transposed || output_padding[d] < stride[d] || output_padding[d] < dilation[d],
                "output padding must be smaller than either stride or dilation");
  }
  std::vector<int64_t> shape{input.size(0), transposed ? weight.size(1) * groups : weight.size(0)};
  for (int64_t i = 2; i < input.dim(); ++i) {
    size_t d = i - 2;
    int64_t extent = dilation[d] * (weight.size(i) - 1) + 1;
    shape.push_back(transposed ? (input.size(i) - 1) * stride[d] - 2 * padding[d] + extent +
                                     output_padding[d]
                               : (input.size(i) + 2 * padding[d] - extent) / stride[d] + 1);
  }
  // CPU's layout: a 2-D convolution's output is channels-last when its input
  // or weight is (both of CPU's kernels agree; for 3-D ones the layout
  // depends on which CPU kernel runs, and stays contiguous here).
  auto format = at::MemoryFormat::Contiguous;
  if (input.dim() == 4 && (input.suggest_memory_format() == at::MemoryFormat::ChannelsLast ||
                           weight.suggest_memory_format() == at::MemoryFormat::ChannelsLast))
    format = at::MemoryFormat::ChannelsLast;
  return at::detail::empty_meta(shape, input.scalar_type(), format);
}

// All three gradients are always produced (zeros where output_mask is false):
// the boxed lowered kernel gives every declared output a tensor.
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_meta(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef /*stride*/, at::IntArrayRef /*padding*/, at::IntArrayRef /*dilation*/,
    bool /*transposed*/, at::IntArrayRef /*output_padding*/, int64_t /*groups*/,
    std::array<bool, 3> /*output_mask*/) {
  return {meta_empty(input.sizes().vec(), input), meta_empty(weight.sizes().vec(), weight),
          meta_empty({grad_output.size(1)}, grad_output)};
}

}  // namespace

// Private to the tpu kernels (meta.h), registered with the library.
const bool registered = [] {
  auto unboxed = [](auto fn) { return c10::KernelFunction::makeFromUnboxedFunction(fn); };
  add_private_meta("aten::convolution_overrideable", unboxed(TORCH_FN(convolution_meta)));
  add_private_meta("aten::convolution_backward_overrideable",
                   unboxed(TORCH_FN(convolution_backward_meta)));
  return true;
}();

}  // namespace torch_tpu::aten
