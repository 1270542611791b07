// Where the backward of tpu work runs (docs/design.md, "Autograd thread").
//
// PyTorch runs the backward of accelerator tensors on a worker thread per
// device; for tpu that hand-off only costs (two thread wake-ups per backward,
// 70-190 µs per small training step), so a thread that makes tpu tensors
// runs its backward itself, as for CPU tensors: PyTorch's own per-thread
// switch (torch.autograd.set_multithreading_enabled) is turned off for that
// thread when it allocates its first tpu storage. Importing torch_tpu changes
// nothing, and a thread that never touches tpu keeps the user's setting;
// TORCH_TPU_AUTOGRAD_THREAD=1 keeps PyTorch's device threads for tpu too, and
// a user may set the switch again after the thread's first tpu tensor.
#pragma once

namespace torch_tpu::aten {

void run_backward_on_calling_thread();

// Called for every tpu storage allocation: once per thread, the switch.
inline void note_tpu_work() {
  thread_local bool seen = false;
  if (seen) return;
  seen = true;
  run_backward_on_calling_thread();
}

}  // namespace torch_tpu::aten
