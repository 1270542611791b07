// Fused Eager's deferred lowering on the aten side (engine/deferred.h): a
// lowered op whose signature — the lowering's inputs: its arguments, their
// tensor types and views, the result types — lowered successfully before is
// recorded without lowering it.
#pragma once

#include <c10/util/ArrayRef.h>
#include <c10/util/SmallVector.h>

#include "../engine/engine.h"
#include "arguments.h"
#include "kernel.h"

namespace torch_tpu::aten {

// Records `args` as a deferred op when every input and output can be (the
// engine is deferring, reads are of written storages in their own dtype,
// writes replace whole storages) and the signature is known; then the fresh
// result tensors are appended to `results` and `mutated` hold placeholders.
// Otherwise returns false and sets `*signature` (0: not deferrable) for
// note_lowered once the op has been lowered.
bool try_defer(engine::Engine& e, const c10::FunctionSchema& schema, const Plan& plan,
               c10::ArrayRef<c10::IValue> args, CallState& state,
               const std::shared_ptr<const OpMeta>& meta, c10::ArrayRef<at::Tensor> mutated,
               c10::SmallVectorImpl<at::Tensor>& results, uint64_t* signature);
// A copy between two tensors of the current device (engine lock held, op
// begun): deferred when the source can be captured and the destination is
// a whole storage. Its lowering cannot fail, so no signature is needed.
bool try_defer_copy(engine::Engine& e, const at::Tensor& src, const at::Tensor& dst);
// `signature` lowered without error (callers hold the engine lock).
void note_lowered(uint64_t signature);
// Whether `signature` (non-zero) has lowered before (engine lock held).
bool was_lowered(uint64_t signature);

}  // namespace torch_tpu::aten
