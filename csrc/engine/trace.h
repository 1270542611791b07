// What the engine does, as timed events, for a profiler that listens: each
// program launch (and, from its completion event, the span the device spent
// on it), each compile or disk load of a cache miss, each host<->device copy
// and each synchronize. The engine knows nothing of torch's profiler: the
// adapter (csrc/profiler) installs a Sink while a profile runs and turns the
// events into Kineto activities.
//
// Off (no sink), a hook costs one relaxed atomic load and allocates nothing:
// call sites read the clock only when on() said yes, e.g.
//   int64_t t0 = trace::on() ? trace::now_ns() : 0;
//   ... the work ...
//   if (t0) trace::transfer(trace::Kind::kToHost, device, bytes, t0);
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../pjrt/buffer.h"
#include "../pjrt/event.h"
#include "mode.h"

namespace torch_tpu::engine::trace {

enum class Kind : uint8_t {
  kLaunch,       // host: a program handed to the device (Engine::run)
  kProgram,      // device: that program, until its outputs were ready
  kCompile,      // host: a cache miss, compiled or loaded from the disk tier
  kToDevice,     // host: a host->device copy
  kToHost,       // host: a device->host copy (it waits for the producer)
  kSynchronize,  // host: waiting for every launched program
  kReady,        // host: a read saw launch `launch`'s outputs ready at end_ns
};

struct Event {
  Kind kind = Kind::kLaunch;
  int device = 0;
  // Nanoseconds of the system clock (CLOCK_REALTIME), the clock torch's
  // profiler puts its CPU events on.
  int64_t begin_ns = 0, end_ns = 0;
  int64_t bytes = 0;    // copies
  uint64_t launch = 0;  // pairs a kLaunch with its kProgram (1, 2, ... per process)
  std::string name;     // "tpu::launch", or the program's name for kProgram
  std::vector<std::pair<std::string, std::string>> args;  // shown in the trace
};

// Receives events while installed: on the thread that did the work (a
// kProgram on the plugin's thread that saw the program finish).
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void record(Event event) = 0;
};

namespace detail {
extern std::atomic<bool> g_on;
}
// Whether a sink listens: the one load a hook costs when nobody does.
inline bool on() { return detail::g_on.load(std::memory_order_relaxed); }
// Installs `sink` (null: none). A sink must outlive the process's last
// launch: a completion arriving after it was removed is dropped, not sent.
void listen(Sink* sink);
// Completions of programs launched while the current sink listened that
// have not arrived yet; waits up to `timeout_ms` for them (true: none left).
bool await_completions(int timeout_ms);
int64_t now_ns();
// Sends `event` to the sink, if one listens.
void emit(Event event);

// ---- hooks (call only when on() said yes, with the begin time it gave);
// none throws: a failure to record loses the event, never the work ----
// Engine::run launched a program made of `ops` (null: a graph compiled for
// torch.compile, identified by `exe`) in `mode` (engine::Mode as int); its
// completion `done` (null: unknown) sends the device span. A host read of
// one of its `outputs` later says when the host saw them ready (read_ready).
void launched(const std::vector<OpSite>* ops, int mode, const void* exe, int device,
              int64_t begin_ns, const std::shared_ptr<pjrt::Event>& done,
              const std::vector<pjrt::BufferPtr>& outputs) noexcept;
// A program run on several devices at once (csrc/distributed's native
// collectives), named "Collective <what>": a launch and a span per device.
void launched_replicated(const std::string& what, const std::vector<int>& devices,
                         int64_t begin_ns,
                         const std::vector<std::shared_ptr<pjrt::Event>>& done) noexcept;
// The cache could not find a program in memory: it was compiled (`tier`
// "compiled" or "compiled quick") or loaded ("disk") from `begin_ns` on. The
// next launch on this thread says so. `key` identifies the program (hex).
void compiled(uint64_t key, const char* tier, int64_t begin_ns, size_t text_bytes) noexcept;
void transfer(Kind kind, int device, int64_t bytes, int64_t begin_ns) noexcept;
void synchronized(int64_t begin_ns, size_t programs) noexcept;
// A host read found `buffer` ready (it waited for it): if a traced launch
// produced it, a kReady bounds that program's end. The completion callback
// that stamps a device span runs on a plugin thread, which a loaded machine
// can schedule after the reading thread has already copied the result.
void read_ready(const void* buffer) noexcept;

}  // namespace torch_tpu::engine::trace
