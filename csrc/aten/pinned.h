// "Pinned" host memory for tpu: ordinary CPU memory (PJRT copies from any
// host memory), remembered so that `is_pinned()` is true for it. PyTorch's
// own code asks for pinned staging tensors and asserts they are pinned
// (DDP's Reducer with find_unused_parameters; `pin_memory()` in DataLoader).
#pragma once

#include <c10/core/Allocator.h>

namespace torch_tpu::aten {

c10::Allocator* pinned_allocator();
// Whether `data` is the start of a live allocation of pinned_allocator().
bool is_pinned(const void* data);

}  // namespace torch_tpu::aten
