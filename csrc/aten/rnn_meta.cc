// Meta (shape-only) kernels for the fused recurrent cells: the GRU cell and
// its backward, which PyTorch gives no meta function, and the LSTM cell, whose
// meta function in PyTorch fails on a cell without biases (nn.LSTM(...,
// bias=False): it reads the device of the absent bias). The lowered kernel's
// meta step (meta.cc) needs them for its output types; the shapes follow
// CUDA's kernels (lowering/nn_rnn.cc: the workspace is [B, 4H] or [B, 5H]).
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <torch/library.h>

#include "meta.h"

namespace torch_tpu::aten {

namespace {

at::Tensor meta_like(c10::IntArrayRef shape, c10::ScalarType dtype) {
  return at::detail::empty_meta(shape.vec(), dtype);
}

// The checks of a fused cell's arguments: gates [B, gates * H] of the state's
// dtype, optional biases of gates * H values. Returns (B, H).
std::pair<int64_t, int64_t> check_cell(const char* op, int64_t gates, const at::Tensor& input_gates,
                                       const at::Tensor& hidden_gates, const at::Tensor& state,
                                       const std::optional<at::Tensor>& input_bias,
                                       const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(state.dim() == 2, op, ": the state must be 2-D, got ", state.sizes());
  int64_t batch = state.size(0), h = state.size(1);
  for (const auto& [t, name] : {std::pair{&input_gates, "input_gates"}, {&hidden_gates, "hidden_gates"}}) {
    TORCH_CHECK(t->dim() == 2 && t->size(0) == batch && t->size(1) == gates * h, op, ": ", name,
                " must be [", batch, ", ", gates * h, "], got ", t->sizes());
    TORCH_CHECK(t->scalar_type() == state.scalar_type(), op, ": ", name, " has dtype ",
                t->scalar_type(), ", expected ", state.scalar_type());
  }
  for (const auto* bias : {&input_bias, &hidden_bias})
    if (bias->has_value() && (*bias)->defined())
      TORCH_CHECK((*bias)->dim() == 1 && (*bias)->size(0) == gates * h, op, ": a bias must have ",
                  gates * h, " elements, got ", (*bias)->sizes());
  return {batch, h};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_meta(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  auto [batch, h] = check_cell("_thnn_fused_lstm_cell", 4, input_gates, hidden_gates, cx,
                               input_bias, hidden_bias);
  auto dtype = cx.scalar_type();
  return {meta_like({batch, h}, dtype), meta_like({batch, h}, dtype),
          meta_like({batch, 4 * h}, dtype)};
}

std::tuple<at::Tensor, at::Tensor> gru_cell_meta(const at::Tensor& input_gates,
                                                 const at::Tensor& hidden_gates,
                                                 const at::Tensor& hx,
                                                 const std::optional<at::Tensor>& input_bias,
                                                 const std::optional<at::Tensor>& hidden_bias) {
  auto [batch, h] = check_cell("_thnn_fused_gru_cell", 3, input_gates, hidden_gates, hx,
                               input_bias, hidden_bias);
  return {meta_like({batch, h}, hx.scalar_type()), meta_like({batch, 5 * h}, hx.scalar_type())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward_meta(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  TORCH_CHECK(grad_hy.dim() == 2 && workspace.dim() == 2 &&
                  workspace.size(0) == grad_hy.size(0) && workspace.size(1) == 5 * grad_hy.size(1),
              "_thnn_fused_gru_cell_backward: workspace ", workspace.sizes(),
              " does not match grad_hy ", grad_hy.sizes());
  int64_t batch = grad_hy.size(0), h = grad_hy.size(1);
  auto dtype = grad_hy.scalar_type();
  at::Tensor gi = meta_like({batch, 3 * h}, dtype), gh = meta_like({batch, 3 * h}, dtype);
  at::Tensor bias_i, bias_h;
  if (has_bias) bias_i = meta_like({3 * h}, dtype), bias_h = meta_like({3 * h}, dtype);
  return {gi, gh, meta_like({batch, h}, dtype), bias_i, bias_h};
}

}  // namespace

// Private to the tpu kernels (meta.h), registered with the library.
const bool registered = [] {
  auto unboxed = [](auto fn) { return c10::KernelFunction::makeFromUnboxedFunction(fn); };
  add_private_meta("aten::_thnn_fused_lstm_cell", unboxed(TORCH_FN(lstm_cell_meta)));
  add_private_meta("aten::_thnn_fused_gru_cell", unboxed(TORCH_FN(gru_cell_meta)));
  add_private_meta("aten::_thnn_fused_gru_cell_backward",
                   unboxed(TORCH_FN(gru_cell_backward_meta)));
  return true;
}();

}  // namespace torch_tpu::aten
