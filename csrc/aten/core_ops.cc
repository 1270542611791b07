// The operators every backend provides by hand: allocation, views (metadata
// only: they share the storage), resize, set_, copies across devices and
// reading a scalar back. Everything numeric goes through the lowerings.
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/_conj_physical.h>
#include <ATen/ops/_neg_view.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/_copy_from.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "defer.h"
#include "device.h"
#include "dispatch.h"
#include "op_list.h"
#include "storage.h"
#include "tensor_io.h"

namespace torch_tpu::aten {

namespace {

constexpr auto kTpu = c10::DeviceType::PrivateUse1;

int device_index(std::optional<c10::Device> device) {
  if (device && device->type() == kTpu && device->has_index()) return device->index();
  return current_device();
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  int index = device_index(device);
  check_device(index);
  c10::DeviceGuard guard(c10::Device(kTpu, index));
  return at::detail::empty_generic(size, allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  int index = device_index(device);
  check_device(index);
  c10::DeviceGuard guard(c10::Device(kTpu, index));
  return at::detail::empty_strided_generic(size, stride, allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// As CPU's: the same sizes leave the tensor as it is (a strided out= view
// stays a view), new sizes make it contiguous, and a memory format given
// restrides it (the storage grows where the new strides need more).
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format",
              c10::MemoryFormat::Preserve);
  if (self.sizes() != size) resize(self, size);
  if (memory_format) {
    self.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
    resize(self, self.sizes(), self.strides());
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(source.device_type() == kTpu, "set_: expected a tpu storage, got ", source.device());
  auto* impl = self.unsafeGetTensorImpl();
  if (!self.storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset);
  if (stride.empty()) impl->set_sizes_contiguous(size);
  else impl->set_sizes_and_strides(size, stride);
  resize(self, self.sizes(), self.strides());  // grows the storage if it is too small
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.element_size());
  return set_storage(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(),
                     source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  at::Tensor fresh = empty_memory_format({0}, self.scalar_type(), std::nullopt, self.device(),
                                         std::nullopt, std::nullopt);
  return set_storage(self, fresh.storage(), 0, {0}, {});
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.sizes() == dst.sizes() || dst.numel() == 0 || self.numel() == 1 ||
                  self.dim() <= dst.dim(),
              "copy_: shapes ", self.sizes(), " and ", dst.sizes(), " do not match");
  if (dst.device().type() == kTpu && self.device().type() == kTpu) {
    // As CPU's copy_: no written element shared by two positions, and the
    // source either the destination itself or disjoint from it.
    at::assert_no_internal_overlap(dst);
    at::assert_no_partial_overlap(dst, self);
    auto& e = engine::Engine::get();
    auto guard = e.lock();
    if (self.device() != dst.device()) {
      // Across tpu devices: through the host.
      copy_from_cpu(dst, to_cpu(self, "aten::copy_ (across tpu devices)"));
      return dst;
    }
    e.begin(dst.device().index());
    if (!try_defer_copy(e, self, dst)) {
      auto& b = e.builder();
      hlo::Value v = b.convert(read(e, self), to_hlo(dst.scalar_type()));
      write(e, dst, b.broadcast_to(v, dst.sizes().vec()));
    }
    e.end("copy_", nullptr, /*joins_consumer=*/true);  // Strict: runs in its consumer's program
  } else if (dst.device().type() == kTpu) {
    copy_from_cpu(dst, self);
  } else {
    TORCH_CHECK(self.device().type() == kTpu, "copy_: unexpected devices");
    dst.copy_(to_cpu(self, "aten::copy_ (to the host)"));
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    if (dst.device().type() == kTpu) resize(dst, self.sizes());
    else dst.resize_(self.sizes());
  }
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  return to_cpu(self, "aten::_local_scalar_dense (Tensor.item())").item();
}

// A copy between tensors of which one is a lazy conjugate or negative view
// (is_conj/is_neg). PyTorch's fallbacks would resolve the source with a clone,
// which copies through _copy_from again, forever; and a destination's bit
// says its storage holds the conjugate (negation) of what it reads as. So the
// plain storages are copied, then the destination's storage is conjugated
// (negated) where the two views' bits differ.
at::Tensor copy_from_math_bits(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  auto plain = [](const at::Tensor& t) {
    at::Tensor p = t.is_conj() ? t.conj() : t;  // each flips the bit: a view
    return p.is_neg() ? at::_neg_view(p) : p;
  };
  at::Tensor out = plain(dst);
  {
    c10::impl::ExcludeDispatchKeyGuard guard(
        c10::DispatchKeySet({c10::DispatchKey::Conjugate, c10::DispatchKey::Negative}));
    at::_copy_from(plain(self), out, non_blocking);
  }
  if (self.is_conj() != dst.is_conj()) out.copy_(at::_conj_physical(out));
  if (self.is_neg() != dst.is_neg()) out.neg_();
  return dst;
}

// Whether `self` may take `from`'s data by a shallow copy (`param.data = t`).
// c10 answers yes only between its own dense backends, so without this
// `module.to("tpu")` replaced each Parameter by a new one and untied shared
// weights (a tied embedding became two tensors). Dense tpu and dense CPU
// tensors share one TensorImpl class, so a shallow copy between them is
// exactly what CPU <-> CUDA does.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided &&
           (t.device().type() == kTpu || t.device().type() == c10::DeviceType::CPU);
  };
  const auto& a = self.unsafeGetTensorImpl()->key_set();
  const auto& b = from.unsafeGetTensorImpl()->key_set();
  return a == b || (dense(self) && dense(from));
}

}  // namespace

// _copy_from is the copy of backends outside PyTorch's own (PrivateUse1, XLA):
// these kernels change no other device's copies.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", copy_from_math_bits);
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", copy_from_math_bits);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  KernelList k(m, "core");
  k.impl("empty.memory_format", empty_memory_format);
  k.impl("empty_strided", empty_strided);
  k.impl("as_strided", at::native::as_strided_tensorimpl);
  k.impl("view", at::native::view);
  k.impl("_reshape_alias", at::native::_reshape_alias);
  k.impl("unfold", at::native::unfold);
  k.impl("view_as_real", at::native::view_as_real);
  k.impl("view_as_complex", at::native::view_as_complex);
  k.impl("resize_", resize_);
  k.impl("set_.source_Storage", set_source_storage);
  k.impl("set_.source_Storage_storage_offset", set_storage);
  k.impl("set_.source_Tensor", set_source_tensor);
  k.impl("set_", set_empty);
  k.impl("_copy_from", copy_from);
  k.impl("_copy_from_and_resize", copy_from_and_resize);
  k.impl("_local_scalar_dense", local_scalar_dense);
  k.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  register_lowered_ops(m);
}

}  // namespace torch_tpu::aten
