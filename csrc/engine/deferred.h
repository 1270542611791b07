// Deferred lowering for Fused Eager: an op whose lowering already succeeded
// for the same signature is recorded as a DeferredOp (its inputs as
// references, its results as placeholder values) instead of being lowered.
// At the flush, the trace — the ops' keys, how their inputs are bound, which
// results are alive, which inputs are donated — is looked up by a structural
// key; a hit launches the executable it compiled to before without building
// the program at all. A miss (or any use of the builder mid-recording)
// lowers the deferred ops in order into the builder: the same calls an eager
// recording makes, so the program, and its cache entry, are the same.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../hlo/builder.h"

namespace torch_tpu::engine {

class Engine;

// One op recorded without lowering. The aten layer implements it: it holds
// the converted arguments with their tensors as references into the trace.
class DeferredOp {
 public:
  virtual ~DeferredOp() = default;
  // Lowers the op into e.builder(): inputs through Engine::trace_input, each
  // result into its placeholder through Engine::set_trace_result.
  virtual void lower(Engine& e) = 0;
  // Called, under the engine lock, when the recording is done with the op;
  // an implementation may keep the object (and its buffers) for reuse.
  virtual void release() { delete this; }
};
struct ReleaseDeferred {
  void operator()(DeferredOp* op) const { op->release(); }
};
using DeferredPtr = std::unique_ptr<DeferredOp, ReleaseDeferred>;

// A reference to an input of a deferred op: an external buffer (a program
// parameter, numbered in order of first use) or a placeholder of the trace.
struct TraceRef {
  uint32_t index = 0;
  bool external = false;
  uint64_t key() const { return (static_cast<uint64_t>(index) << 1) | (external ? 1 : 0); }
};

// 64-bit mixing for trace keys (splitmix64 finalizer over a running value).
inline uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t z = h ^ (v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// What a trace compiled to: the program's fingerprint (looked up in the
// compile cache, so eviction and clear() apply) and, per parameter, the
// external input it binds.
// The run-time checks of a program (hlo::Builder::check): for each, the
// recorded op it belongs to (an index into the recording's ops) and what a
// violation means. The program returns one more result, an i32: the first
// violated check, or -1.
struct CheckList {
  std::vector<int64_t> ops;
  std::vector<std::string> messages;
  std::vector<bool> index_errors;
};
using CheckListPtr = std::shared_ptr<const CheckList>;

struct TraceEntry {
  hlo::Fingerprint program;
  std::vector<uint32_t> params;  // parameter i ← external params[i]
  size_t num_outputs = 0;
  CheckListPtr checks;  // null: none
};

}  // namespace torch_tpu::engine
