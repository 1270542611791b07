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
  bool to_host = false;
  std::vector<std::shared_ptr<pjrt::Event>> done;  // null: done at issue
  std::vector<int64_t> bytes;
  std::vector<int> devices;
  std::chrono::steady_clock::time_point start;
  int64_t traced_ns = 0;  // the issue time on the profiler's clock (0: off)
  bool awaited = false;

  // Whether every copy has finished (no waiting).
  bool ready() const;
  // Waits for every copy, dropping errors (a batch abandoned after an error:
  // its host memory may be released once this returns).
  void drain() noexcept;
};

}  // namespace torch_tpu::engine
