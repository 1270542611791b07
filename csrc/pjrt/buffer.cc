#include "buffer.h"

#include "event.h"

namespace torch_tpu::pjrt {

Buffer::~Buffer() {
  auto a = PJRT_ARGS(PJRT_Buffer_Destroy);
  a.buffer = buffer_;
  api_->PJRT_Buffer_Destroy(&a);
}

PJRT_Buffer_Type Buffer::element_type() const {
  auto a = PJRT_ARGS(PJRT_Buffer_ElementType);
  a.buffer = buffer_;
  PJRT_CALL(api_, PJRT_Buffer_ElementType, a);
  return a.type;
}

std::vector<int64_t> Buffer::dims() const {
  auto a = PJRT_ARGS(PJRT_Buffer_Dimensions);
  a.buffer = buffer_;
  PJRT_CALL(api_, PJRT_Buffer_Dimensions, a);
  return std::vector<int64_t>(a.dims, a.dims + a.num_dims);
}

bool Buffer::is_deleted() const {
  auto a = PJRT_ARGS(PJRT_Buffer_IsDeleted);
  a.buffer = buffer_;
  PJRT_CALL(api_, PJRT_Buffer_IsDeleted, a);
  return a.is_deleted;
}

size_t Buffer::on_device_size() const {
  auto a = PJRT_ARGS(PJRT_Buffer_OnDeviceSizeInBytes);
  a.buffer = buffer_;
  PJRT_CALL(api_, PJRT_Buffer_OnDeviceSizeInBytes, a);
  return a.on_device_size_in_bytes;
}

void Buffer::await_ready() const {
  auto a = PJRT_ARGS(PJRT_Buffer_ReadyEvent);
  a.buffer = buffer_;
  PJRT_CALL(api_, PJRT_Buffer_ReadyEvent, a);
  Event(api_, a.event).await();
}

std::shared_ptr<Event> Buffer::ready_event() const {
  auto a = PJRT_ARGS(PJRT_Buffer_ReadyEvent);
  a.buffer = buffer_;
  PJRT_CALL(api_, PJRT_Buffer_ReadyEvent, a);
  return a.event == nullptr ? nullptr : std::make_shared<Event>(api_, a.event);
}

const void* Buffer::device_memory() const {
  if (api_->PJRT_Buffer_OpaqueDeviceMemoryDataPointer == nullptr) return nullptr;
  auto a = PJRT_ARGS(PJRT_Buffer_OpaqueDeviceMemoryDataPointer);
  a.buffer = buffer_;
  PJRT_CALL(api_, PJRT_Buffer_OpaqueDeviceMemoryDataPointer, a);
  return a.device_memory_ptr;
}

void Buffer::to_host(void* dst, size_t size) const {
  if (auto done = to_host_async(dst, size)) done->await();
}

std::shared_ptr<Event> Buffer::to_host_async(void* dst, size_t size) const {
  auto a = PJRT_ARGS(PJRT_Buffer_ToHostBuffer);
  a.src = buffer_;
  a.dst = dst;
  a.dst_size = size;
  PJRT_CALL(api_, PJRT_Buffer_ToHostBuffer, a);
  if (a.event == nullptr) return nullptr;
  return std::make_shared<Event>(api_, a.event);
}

size_t element_size(PJRT_Buffer_Type type) {
  switch (type) {
    case PJRT_Buffer_Type_PRED:
    case PJRT_Buffer_Type_S8:
    case PJRT_Buffer_Type_U8:
    case PJRT_Buffer_Type_F8E5M2:
    case PJRT_Buffer_Type_F8E4M3FN:
      return 1;
    case PJRT_Buffer_Type_S16:
    case PJRT_Buffer_Type_U16:
    case PJRT_Buffer_Type_F16:
    case PJRT_Buffer_Type_BF16:
      return 2;
    case PJRT_Buffer_Type_S32:
    case PJRT_Buffer_Type_U32:
    case PJRT_Buffer_Type_F32:
      return 4;
    case PJRT_Buffer_Type_S64:
    case PJRT_Buffer_Type_U64:
    case PJRT_Buffer_Type_F64:
    case PJRT_Buffer_Type_C64:
      return 8;
    case PJRT_Buffer_Type_C128:
      return 16;
    default:
      return 0;
  }
}

}  // namespace torch_tpu::pjrt
