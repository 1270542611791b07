#include "metrics.h"

#include <cstdio>
#include <iterator>

namespace torch_tpu::engine {

void Metrics::count(const std::string& name, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[name] += static_cast<double>(n);
}

void Metrics::time(const std::string& name, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[name + "_s"] += seconds;
}

namespace {
constexpr const char* kHotNames[] = {"ops_recorded", "executions", "cache_hits", "ops_deferred"};
static_assert(std::size(kHotNames) == static_cast<size_t>(Hot::kCount));
}  // namespace

std::map<std::string, double> Metrics::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, double> out = values_;
  for (size_t i = 0; i < hot_.size(); ++i)
    if (int64_t n = hot_[i].load(std::memory_order_relaxed)) out[kHotNames[i]] += static_cast<double>(n);
  for (size_t i = 0; i < flushes_.size(); ++i)
    if (int64_t n = flushes_[i].load(std::memory_order_relaxed))
      out[metric(static_cast<FlushCause>(i))] += static_cast<double>(n);
  if (int64_t ns = launch_ns_.load(std::memory_order_relaxed)) out["execute_launch_s"] += ns * 1e-9;
  if (int64_t n = kernel_calls_.load(std::memory_order_relaxed)) {
    out["kernel_calls"] += static_cast<double>(n);
    out["kernel_s"] += kernel_ns_.load(std::memory_order_relaxed) * 1e-9;
  }
  return out;
}

Metrics::FlushCounts Metrics::flushes() const {
  FlushCounts out;
  for (size_t i = 0; i < flushes_.size(); ++i) out[i] = flushes_[i].load(std::memory_order_relaxed);
  return out;
}

void Metrics::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  values_.clear();
  for (auto& h : hot_) h.store(0, std::memory_order_relaxed);
  for (auto& f : flushes_) f.store(0, std::memory_order_relaxed);
  launch_ns_.store(0, std::memory_order_relaxed);
  kernel_ns_.store(0, std::memory_order_relaxed);
  kernel_calls_.store(0, std::memory_order_relaxed);
}

std::string Metrics::report() const {
  std::string out;
  char line[256];
  for (const auto& [name, value] : snapshot()) {
    std::snprintf(line, sizeof(line), "%s: %.6g\n", name.c_str(), value);
    out += line;
  }
  return out;
}

}  // namespace torch_tpu::engine
