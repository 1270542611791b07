// The builder's element types as the device holds them: bytes per element
// and the PJRT buffer type, both ways.
#pragma once

#include <cstddef>

#include "../hlo/builder.h"
#include "../pjrt/api.h"
#include "../pjrt/buffer.h"

namespace torch_tpu::engine {

size_t element_size(hlo::ElementType t);
PJRT_Buffer_Type buffer_type(hlo::ElementType t);
hlo::ElementType element_type_of(PJRT_Buffer_Type t);
// The type of the device value that holds `buffer`: a storage's flat array
// (or a scalar), whatever dimensions the program that wrote it gave its
// result (hlo::Target::shaped_results).
hlo::TensorType storage_type(const pjrt::Buffer& buffer);

}  // namespace torch_tpu::engine
