#include "autograd_exit.h"

#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/autograd.h>

#include "device.h"

namespace torch_tpu::aten {

void drain_autograd_device_threads() {
  // The engine's device threads take tasks one at a time, and a thread lets
  // go of a finished task before it takes the next.
  for (int index = 0; index < device_count(); ++index) {
    auto options = at::TensorOptions().device(c10::DeviceType::PrivateUse1, index);
    at::Tensor x = at::empty({1}, options).requires_grad_();
    at::Tensor y = x.view_as(x);
    torch::autograd::grad({y}, {x}, {at::empty({1}, options)});
  }
}

}  // namespace torch_tpu::aten
