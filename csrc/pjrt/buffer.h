// An owned PJRT_Buffer: one array on one device.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "api.h"
#include "event.h"

namespace torch_tpu::pjrt {

class Buffer {
 public:
  Buffer(const PJRT_Api* api, PJRT_Buffer* buffer) : api_(api), buffer_(buffer) {}
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  PJRT_Buffer* get() const { return buffer_; }
  PJRT_Buffer_Type element_type() const;
  std::vector<int64_t> dims() const;
  size_t on_device_size() const;
  // Whether the contents are gone (donated to a program, or deleted).
  bool is_deleted() const;

  // Waits until the buffer's contents are defined (its producer finished).
  void await_ready() const;
  // The event of that (null: defined already).
  std::shared_ptr<Event> ready_event() const;
  // The start of the buffer's device memory (a host address where the
  // plugin's device memory is host memory), or null where the plugin does not
  // tell.
  const void* device_memory() const;
  // Copies the whole buffer, dense row-major, into `dst` (`size` bytes).
  // Blocks until the copy is done.
  void to_host(void* dst, size_t size) const;
  // The same without waiting: the copy (after the buffer's producer) is
  // done when the returned event fires (null: done already); `dst` must stay
  // alive until then.
  std::shared_ptr<Event> to_host_async(void* dst, size_t size) const;

 private:
  const PJRT_Api* api_;  // the plugin's table, alive for the process
  PJRT_Buffer* buffer_;
};

using BufferPtr = std::shared_ptr<Buffer>;

// Bytes per element of a PJRT buffer type (0 for sub-byte or unknown types).
size_t element_size(PJRT_Buffer_Type type);

}  // namespace torch_tpu::pjrt
