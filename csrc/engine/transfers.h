// Host transfers in flight: what Engine::upload and Engine::download issue
// and Engine::await waits for. Many arrays are issued before any is awaited,
// so their copies overlap (XLA:CPU runs large ones on its thread pool).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "../hlo/types.h"
#include "../pjrt/buffer.h"
#include "../pjrt/event.h"

namespace torch_tpu::engine {

// A dense row-major host array to upload to `device`.
struct HostArray {
  const void* data = nullptr;
  hlo::TensorType type;
  int device = 0;
};

// Where a download writes: `bytes` at `data`.
struct HostSpan {
  void* data = nullptr;
  size_t bytes = 0;
};

// Issued copies. The host memory of each stays in use (read by an upload,
// written by a download) until Engine::await returns; the caller keeps it
// alive until then. Awaiting twice is harmless.
struct Transfers {
  // A download the reading thread copies itself once `done` fires (the
  // target's host_memory_buffers): the buffer is kept until then.
  struct Direct {
    pjrt::BufferPtr src;
    HostSpan dst;
  };
  bool to_host = false;
  std::vector<std::shared_ptr<pjrt::Event>> done;  // null: done at issue
  std::vector<Direct> direct;  // per copy; src null: the plugin copies
  std::vector<int64_t> bytes;
  std::vector<int> devices;
  std::chrono::steady_clock::time_point start;
  int64_t traced_ns = 0;  // the issue time on the profiler's clock (0: off)
  std::vector<const void*> sources;  // traced downloads: the buffers read
  bool awaited = false;

  // Whether awaiting would not block (direct copies are made by the await).
  bool ready() const;
  // Waits for every copy, dropping errors (a batch abandoned after an error:
  // its host memory may be released once this returns).
  void drain() noexcept;
  static void copy_direct(const Direct& d);
};

}  // namespace torch_tpu::engine
