// Meta (shape-only) kernels for geqrf and linalg_lstsq, which PyTorch gives
// none; the lowered kernel's meta step (meta.cc) takes its output types from
// them. Checks and shapes follow CPU's kernels, with CPU's default driver
// (gelsy) when none is given. For gelsd/gelss the residuals are sized as for
// a full-rank A (CPU drops them when the rank it finds is below n).
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <c10/util/strides.h>
#include <torch/library.h>

#include "meta.h"

namespace torch_tpu::aten {

namespace {

at::Tensor meta_of(std::vector<int64_t> shape, c10::ScalarType dtype) {
  return at::detail::empty_meta(shape, dtype);
}

std::tuple<at::Tensor, at::Tensor> geqrf_meta(const at::Tensor& self) {
  TORCH_CHECK(self.dim() >= 2, "torch.geqrf: input must have at least 2 dimensions.");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()) || at::isComplexType(self.scalar_type()),
              "torch.geqrf: Expected a floating point or complex tensor as input. Got ",
              self.scalar_type());
  std::vector<int64_t> tau(self.sizes().begin(), self.sizes().end() - 2);
  tau.push_back(std::min(self.size(-2), self.size(-1)));
  return {at::detail::empty_strided_meta(self.sizes(), lapack_strides(self.sizes()), self.scalar_type()),
          meta_of(tau, self.scalar_type())};
}

void check_lstsq(const at::Tensor& self, const at::Tensor& b, const std::string& driver) {
  TORCH_CHECK(self.dim() >= 2, "torch.linalg.lstsq: input must have at least 2 dimensions.");
  TORCH_CHECK(b.dim() >= 1, "torch.linalg.lstsq: other must have at least 1 dimension.");
  TORCH_CHECK(self.scalar_type() == b.scalar_type(),
              "torch.linalg.lstsq: Expected input and other to have the same dtype, but got "
              "input's dtype ", self.scalar_type(), " and other's dtype ", b.scalar_type());
  TORCH_CHECK(at::isFloatingType(self.scalar_type()) || at::isComplexType(self.scalar_type()),
              "This function doesn't handle types other than float and double");
  int64_t diff = self.dim() - b.dim();
  TORCH_CHECK(diff == 0 || diff == 1,
              "torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and "
              "(input.dim() - other.dim()) <= 1");
  TORCH_CHECK(self.size(-2) == (diff == 1 ? b.size(-1) : b.size(-2)),
              diff == 1 ? "torch.linalg.lstsq: input.size(-2) should match other.size(-1)"
                        : "torch.linalg.lstsq: input.size(-2) should match other.size(-2)");
  TORCH_CHECK(driver == "gels" || driver == "gelsy" || driver == "gelsd" || driver == "gelss",
              "torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
}

using Lstsq = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

Lstsq lstsq_meta(const at::Tensor& self, const at::Tensor& b, std::optional<double>,
                 std::optional<c10::string_view> driver_arg) {
  std::string driver = driver_arg.has_value() ? std::string(*driver_arg) : "gelsy";
  check_lstsq(self, b, driver);
  bool vector = self.dim() - b.dim() == 1;
  int64_t m = self.size(-2), n = self.size(-1), k = vector ? 1 : b.size(-1);
  at::IntArrayRef a_batch = self.sizes().slice(0, self.dim() - 2);
  at::IntArrayRef b_batch = b.sizes().slice(0, b.dim() - (vector ? 1 : 2));
  std::vector<int64_t> batch = at::infer_size(a_batch, b_batch);
  c10::ScalarType dtype = self.scalar_type(), real = c10::toRealValueType(dtype);
  std::vector<int64_t> solution = batch, residuals = batch, rank = a_batch.vec(), sv = a_batch.vec();
  solution.push_back(n);
  if (!vector) solution.push_back(k);
  residuals.push_back(k);
  if (m <= n || driver == "gelsy") residuals = {0};
  if (driver == "gels") rank = {0};
  if (driver == "gelsd" || driver == "gelss") sv.push_back(std::min(m, n));
  else sv = {0};
  return {meta_of(solution, dtype), meta_of(residuals, real), meta_of(rank, at::kLong),
          meta_of(sv, real)};
}

}  // namespace

c10::DimVector lapack_strides(c10::IntArrayRef sizes) {
  c10::DimVector strides = c10::contiguous_strides(sizes);
  size_t r = sizes.size();
  strides[r - 2] = 1;
  strides[r - 1] = std::max<int64_t>(sizes[r - 2], 1);
  return strides;
}

// Private to the tpu kernels (meta.h), registered with the library.
const bool registered = [] {
  auto unboxed = [](auto fn) { return c10::KernelFunction::makeFromUnboxedFunction(fn); };
  add_private_meta("aten::geqrf", unboxed(TORCH_FN(geqrf_meta)));
  add_private_meta("aten::linalg_lstsq", unboxed(TORCH_FN(lstsq_meta)));
  return true;
}();

}  // namespace torch_tpu::aten
