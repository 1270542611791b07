// PyTorch's fused inference path for attention (`nn.MultiheadAttention`,
// `nn.TransformerEncoderLayer` under `eval()` and no grad): the ops it calls
// on any device it accepts, PrivateUse1 among them. Each kernel is composed
// of ATen ops on tpu tensors (matmul, softmax, layer_norm, ...), so these
// run through the existing lowerings, fuse in Fused Eager, and follow the
// CPU kernels' order of operations (bias and 1/sqrt(head dim) before QKᵀ,
// averaged weights as a sum over heads divided by their count).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "op_list.h"

namespace torch_tpu::aten {

namespace {

// Softmax over `dim` where `mask` is true at the excluded places. mask_type
// 0 is an (L, L) attention mask, 1 a (B, L) key padding mask for a
// (B, H, L, L) input, 2 a mask of the input's shape. As on CPU, a fully
// masked row is NaN.
at::Tensor masked_softmax(const at::Tensor& input, const at::Tensor& mask_in,
                          std::optional<int64_t> dim_in, std::optional<int64_t> mask_type_in) {
  TORCH_CHECK(mask_in.scalar_type() == at::kBool, "_masked_softmax on tpu: mask should be a boolean tensor, got ",
              mask_in.scalar_type());
  TORCH_CHECK(mask_type_in.has_value(), "_masked_softmax on tpu: mask_type should be defined");
  int64_t mask_type = *mask_type_in;
  TORCH_CHECK(mask_type >= 0 && mask_type <= 2, "_masked_softmax on tpu: mask_type must be 0, 1 or 2, got ",
              mask_type);
  const int64_t dim = at::maybe_wrap_dim(dim_in.value_or(input.dim() - 1), input.dim());
  if (mask_in.dim() != 2 || input.dim() != 4) mask_type = 2;
  at::Tensor mask = mask_in;
  if (mask_type == 2) {
    TORCH_CHECK(input.sizes() == mask.sizes(), "_masked_softmax on tpu: for mask_type == 2 the mask's shape ",
                mask.sizes(), " should match the input's ", input.sizes());
  } else if (mask_type == 1) {
    TORCH_CHECK(input.size(0) == mask.size(0) && input.size(2) == mask.size(1),
                "_masked_softmax on tpu: for mask_type == 1 the mask's shape should be (B, L), got ", mask.sizes(),
                " for input ", input.sizes());
    mask = mask.view({input.size(0), 1, 1, input.size(2)});
  } else {
    TORCH_CHECK(input.size(2) == mask.size(0) && input.size(2) == mask.size(1),
                "_masked_softmax on tpu: for mask_type == 0 the mask's shape should be (L, L), got ", mask.sizes(),
                " for input ", input.sizes());
    mask = mask.view({1, 1, input.size(2), input.size(2)});
  }
  return at::softmax(input.masked_fill(mask, -std::numeric_limits<double>::infinity()), dim);
}

// (B, T, 3D) projections plus bias → q, k, v as (B, heads, T, D/heads), q
// scaled by 1/sqrt(D/heads); 16-bit inputs are computed in f32 and rounded
// once, as on CPU. The three are views of one (3, B, heads, T, D/heads)
// tensor, with CPU's strides.
std::tuple<at::Tensor, at::Tensor, at::Tensor> transform_bias_rescale_qkv(const at::Tensor& qkv,
                                                                          const at::Tensor& qkv_bias,
                                                                          int64_t num_heads) {
  TORCH_CHECK(!qkv.is_nested(), "_transform_bias_rescale_qkv on tpu: nested tensors are not supported");
  TORCH_CHECK(qkv.dim() == 3, "_transform_bias_rescale_qkv on tpu: expected a 3-D qkv, got ", qkv.dim(), "-D");
  const int64_t B = qkv.size(0), T = qkv.size(1), D3 = qkv.size(2);
  TORCH_CHECK(D3 % 3 == 0, "_transform_bias_rescale_qkv on tpu: qkv's last dim ", D3, " is not divisible by 3");
  const int64_t D = D3 / 3;
  TORCH_CHECK(num_heads > 0 && D % num_heads == 0, "_transform_bias_rescale_qkv on tpu: embed dim ", D,
              " is not divisible by num_heads ", num_heads);
  TORCH_CHECK(qkv_bias.dim() == 1 && qkv_bias.size(0) == D3, "_transform_bias_rescale_qkv on tpu: expected a bias of ",
              "shape [", D3, "], got ", qkv_bias.sizes());
  const int64_t dh = D / num_heads;
  const at::ScalarType dtype = qkv.scalar_type();
  const at::ScalarType op = at::isReducedFloatingType(dtype) ? at::kFloat : dtype;
  const double inv_sqrt = dtype == at::kDouble ? 1.0 / std::sqrt(static_cast<double>(dh))
                                               : static_cast<float>(1.0 / std::sqrt(static_cast<float>(dh)));
  at::Tensor x = at::add(qkv.to(op), qkv_bias.to(op)).view({B, T, 3, num_heads, dh}).permute({2, 0, 3, 1, 4});
  at::Tensor all = at::stack({x.select(0, 0).mul(inv_sqrt), x.select(0, 1), x.select(0, 2)}).to(dtype);
  return {all.select(0, 0), all.select(0, 1), all.select(0, 2)};
}

// x (B, T, D) @ wᵀ, through matmul as on CPU (no bias: it is added with the
// scaling in `_transform_bias_rescale_qkv`).
at::Tensor gemm_nt(const at::Tensor& x, const at::Tensor& w) { return at::matmul(x, w.t()); }

// (B, T, 3D): one product for self-attention, else one per input.
at::Tensor qkv_projection(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                          int64_t embed_dim, const at::Tensor& qkv_weight) {
  if (key.is_same(value)) {
    if (query.is_same(key)) return gemm_nt(query, qkv_weight);
    auto w = qkv_weight.split_with_sizes({embed_dim, 2 * embed_dim}, 0);
    return at::cat({gemm_nt(query, w[0]), gemm_nt(key, w[1])}, 2);
  }
  auto w = qkv_weight.chunk(3, 0);
  return at::cat({gemm_nt(query, w[0]), gemm_nt(key, w[1]), gemm_nt(value, w[2])}, 2);
}

// x (B, T, K) through a linear layer as a (B·T, K) matrix, as on CPU.
at::Tensor linear_rows(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  at::Tensor y = at::linear(x.reshape({x.size(0) * x.size(1), x.size(2)}), w, b);
  return y.view({x.size(0), x.size(1), y.size(1)});
}

std::tuple<at::Tensor, at::Tensor> native_multi_head_attention(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, int64_t embed_dim, int64_t num_head,
    const at::Tensor& qkv_weight, const at::Tensor& qkv_bias, const at::Tensor& proj_weight,
    const at::Tensor& proj_bias, const std::optional<at::Tensor>& mask, bool need_weights,
    bool average_attn_weights, std::optional<int64_t> mask_type) {
  const char* op = "_native_multi_head_attention on tpu: ";
  TORCH_CHECK(!query.is_nested() && !key.is_nested() && !value.is_nested(), op,
              "nested tensors are not supported (TransformerEncoder converts to padded ones)");
  const int64_t D = embed_dim;
  TORCH_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3, op, "expected 3-D query, key and value, got ",
              query.dim(), "-D, ", key.dim(), "-D, ", value.dim(), "-D");
  TORCH_CHECK(query.size(2) == D, op, "embed_dim ", D, " does not match the last dim of query ", query.sizes());
  TORCH_CHECK(query.sizes() == key.sizes() && key.sizes() == value.sizes(), op,
              "expected query, key and value of one shape, got ", query.sizes(), ", ", key.sizes(), ", ",
              value.sizes());
  TORCH_CHECK(qkv_weight.dim() == 2 && qkv_weight.size(0) == 3 * D && qkv_weight.size(1) == D, op,
              "expected qkv_weight of shape [", 3 * D, ", ", D, "], got ", qkv_weight.sizes());
  TORCH_CHECK(qkv_bias.dim() == 1 && qkv_bias.size(0) == 3 * D, op, "expected qkv_bias of shape [", 3 * D,
              "], got ", qkv_bias.sizes());
  TORCH_CHECK(num_head > 0 && D % num_head == 0, op, "embed_dim ", D, " is not divisible by num_head ", num_head);

  at::Tensor qkv = qkv_projection(query, key, value, D, qkv_weight);
  if (qkv.numel() == 0) return {at::empty_like(query), at::Tensor()};
  auto [q, k, v] = at::_transform_bias_rescale_qkv(qkv, qkv_bias, num_head);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1));  // (B, H, T, T)
  at::Tensor weights = mask.has_value() && mask->defined()
                           ? at::_masked_softmax(scores, mask->to(at::kBool), scores.dim() - 1, mask_type)
                           : at::softmax(scores, scores.dim() - 1);
  at::Tensor context = at::matmul(weights, v);  // (B, H, T, D/H)
  const int64_t B = query.size(0), T = query.size(1);
  at::Tensor out = linear_rows(context.transpose(1, 2).reshape({B, T, D}), proj_weight, proj_bias);
  if (!need_weights) return {out, at::Tensor()};
  if (average_attn_weights) weights = at::div(weights.sum(1), num_head);
  return {out, weights};
}

at::Tensor layer_norm(const at::Tensor& x, int64_t embed_dim, double eps, const at::Tensor& w,
                      const at::Tensor& b) {
  return at::layer_norm(x, {embed_dim}, w, b, eps, true);
}

at::Tensor transformer_encoder_layer_fwd(
    const at::Tensor& src, int64_t embed_dim, int64_t num_heads, const at::Tensor& qkv_weight,
    const at::Tensor& qkv_bias, const at::Tensor& proj_weight, const at::Tensor& proj_bias, bool use_gelu,
    bool norm_first, double eps, const at::Tensor& norm_weight_1, const at::Tensor& norm_bias_1,
    const at::Tensor& norm_weight_2, const at::Tensor& norm_bias_2, const at::Tensor& ffn_weight_1,
    const at::Tensor& ffn_bias_1, const at::Tensor& ffn_weight_2, const at::Tensor& ffn_bias_2,
    const std::optional<at::Tensor>& mask, std::optional<int64_t> mask_type) {
  TORCH_CHECK(src.dim() == 3, "_transformer_encoder_layer_fwd on tpu: expected a 3-D src, got ", src.dim(), "-D");
  if (src.numel() == 0) return src.clone();
  at::Tensor x = norm_first ? layer_norm(src, embed_dim, eps, norm_weight_1, norm_bias_1) : src;
  x = std::get<0>(at::_native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias,
                                                    proj_weight, proj_bias, mask, false, true, mask_type));
  x = at::add(x, src);
  if (!norm_first) x = layer_norm(x, embed_dim, eps, norm_weight_1, norm_bias_1);
  const at::Tensor residual = x;
  if (norm_first) x = layer_norm(x, embed_dim, eps, norm_weight_2, norm_bias_2);
  x = linear_rows(x, ffn_weight_1, ffn_bias_1);
  x = use_gelu ? at::gelu(x) : at::relu(x);
  x = linear_rows(x, ffn_weight_2, ffn_bias_2);
  x = at::add(x, residual);
  if (!norm_first) x = layer_norm(x, embed_dim, eps, norm_weight_2, norm_bias_2);
  return x;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  KernelList k(m, "composite");
  k.impl("_masked_softmax", TORCH_FN(masked_softmax));
  k.impl("_transform_bias_rescale_qkv", TORCH_FN(transform_bias_rescale_qkv));
  k.impl("_native_multi_head_attention", TORCH_FN(native_multi_head_attention));
  k.impl("_transformer_encoder_layer_fwd", TORCH_FN(transformer_encoder_layer_fwd));
}

}  // namespace torch_tpu::aten
