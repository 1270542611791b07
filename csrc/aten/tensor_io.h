// Between torch tensors and engine values: dtype mapping, reading a tpu
// tensor (any view) as a program value, writing a value into a tensor's
// storage, host scalars as program inputs, and host transfers.
#pragma once

#include <ATen/core/Tensor.h>

#include "../engine/engine.h"

namespace torch_tpu::aten {

hlo::ElementType to_hlo(c10::ScalarType t);  // throws TypeError-like c10::Error
c10::ScalarType to_torch(hlo::ElementType t);

// The following need the engine lock and an open op (Engine::begin).
hlo::Value read(engine::Engine& e, const at::Tensor& t);
void write(engine::Engine& e, const at::Tensor& t, hlo::Value v);
// A 0-d program input for a host number, in `dtype`.
hlo::Value host_scalar(engine::Engine& e, const c10::Scalar& s, hlo::ElementType dtype);
// The dtype a Python number enters a program in (f32/f64, i64, i1, c64).
hlo::ElementType scalar_dtype(const c10::Scalar& s, bool wide);

// Host transfers (take the engine lock themselves).
at::Tensor to_cpu(const at::Tensor& src);                // dense copy
void copy_from_cpu(const at::Tensor& dst, const at::Tensor& src);  // any layout

// Resizes a tpu tensor (out= results): keeps contents that fit, zero-fills
// the rest, and updates the storage's device array.
void resize(const at::Tensor& t, c10::IntArrayRef sizes,
            std::optional<c10::IntArrayRef> strides = std::nullopt);

}  // namespace torch_tpu::aten
