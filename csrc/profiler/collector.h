// The engine's trace sink while a profile records (engine/trace.h): keeps
// each event with the host thread it happened on and the torch profiler's
// correlation id current there (the op that launched it), and hands them
// over when the profile stops. Knows no Kineto type: kineto_profiler.cc
// turns what it kept into activities.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "../engine/trace.h"

namespace torch_tpu::profiler {

struct Recorded {
  engine::trace::Event event;
  int32_t thread = 0;        // the host thread (gettid)
  uint64_t correlation = 0;  // the profiled op running on it then (0: none)
};

class Collector final : public engine::trace::Sink {
 public:
  // Never destroyed: a completion may arrive on a plugin thread at any time
  // (trace.h's contract for sinks).
  static Collector& get();

  // Starts keeping events (dropping any kept before) and listens.
  void start();
  // Stops listening and returns what was kept. With `await_device`, first
  // waits a little for the completions of programs still running (a profile
  // of PrivateUse1 synchronized the device just before, but a completion
  // callback may not have run yet).
  std::vector<Recorded> stop(bool await_device);
  void record(engine::trace::Event event) override;

  // The correlation ids of the profiled ops running on this thread, innermost
  // last (Kineto pushes and pops them around each op).
  static void push_correlation(uint64_t id);
  static void pop_correlation();

 private:
  Collector() = default;
  std::mutex mu_;
  bool active_ = false;
  std::vector<Recorded> events_;
};

}  // namespace torch_tpu::profiler
