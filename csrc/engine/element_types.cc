#include "element_types.h"

#include <string>

#include "../pjrt/api.h"

namespace torch_tpu::engine {

size_t element_size(hlo::ElementType t) {
  return t == hlo::ElementType::kPred ? 1 : hlo::bit_width(t) / 8;
}

PJRT_Buffer_Type buffer_type(hlo::ElementType t) {
  using E = hlo::ElementType;
  switch (t) {
    case E::kPred: return PJRT_Buffer_Type_PRED;
    case E::kI8: return PJRT_Buffer_Type_S8;
    case E::kI16: return PJRT_Buffer_Type_S16;
    case E::kI32: return PJRT_Buffer_Type_S32;
    case E::kI64: return PJRT_Buffer_Type_S64;
    case E::kU8: return PJRT_Buffer_Type_U8;
    case E::kU16: return PJRT_Buffer_Type_U16;
    case E::kU32: return PJRT_Buffer_Type_U32;
    case E::kU64: return PJRT_Buffer_Type_U64;
    case E::kF16: return PJRT_Buffer_Type_F16;
    case E::kBF16: return PJRT_Buffer_Type_BF16;
    case E::kF32: return PJRT_Buffer_Type_F32;
    case E::kF64: return PJRT_Buffer_Type_F64;
    case E::kC64: return PJRT_Buffer_Type_C64;
    case E::kC128: return PJRT_Buffer_Type_C128;
  }
  return PJRT_Buffer_Type_INVALID;
}

hlo::ElementType element_type_of(PJRT_Buffer_Type t) {
  using E = hlo::ElementType;
  for (E e : {E::kPred, E::kI8, E::kI16, E::kI32, E::kI64, E::kU8, E::kU16, E::kU32, E::kU64,
              E::kF16, E::kBF16, E::kF32, E::kF64, E::kC64, E::kC128})
    if (buffer_type(e) == t) return e;
  throw pjrt::Error("unsupported PJRT buffer type " + std::to_string(static_cast<int>(t)));
}

hlo::TensorType storage_type(const pjrt::Buffer& buffer) {
  hlo::TensorType type{element_type_of(buffer.element_type()), buffer.dims()};
  if (type.rank() > 1) type.shape = {type.numel()};
  return type;
}

}  // namespace torch_tpu::engine
