// Which matmul precision an op records with: a torch.tpu.precision override
// if one is active, else torch.set_float32_matmul_precision once the user
// changed it, else DEFAULT (one bf16 pass, f32 accumulation, as on a TPU).
#pragma once

#include "../lowering/registry.h"

namespace torch_tpu::aten {

lowering::Precision current_precision();
// -1 clears the override.
void set_precision_override(int precision);
int precision_override();

}  // namespace torch_tpu::aten
