// Autocast for `tpu` (torch.autocast("tpu", dtype=torch.bfloat16)): the
// AutocastPrivateUse1 kernels. The policy is PyTorch's shared op lists
// (ATen/autocast_mode.h, the lists CUDA, XPU and MPS use): matmul,
// convolution and linear-family ops run in the autocast dtype; pointwise
// transcendental ops, norms, losses and softmax-like reductions run in f32;
// mixed-dtype ops promote to the widest input. Every other op falls through.
// The default autocast dtype of the device is bf16, a TPU's native type.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torch_tpu::aten {
namespace {

// BCE is unsafe in f16 (CUDA refuses it under autocast); in f32 it is fine.
at::Tensor binary_cross_entropy_fp32(const at::Tensor& self, const at::Tensor& target,
                                     const std::optional<at::Tensor>& weight,
                                     int64_t reduction) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastPrivateUse1);
  auto f32 = [](const at::Tensor& t) {
    return at::autocast::is_autocast_eligible(t, c10::DeviceType::PrivateUse1)
               ? t.to(at::kFloat) : t;
  };
  std::optional<at::Tensor> w;
  if (weight && weight->defined()) w = f32(*weight);
  return at::binary_cross_entropy(f32(self), f32(target), w, reduction);
}

const bool g_default_dtype = [] {
  at::autocast::set_autocast_dtype(c10::DeviceType::PrivateUse1, at::kBFloat16);
  return true;
}();

}  // namespace

// PyTorch's op lists name ATen types unqualified.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TPU_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TPU_FP32_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
#define TPU_REDISPATCH(FN, NAME, SIG, REDISPATCH_SIG, POLICY) \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(FN, NAME, SIG, REDISPATCH_SIG, POLICY)
  AT_FORALL_LOWER_PRECISION_FP(TPU_LOWER)
  AT_FORALL_FP32(TPU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_FP32_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(TPU_REDISPATCH)
  AT_FORALL_PROMOTE(TPU_PROMOTE)
#undef TPU_LOWER
#undef TPU_FP32
#undef TPU_FP32_OPT_DTYPE
#undef TPU_PROMOTE
#undef TPU_REDISPATCH
  m.impl("aten::binary_cross_entropy", TORCH_FN(binary_cross_entropy_fp32));
}

}  // namespace torch_tpu::aten
