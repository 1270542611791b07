// Which kernel F.scaled_dot_product_attention runs on tpu. PyTorch asks the
// device's `_fused_sdp_choice` stub; "overrideable" sends the call to
// aten::_scaled_dot_product_fused_attention_overrideable (and its backward),
// lowered as one op each (lowering/sdpa.cc): in Strict Eager an attention is
// one program forward and one backward instead of the math path's dozen ops
// (scale, matmul, mask, softmax, matmul, their backwards and the copies
// between them). Calls the lowering does not cover keep the math path, with
// its exact semantics and errors: dropout, nested or symbolic-size tensors,
// other dtypes, ranks other than 3 and 4, shapes that only broadcast, a mask
// the lowering cannot take, or the backend disabled
// (torch.nn.attention.sdpa_kernel). A mask with is_causal is taken, both
// applied, as CPU's kernel does (the math path refuses the pair).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <torch/library.h>

#include "op_list.h"

namespace torch_tpu::aten {

namespace {

bool floating(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

bool concrete(const at::Tensor& t) {
  return !t.is_nested() && !t.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
}

// The mask broadcasts to (B, Hq, L, S) (or (Hq, L, S)) and adds to the scores
// as the math path adds it (boolean, or the query's dtype).
bool mask_fits(const at::Tensor& mask, const at::Tensor& q, int64_t s) {
  if (!concrete(mask) || (mask.scalar_type() != at::kBool && mask.scalar_type() != q.scalar_type()))
    return false;
  const int64_t n = q.dim();
  if (mask.dim() > n) return false;
  for (int64_t i = 1; i <= mask.dim(); ++i) {
    const int64_t want = i == 1 ? s : q.size(n - i);
    if (mask.size(-i) != 1 && mask.size(-i) != want) return false;
  }
  return true;
}

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> /*scale*/, bool enable_gqa) {
  constexpr auto math = static_cast<int64_t>(at::SDPBackend::math);
  if (!at::globalContext().userEnabledOverrideableSDP()) return math;
  if (!concrete(q) || !concrete(k) || !concrete(v) || dropout_p > 0.0) return math;
  const int64_t n = q.dim();
  if ((n != 3 && n != 4) || k.dim() != n || v.dim() != n) return math;
  if (!floating(q.scalar_type()) || k.scalar_type() != q.scalar_type() ||
      v.scalar_type() != q.scalar_type())
    return math;
  if (q.numel() == 0 || k.numel() == 0 || v.numel() == 0) return math;
  if (n == 4 && (k.size(0) != q.size(0) || v.size(0) != q.size(0))) return math;
  const int64_t hq = q.size(-3), hk = k.size(-3);
  if (v.size(-3) != hk || v.size(-2) != k.size(-2) || k.size(-1) != q.size(-1)) return math;
  if (hq != hk && (!enable_gqa || hq % hk != 0)) return math;
  const bool has_mask = mask.has_value() && mask->defined();
  if (has_mask && !mask_fits(*mask, q, k.size(-2))) return math;
  return static_cast<int64_t>(at::SDPBackend::overrideable);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  KernelList k(m, "core");
  k.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
}

}  // namespace torch_tpu::aten

// F.scaled_dot_product_attention calls the stub; torch._fused_sdp_choice
// (and tracing code that asks it) the operator.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_tpu::aten::fused_sdp_choice)
}  // namespace at::native
