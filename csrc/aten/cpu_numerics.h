// The CPU-numerics source of the target profile (hlo/target.h): asks CPU
// PyTorch, once per process, which kernel it runs on this host.
#pragma once

#include "../hlo/types.h"

namespace torch_tpu::aten {

// Whether CPU PyTorch runs a 16-bit transposed convolution of type `t`
// through oneDNN (one rounding) rather than its slow col2im kernel.
bool cpu_onednn_half_conv(hlo::ElementType t);

}  // namespace torch_tpu::aten
