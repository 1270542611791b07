// Answers the target profile's CPU-numerics questions (hlo/target.h): which
// kernel CPU PyTorch runs on this host, where the choice changes the rounding
// of 16-bit results. The engine's configuration carries the answer's source
// (python/module.cc); nothing is installed at load.
//
// CPU PyTorch computes a 16-bit transposed convolution through oneDNN (f32
// sums, one rounding) only where oneDNN supports the type on this CPU; f16
// needs AVX512-FP16 or AMX-FP16. Elsewhere its slow col2im kernel rounds each
// kernel tap. Rather than re-deriving oneDNN's CPU checks, PyTorch is asked:
// one small transposed convolution per dtype, once per process, compared with
// the same sums rounded once. On these inputs the slow kernel differs from
// one rounding on over a quarter of the elements (123 of 484 in bf16, 136 in
// f16), so an exact match means oneDNN.
#include <ATen/core/Tensor.h>
#include <ATen/ops/conv_transpose2d.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cmath>
#include <mutex>
#include <optional>
#include <vector>

#include "cpu_numerics.h"

namespace torch_tpu::aten {
namespace {

at::Tensor probe_values(std::initializer_list<int64_t> shape, double step) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kFloat).device(at::kCPU));
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(3 * std::sin(step * i));
  return t;
}

bool probe_onednn(c10::ScalarType dtype) {
  // A dispatch mode the caller may be running under (fake tensors, a user's
  // TorchDispatchMode) must not see these CPU ops.
  c10::impl::ExcludeDispatchKeyGuard no_python(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
  at::Tensor x = probe_values({2, 4, 5, 5}, 1.7), w = probe_values({4, 2, 3, 3}, 2.3);
  x = x.to(dtype);
  w = w.to(dtype);
  const std::vector<int64_t> stride{2, 2};
  at::Tensor half = at::conv_transpose2d(x, w, std::nullopt, stride);
  at::Tensor once = at::conv_transpose2d(x.to(at::kFloat), w.to(at::kFloat), std::nullopt, stride);
  return half.equal(once.to(dtype));
}

}  // namespace

bool cpu_onednn_half_conv(hlo::ElementType t) {
  static std::once_flag once;
  static bool bf16 = true, f16 = false;
  std::call_once(once, [] {
    try {
      bf16 = probe_onednn(at::kBFloat16);
      f16 = probe_onednn(at::kHalf);
    } catch (const std::exception&) {
      // A CPU build without these kernels: keep the common case.
    }
  });
  return t == hlo::ElementType::kF16 ? f16 : bf16;
}

}  // namespace torch_tpu::aten
