// Counters and timers of the engine, in the spirit of PyTorch/XLA's metrics
// report: compiles, executions, flushes by cause, transfers, fallbacks.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace torch_tpu::engine {

class Metrics {
 public:
  void count(const std::string& name, int64_t n = 1);
  void time(const std::string& name, double seconds);  // adds to "<name>_s"
  std::map<std::string, double> snapshot() const;
  void reset();
  std::string report() const;  // one "name: value" line each, sorted

 private:
  mutable std::mutex mu_;
  std::map<std::string, double> values_;
};

}  // namespace torch_tpu::engine
