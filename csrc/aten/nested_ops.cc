// The nested-tensor path of `nn.TransformerEncoder` in inference: with a
// key padding mask it packs the batch into a nested tensor
// (`_nested_tensor_from_mask`), runs each layer on it
// (`_transformer_encoder_layer_fwd`) and pads back (`to_padded_tensor`,
// zeros where the mask padded). A tpu nested tensor is PyTorch's
// NestedTensorImpl over a flat tpu buffer: its sequences of (length, D)
// rows, sizes on the host as for every nested tensor. Only this path's
// shapes are supported: 2-D components of one width.
#include <ATen/ATen.h>
#include <ATen/NestedTensorImpl.h>
#include <torch/library.h>

#include <vector>

#include "op_list.h"

namespace torch_tpu::aten {

namespace {

using at::native::NestedTensorImpl;

// The rows a batch of sequences of these lengths occupies in a padded
// (N, T, D) tensor: batch and time indices, on `device`.
std::pair<at::Tensor, at::Tensor> rows(const std::vector<int64_t>& lengths, c10::Device device) {
  std::vector<int64_t> batch, time;
  for (int64_t i = 0; i < static_cast<int64_t>(lengths.size()); ++i) {
    for (int64_t t = 0; t < lengths[i]; ++t) {
      batch.push_back(i);
      time.push_back(t);
    }
  }
  auto as_tensor = [&](const std::vector<int64_t>& v) {
    return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(device);
  };
  return {as_tensor(batch), as_tensor(time)};
}

// A nested tensor of the first lengths[i] rows of padded[i].
at::Tensor nested_from_padded(const at::Tensor& padded, const std::vector<int64_t>& lengths) {
  const int64_t N = static_cast<int64_t>(lengths.size()), D = padded.size(2);
  std::vector<int64_t> flat;
  for (int64_t n : lengths) flat.insert(flat.end(), {n, D});
  at::Tensor sizes = at::tensor(flat, at::TensorOptions().dtype(at::kLong)).view({N, 2});
  auto [b, t] = rows(lengths, padded.device());
  at::Tensor buffer = padded.index({b, t}).reshape({-1});
  return at::detail::make_tensor<NestedTensorImpl>(std::move(buffer), std::move(sizes));
}

// The lengths of a nested tensor's (length, D) components and their D.
std::pair<std::vector<int64_t>, int64_t> layout(const at::Tensor& nested, const char* op) {
  const at::Tensor& sizes = at::native::get_nested_tensor_impl(nested)->get_nested_sizes();
  TORCH_CHECK_NOT_IMPLEMENTED(sizes.dim() == 2 && sizes.size(1) == 2, op,
                              " on tpu: only nested tensors of 2-D components are supported");
  at::Tensor s = sizes.contiguous();
  const int64_t N = s.size(0), *p = s.data_ptr<int64_t>();
  std::vector<int64_t> lengths(N);
  for (int64_t i = 0; i < N; ++i) {
    lengths[i] = p[2 * i];
    TORCH_CHECK_NOT_IMPLEMENTED(p[2 * i + 1] == p[1], op,
                                " on tpu: only nested tensors whose components have one width are supported");
  }
  return {lengths, N == 0 ? 0 : p[1]};
}

// A (N, L) padding mask for input t, on the host (nested sizes live there).
at::Tensor host_mask(const at::Tensor& t, const at::Tensor& mask, const char* op) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, op, ": expected a mask of ScalarType Bool, got ",
              mask.scalar_type());
  TORCH_CHECK(mask.dim() == 2, op, ": the padding mask should be 2-D, got ", mask.dim(), "-D");
  TORCH_CHECK(t.dim() == 3, op, ": the input should be a 3-D tensor, N * L * D, got ", t.dim(), "-D");
  TORCH_CHECK(t.size(0) == mask.size(0) && t.size(1) == mask.size(1), op, ": the mask's size ", mask.sizes(),
              " should match the input's ", t.sizes());
  return mask.to(at::kCPU);
}

// The number of true places in each row of a host mask.
std::vector<int64_t> lengths_of(const at::Tensor& host) {
  at::Tensor counts = host.sum(1, false, at::kLong).contiguous();
  return std::vector<int64_t>(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + counts.numel());
}

// Whether each row is true, then false.
bool is_left_aligned(const at::Tensor& host, const std::vector<int64_t>& lengths) {
  at::Tensor expected = at::arange(host.size(1)).unsqueeze(0).lt(
      at::tensor(lengths, at::TensorOptions().dtype(at::kLong)).unsqueeze(1));
  return at::equal(host, expected);
}

bool left_aligned(const at::Tensor& t, const at::Tensor& mask) {
  at::Tensor host = host_mask(t, mask, "_nested_tensor_from_mask_left_aligned");
  return is_left_aligned(host, lengths_of(host));
}

at::Tensor nested_tensor_from_mask(const at::Tensor& t, const at::Tensor& mask, bool mask_check) {
  at::Tensor host = host_mask(t, mask, "_nested_tensor_from_mask");
  std::vector<int64_t> lengths = lengths_of(host);
  TORCH_CHECK(!mask_check || is_left_aligned(host, lengths),
              "_nested_tensor_from_mask: the mask must be left-aligned without gaps");
  return nested_from_padded(t, lengths);
}

// (N, max length, D) by default; output_size may be larger in every dim.
at::Tensor to_padded_tensor(const at::Tensor& self, double padding, at::OptionalSymIntArrayRef output_size) {
  auto [lengths, D] = layout(self, "to_padded_tensor");
  const int64_t N = static_cast<int64_t>(lengths.size());
  int64_t T = 0;
  for (int64_t n : lengths) T = std::max(T, n);
  std::vector<int64_t> shape{N, T, D};
  if (output_size.has_value()) {
    c10::IntArrayRef wanted = C10_AS_INTARRAYREF_SLOW(*output_size);
    TORCH_CHECK(wanted.size() == 3, "to_padded_tensor: the length of output_size ", wanted.size(),
                " does not match the nested tensor's dims (3); broadcasting is not supported");
    for (size_t i = 0; i < 3; ++i) {
      TORCH_CHECK(wanted[i] >= shape[i], "to_padded_tensor: output_size ", wanted,
                  " is less than the nested tensor's padded size ", c10::IntArrayRef(shape),
                  "; truncation is not supported");
    }
    shape.assign(wanted.begin(), wanted.end());
  }
  at::Tensor buffer = at::native::get_nested_tensor_impl(self)->get_buffer();
  at::Tensor out = at::full(shape, padding, buffer.options());
  auto [b, t] = rows(lengths, buffer.device());
  out.narrow(2, 0, D).index_put_({b, t}, buffer.view({-1, D}));
  return out;
}

// A layer on a nested batch is the dense layer on its padded form with a key
// padding mask; the padded rows are dropped again.
at::Tensor nested_transformer_encoder_layer_fwd(
    const at::Tensor& src, int64_t embed_dim, int64_t num_heads, const at::Tensor& qkv_weight,
    const at::Tensor& qkv_bias, const at::Tensor& proj_weight, const at::Tensor& proj_bias, bool use_gelu,
    bool norm_first, double eps, const at::Tensor& norm_weight_1, const at::Tensor& norm_bias_1,
    const at::Tensor& norm_weight_2, const at::Tensor& norm_bias_2, const at::Tensor& ffn_weight_1,
    const at::Tensor& ffn_bias_1, const at::Tensor& ffn_weight_2, const at::Tensor& ffn_bias_2,
    const std::optional<at::Tensor>& mask, std::optional<int64_t> mask_type) {
  TORCH_CHECK(!mask.has_value() || !mask->defined(),
              "_transformer_encoder_layer_fwd on tpu: a nested tensor with a mask is not supported");
  auto [lengths, D] = layout(src, "_transformer_encoder_layer_fwd");
  at::Tensor padded = to_padded_tensor(src, 0.0, std::nullopt);
  if (padded.numel() == 0) return nested_from_padded(padded, lengths);
  const int64_t T = padded.size(1);
  at::Tensor pad_mask = at::arange(T, at::TensorOptions().dtype(at::kLong)).unsqueeze(0)
                            .ge(at::tensor(lengths, at::TensorOptions().dtype(at::kLong)).unsqueeze(1))
                            .to(padded.device());
  at::Tensor out = at::_transformer_encoder_layer_fwd(
      padded, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps,
      norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
      pad_mask, 1);
  return nested_from_padded(out, lengths);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  KernelList k(m, "composite");
  k.impl("_nested_tensor_from_mask_left_aligned", TORCH_FN(left_aligned));
  k.impl("_nested_tensor_from_mask", TORCH_FN(nested_tensor_from_mask));
}

TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  KernelList k(m, "composite", "NestedTensorPrivateUse1");
  k.impl("to_padded_tensor", TORCH_FN(to_padded_tensor));
  k.impl("_transformer_encoder_layer_fwd", TORCH_FN(nested_transformer_encoder_layer_fwd));
}

}  // namespace torch_tpu::aten
