// torch.profiler's view of the tpu: a Kineto activity profiler registered
// through PyTorch's PrivateUse1 profiler registry (see kineto_profiler.cc).
#pragma once

namespace torch_tpu::profiler {

// Whether this build has the adapter and it is registered with torch
// (false where the torch wheel was built without Kineto or lacks the
// PrivateUse1 profiler registry: torch.profiler then shows host ops only).
bool registered();

}  // namespace torch_tpu::profiler
