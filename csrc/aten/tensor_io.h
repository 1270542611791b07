// Between torch tensors and engine values: dtype mapping, reading a tpu
// tensor (any view) as a program value, writing a value into a tensor's
// storage, host scalars as program inputs, and host transfers.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include "../engine/engine.h"
#include "../lowering/strided.h"

namespace torch_tpu::aten {

hlo::ElementType to_hlo(c10::ScalarType t);  // throws TypeError-like c10::Error
c10::ScalarType to_torch(hlo::ElementType t);

// The following need the engine lock and an open op (Engine::begin).
hlo::Value read(engine::Engine& e, const at::Tensor& t);
void write(engine::Engine& e, const at::Tensor& t, hlo::Value v);
// A 0-d program input for a host number, in `dtype`; its bits in `dtype`.
hlo::Value host_scalar(engine::Engine& e, const c10::Scalar& s, hlo::ElementType dtype);
engine::ScalarBits scalar_bits(const c10::Scalar& s, hlo::ElementType dtype);

// Deferred lowering (engine/deferred.h): a read captured when the op is
// recorded — the storage's value as a trace reference, the view — and
// lowered later exactly as read() would have; and a whole-storage write
// whose value is a placeholder until the op is lowered.
struct CapturedRead {
  engine::TraceRef ref;
  hlo::ElementType dtype = hlo::ElementType::kF32;
  bool whole = true;        // the view is the whole storage, row-major
  size_t nbytes = 0;
  int64_t offset = 0;       // unless whole
  c10::SmallVector<int64_t, 5> sizes, strides;  // strides unless whole
};
// False when this read must be lowered now (see capture_read in the .cc).
bool capture_read(engine::Engine& e, const at::Tensor& t, CapturedRead* r);
hlo::Value replay_read(engine::Engine& e, const CapturedRead& r);
struct CapturedWrite {
  uint32_t index = 0;       // the placeholder the storage now holds
  hlo::ElementType dtype = hlo::ElementType::kF32;
  int64_t numel = 0;        // of the storage
  bool row_major = true;
  lowering::Strided view;   // sizes and strides unless row_major
};
// Whether a write into `t` replaces its whole storage (any dense layout).
bool can_capture_write(const at::Tensor& t);
// Makes `t`'s storage hold a new placeholder.
CapturedWrite capture_write(engine::Engine& e, const at::Tensor& t);
void replay_write(engine::Engine& e, const CapturedWrite& w, hlo::Value v);
// The dtype a Python number enters a program in (f32/f64, i64, i1, c64).
hlo::ElementType scalar_dtype(const c10::Scalar& s, bool wide);

// A tensor (any view) as a flat row-major value of its elements: its
// storage's value when the storage is the tensor, else a new pending one.
// Takes the engine lock.
engine::ValuePtr flat_value(const at::Tensor& src);
// Writes a flat value of dst's elements and dtype into dst (any view;
// aliases see it): the storage takes `flat` when dst covers it densely.
void assign(const at::Tensor& dst, const engine::ValuePtr& flat);

// Host transfers (take the engine lock themselves).
// `op` names the host read in the error a step capture raises for it.
at::Tensor to_cpu(const at::Tensor& src, const char* op = "a copy to the host");  // dense copy
void copy_from_cpu(const at::Tensor& dst, const at::Tensor& src);  // any layout

// Resizes a tpu tensor (out= results): keeps contents that fit, zero-fills
// the rest, and updates the storage's device array.
void resize(const at::Tensor& t, c10::IntArrayRef sizes,
            std::optional<c10::IntArrayRef> strides = std::nullopt);
// Resizes a storage to `bytes` (untyped_storage().resize_): contents that
// fit are kept, growth reads as zeros, 0 frees the device array (FSDP2
// frees and regrows unsharded parameters this way).
void resize_storage(const c10::Storage& storage, size_t bytes);

}  // namespace torch_tpu::aten
