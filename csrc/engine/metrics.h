// Counters and timers of the engine, in the spirit of PyTorch/XLA's metrics
// report: compiles, executions, flushes by cause, transfers, fallbacks.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "flush_cause.h"

namespace torch_tpu::engine {

// Counters bumped once per op or per launch: lock-free, no name lookup.
enum class Hot { kOpsRecorded, kExecutions, kCacheHits, kOpsDeferred, kCount };

class Metrics {
 public:
  void count(const std::string& name, int64_t n = 1);
  void count(Hot which) { hot_[static_cast<size_t>(which)].fetch_add(1, std::memory_order_relaxed); }
  // A flush, by cause: reported as "flush_<name>".
  void count(FlushCause cause) {
    flushes_[static_cast<size_t>(cause)].fetch_add(1, std::memory_order_relaxed);
  }
  using FlushCounts = std::array<int64_t, kNumFlushCauses>;
  FlushCounts flushes() const;
  void time(const std::string& name, double seconds);  // adds to "<name>_s"
  void time_launch(double seconds) {
    launch_ns_.fetch_add(static_cast<int64_t>(seconds * 1e9), std::memory_order_relaxed);
  }
  // Host time inside torch_tpu's op kernel (checks, then recording in Fused
  // Eager or launching in Strict): "kernel_s" and "kernel_calls". Off unless
  // asked for, as it reads the clock twice per op.
  void set_kernel_timing(bool on) { kernel_timing_.store(on, std::memory_order_relaxed); }
  bool kernel_timing() const { return kernel_timing_.load(std::memory_order_relaxed); }
  void time_kernel(int64_t ns) {
    kernel_ns_.fetch_add(ns, std::memory_order_relaxed);
    kernel_calls_.fetch_add(1, std::memory_order_relaxed);
  }
  std::map<std::string, double> snapshot() const;
  void reset();
  std::string report() const;  // one "name: value" line each, sorted

 private:
  mutable std::mutex mu_;
  std::map<std::string, double> values_;
  std::array<std::atomic<int64_t>, static_cast<size_t>(Hot::kCount)> hot_{};
  std::array<std::atomic<int64_t>, kNumFlushCauses> flushes_{};
  std::atomic<int64_t> launch_ns_{0};  // "execute_launch_s"
  std::atomic<bool> kernel_timing_{false};
  std::atomic<int64_t> kernel_ns_{0}, kernel_calls_{0};
};

}  // namespace torch_tpu::engine
