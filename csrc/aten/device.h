// The tpu device: current-device state, device count, the guard.
#pragma once

namespace torch_tpu::aten {

// Index of the thread's current tpu device (0 by default).
int current_device();
void set_current_device(int index);
// Devices the PJRT client exposes; 0 when no plugin can be loaded.
int device_count() noexcept;
// Throws a c10::Error (IndexError-like) naming the valid range.
void check_device(int index);

}  // namespace torch_tpu::aten
