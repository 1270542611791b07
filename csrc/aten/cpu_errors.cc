// CPU's exception for a call the tpu rejected. Meta functions (many in
// Python) and lowerings word errors their own way, and some raise another
// type than CPU (AssertionError, ValueError, ZeroDivisionError,
// RuntimeError for CPU's IndexError); the CPU run of the same call on zeros
// raises exactly what the user would see on CPU. Only on the error path, and
// only for small tensors: the run allocates their size on the host.
#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "checks.h"

namespace torch_tpu::aten {

namespace {

constexpr size_t kMaxBytes = size_t{64} << 20;

bool is_tpu(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// A zero-filled CPU tensor laid out as `t`, counted against `budget`.
at::Tensor stand_in(const at::Tensor& t, size_t& budget) {
  if (!is_tpu(t)) return t;
  size_t bytes = t.numel() * t.element_size();
  if (bytes > budget) throw std::length_error("too large to run on the CPU");
  budget -= bytes;
  at::Tensor c = at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kCPU));
  return c.zero_();
}

c10::IValue cpu_value(const c10::IValue& v, const c10::Argument& arg, size_t& budget) {
  if (v.isTensor()) return stand_in(v.toTensor(), budget);
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(stand_in(t, budget));
    return out;
  }
  if (v.isList() && v.toList().elementType()->kind() == c10::TypeKind::OptionalType) {
    c10::List<std::optional<at::Tensor>> out;
    for (const c10::IValue& e : v.toListRef())
      out.push_back(e.isTensor() ? std::optional<at::Tensor>(stand_in(e.toTensor(), budget))
                                 : std::nullopt);
    return out;
  }
  if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1)
    return c10::Device(c10::kCPU);
  if (v.isGenerator() && arg.type()->kind() == c10::TypeKind::OptionalType) return c10::IValue();
  return v;
}

}  // namespace

void raise_as_cpu(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  const auto& schema = op.schema();
  std::vector<c10::IValue> stack;
  size_t budget = kMaxBytes;
  try {
    for (size_t i = 0; i < args.size(); ++i)
      stack.push_back(cpu_value(args[i], schema.arguments()[i], budget));
  } catch (const std::length_error&) {
    return;  // too large: the caller keeps its own error
  }
  // The zeros need no autograd; CPU's own kernel answers. A backend hook
  // (convolution_overrideable) has no CPU kernel: CPU's op of the same
  // arguments answers for it.
  c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
  if (schema.name() == "aten::convolution_overrideable") {
    auto conv = c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
    conv.callBoxed(&stack);
    return;
  }
  // An op CPU has no kernel for (the fused RNN cells: CUDA's and ours) would
  // only say so: the caller's own error names the mistake.
  if (!op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) return;
  op.callBoxed(&stack);  // raises CPU's exception for the same mistake
}

}  // namespace torch_tpu::aten
