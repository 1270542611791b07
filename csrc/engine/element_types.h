// The builder's element types as the device holds them: bytes per element
// and the PJRT buffer type, both ways.
#pragma once

#include <cstddef>

#include "../hlo/builder.h"
#include "../pjrt/api.h"

namespace torch_tpu::engine {

size_t element_size(hlo::ElementType t);
PJRT_Buffer_Type buffer_type(hlo::ElementType t);
hlo::ElementType element_type_of(PJRT_Buffer_Type t);

}  // namespace torch_tpu::engine
