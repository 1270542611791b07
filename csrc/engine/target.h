// Builds the target profile (hlo/target.h) of a PJRT client: its platform
// name recognises the plugin, and the configuration's switches that change
// what the lowerings emit are read here, once, when the client is created.
#pragma once

#include "../hlo/target.h"
#include "../pjrt/client.h"

namespace torch_tpu::engine {

// `cpu_half_conv` answers the CPU-numerics question of the torch side
// (aten/cpu_numerics.cc), or is null. Reads TORCH_TPU_BF16_DOTS.
hlo::Target make_target(const pjrt::Client& client, hlo::HalfConvQuery cpu_half_conv);

}  // namespace torch_tpu::engine
