#include "background_programs.h"

#include <utility>

namespace torch_tpu::engine {

namespace {
// Programs seen once remembered; past this the set starts over.
constexpr size_t kMaxSeen = 4096;
}  // namespace

bool BackgroundPrograms::known(const hlo::Fingerprint& key) {
  std::lock_guard<std::mutex> guard(mu_);
  return pending_.count(key) || failed_.count(key) || seen_.count(key);
}

std::string BackgroundPrograms::queue(Cache& cache, const hlo::Fingerprint& key,
                                      std::string text, bool once) {
  {
    std::lock_guard<std::mutex> guard(mu_);
    if (auto failed = failed_.find(key); failed != failed_.end())
      return std::exchange(failed->second, std::string());
    if (pending_.count(key) || (once && seen_.insert(key).second)) return {};
    if (seen_.size() > kMaxSeen) seen_.clear();
    pending_.insert(key);
  }
  metrics_.count("async_fused_compiles");
  cache.compile_in_background(key, std::move(text),
                              [this, key](pjrt::ExecutablePtr exe, const std::string& error) {
    std::lock_guard<std::mutex> guard(mu_);
    pending_.erase(key);
    if (exe) return;
    metrics_.count("async_fused_compile_failures");
    failed_[key] = error.empty() ? std::string("(no message)") : error;
  });
  return {};
}

}  // namespace torch_tpu::engine
