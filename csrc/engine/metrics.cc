#include "metrics.h"

#include <cstdio>

namespace torch_tpu::engine {

void Metrics::count(const std::string& name, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[name] += static_cast<double>(n);
}

void Metrics::time(const std::string& name, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[name + "_s"] += seconds;
}

std::map<std::string, double> Metrics::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return values_;
}

void Metrics::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  values_.clear();
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
