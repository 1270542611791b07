#include "collector.h"

#include <sys/syscall.h>
#include <unistd.h>

namespace torch_tpu::profiler {

namespace {
thread_local std::vector<uint64_t> t_correlations;

int32_t thread_id() {
  thread_local int32_t id = static_cast<int32_t>(::syscall(SYS_gettid));
  return id;
}

// How long stop() waits for completions still to come: the profiler has
// synchronized the device, so they are at most a callback away.
constexpr int kCompletionWaitMs = 2000;
}  // namespace

Collector& Collector::get() {
  static Collector* collector = new Collector();  // never destroyed (see header)
  return *collector;
}

void Collector::start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.clear();
    active_ = true;
  }
  engine::trace::listen(this);
}

std::vector<Recorded> Collector::stop(bool await_device) {
  if (await_device) engine::trace::await_completions(kCompletionWaitMs);
  engine::trace::listen(nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  active_ = false;
  return std::move(events_);
}

void Collector::record(engine::trace::Event event) {
  Recorded r;
  // A device span arrives on the plugin's thread: its launch's thread and
  // correlation are found through the launch (kineto_profiler.cc).
  if (event.kind != engine::trace::Kind::kProgram) {
    r.thread = thread_id();
    if (!t_correlations.empty()) r.correlation = t_correlations.back();
  }
  r.event = std::move(event);
  std::lock_guard<std::mutex> lock(mu_);
  if (active_) events_.push_back(std::move(r));
}

void Collector::push_correlation(uint64_t id) { t_correlations.push_back(id); }

void Collector::pop_correlation() {
  if (!t_correlations.empty()) t_correlations.pop_back();
}

}  // namespace torch_tpu::profiler
