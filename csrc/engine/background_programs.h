// The programs of Fused Eager recordings compiling on the cache's background
// worker (asynchronous compiles, async_eager.cc): which are queued, which
// failed (and whether that was warned about), and which may run once and
// were seen once (queued when they come again). Thread-safe: the worker's
// callback marks a compile done.
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "../hlo/builder.h"
#include "cache.h"
#include "metrics.h"

namespace torch_tpu::engine {

class BackgroundPrograms {
 public:
  explicit BackgroundPrograms(Metrics& metrics) : metrics_(metrics) {}
  // Whether `key` was missed before: compiling, failed, or seen once.
  bool known(const hlo::Fingerprint& key);
  // Queues `text`'s compile on `cache`'s worker, unless it is queued, failed
  // before, or may run once (`once`) and was not seen before. Returns the
  // compiler's error the first time a failed program comes again (to warn
  // about, once), else empty.
  std::string queue(Cache& cache, const hlo::Fingerprint& key, std::string text, bool once);

 private:
  Metrics& metrics_;
  std::mutex mu_;
  std::unordered_set<hlo::Fingerprint, hlo::FingerprintHash> pending_, seen_;
  std::unordered_map<hlo::Fingerprint, std::string, hlo::FingerprintHash> failed_;  // "": warned
};

}  // namespace torch_tpu::engine
