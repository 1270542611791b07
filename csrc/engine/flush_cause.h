// Why a recording is flushed into a program: the argument of Engine::flush,
// counted in the metrics as flush_<name>, and read by the flush policy (the
// loop detector learns a step's end from the flushes the user asked for).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace torch_tpu::engine {

enum class FlushCause : uint8_t {
  kOp,             // Strict and Debug Eager: each op is a program
  kLoopBoundary,   // Fused Eager: the detected loop body starts again
  kSizeCap,        // Fused Eager: the recording outgrew its cap (warned)
  kDeviceChange,   // an op on another device than the recording's
  kModeChange,     // the eager mode changed
  kOtherThread,    // another thread needs a value pending here
  kThreadExit,     // the recording thread ended
  kHostRead,       // a value is copied to the host
  kSynchronize,    // torch.tpu.synchronize()
  kStreamEvent,    // an event recorded on a stream
  kOptimizerStepBegin,  // optimizer.step() begins: the gradients are done
  kOptimizerStep,  // the end of optimizer.step() (a training step's end)
  kExplicit,       // torch_tpu.sync() and friends
  kCaptureBegin,   // graph capture starts from an empty recording
  kCaptureEnd,     // the captured program is handed out
  kGraphInput,     // a captured graph's input pending in a recording
  kCollective,     // a collective's operand (tpu_dist)
  kSend,           // a point-to-point operand (tpu_dist)
  kRecv,
  kAsyncEager,     // one op of a Fused Eager recording whose program compiles
                   // in the background (engine/async_eager.cc)
  kNewOp,          // Fused Eager with asynchronous compiles: an op never
                   // lowered before runs alone (before and after it)
};
inline constexpr size_t kNumFlushCauses = static_cast<size_t>(FlushCause::kNewOp) + 1;

// The cause's name ("host_read") and metric ("flush_host_read").
const char* name(FlushCause c);
const char* metric(FlushCause c);
// The cause called `name`, or none.
std::optional<FlushCause> flush_cause_named(std::string_view name);
// Whether the user's code asked for the values: where a step ends.
bool requested(FlushCause c);

}  // namespace torch_tpu::engine
