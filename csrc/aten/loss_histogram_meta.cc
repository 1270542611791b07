// Meta (shape-only) kernels for lowered ops that PyTorch gives no meta
// function: the margin-loss backward ops, histograms and CTC loss. The
// lowered kernel's meta step (meta.cc) needs one to know its output types.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <torch/library.h>

#include "meta.h"

namespace torch_tpu::aten {

namespace {

at::Tensor meta_like(c10::IntArrayRef shape, c10::ScalarType dtype) {
  return at::detail::empty_meta(shape.vec(), dtype);
}

at::Tensor margin_backward_meta(const at::Tensor& grad, const at::Tensor& self) {
  return meta_like(self.sizes(), self.scalar_type());
}

at::Tensor multi_margin_loss_backward_meta(const at::Tensor& grad, const at::Tensor& self,
                                           const at::Tensor&, const at::Scalar&,
                                           const at::Scalar&, const std::optional<at::Tensor>&,
                                           int64_t) {
  return margin_backward_meta(grad, self);
}

at::Tensor multilabel_margin_loss_backward_meta(const at::Tensor& grad, const at::Tensor& self,
                                                const at::Tensor&, int64_t, const at::Tensor&) {
  return margin_backward_meta(grad, self);
}

void check_histogram_input(const at::Tensor& self, int64_t dims) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "torch.histogramdd: input tensor and bins tensors should have the same dtype");
  TORCH_CHECK(dims > 0, "torch.histogramdd: input tensor should have at least 1 dimension");
}

std::tuple<at::Tensor, at::Tensor> histogram_bins_meta(const at::Tensor& self, const at::Tensor& bins,
                                                       const std::optional<at::Tensor>&, bool) {
  check_histogram_input(self, 1);
  TORCH_CHECK(bins.dim() == 1, "torch.histogram: bins tensor should have one dimension");
  TORCH_CHECK(bins.numel() > 0, "torch.histogram: bins tensor should have at least 1 element");
  return {meta_like({bins.numel() - 1}, self.scalar_type()),
          meta_like({bins.numel()}, self.scalar_type())};
}

std::tuple<at::Tensor, at::Tensor> histogram_ct_meta(const at::Tensor& self, int64_t bins,
                                                     std::optional<at::ArrayRef<double>>,
                                                     const std::optional<at::Tensor>&, bool) {
  check_histogram_input(self, 1);
  TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins);
  return {meta_like({bins}, self.scalar_type()), meta_like({bins + 1}, self.scalar_type())};
}

std::vector<at::Tensor> histogramdd_edges_meta(const at::Tensor& self, at::IntArrayRef bins,
                                               std::optional<at::ArrayRef<double>>,
                                               const std::optional<at::Tensor>&, bool) {
  check_histogram_input(self, self.dim());
  std::vector<at::Tensor> out;
  for (int64_t b : bins) out.push_back(meta_like({b + 1}, self.scalar_type()));
  return out;
}

at::Tensor histogramdd_tensors_meta(const at::Tensor& self, at::TensorList bins,
                                    const std::optional<at::Tensor>&, bool) {
  check_histogram_input(self, self.dim());
  std::vector<int64_t> shape;
  for (const at::Tensor& b : bins) shape.push_back(b.numel() - 1);
  return meta_like(shape, self.scalar_type());
}

at::Tensor histogramdd_cts_meta(const at::Tensor& self, at::IntArrayRef bins,
                                std::optional<at::ArrayRef<double>>,
                                const std::optional<at::Tensor>&, bool) {
  check_histogram_input(self, self.dim());
  return meta_like(bins, self.scalar_type());
}

at::Tensor ctc_loss_backward_meta(const at::Tensor& grad, const at::Tensor& log_probs,
                                  const at::Tensor&, at::IntArrayRef, at::IntArrayRef,
                                  const at::Tensor&, const at::Tensor&, int64_t, bool) {
  return meta_like(log_probs.sizes(), log_probs.scalar_type());
}

}  // namespace

// Private to the tpu kernels (meta.h), registered with the library.
const bool registered = [] {
  auto unboxed = [](auto fn) { return c10::KernelFunction::makeFromUnboxedFunction(fn); };
  add_private_meta("aten::multi_margin_loss_backward",
                   unboxed(TORCH_FN(multi_margin_loss_backward_meta)));
  add_private_meta("aten::multilabel_margin_loss_backward",
                   unboxed(TORCH_FN(multilabel_margin_loss_backward_meta)));
  add_private_meta("aten::histogram.bins_tensor", unboxed(TORCH_FN(histogram_bins_meta)));
  add_private_meta("aten::histogram.bin_ct", unboxed(TORCH_FN(histogram_ct_meta)));
  add_private_meta("aten::_histogramdd_bin_edges", unboxed(TORCH_FN(histogramdd_edges_meta)));
  add_private_meta("aten::_histogramdd_from_bin_tensors",
                   unboxed(TORCH_FN(histogramdd_tensors_meta)));
  add_private_meta("aten::_histogramdd_from_bin_cts", unboxed(TORCH_FN(histogramdd_cts_meta)));
  add_private_meta("aten::_ctc_loss_backward", unboxed(TORCH_FN(ctc_loss_backward_meta)));
  return true;
}();

}  // namespace torch_tpu::aten
