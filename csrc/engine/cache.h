// The compilation cache: program → executable. In memory, keyed by the
// program's structural fingerprint (so a hit never prints the program); on
// disk when a directory is configured, keyed by the program text plus the
// plugin identity, as executables serialized by the plugin, written
// atomically and validated on read.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "../hlo/builder.h"
#include "../pjrt/client.h"
#include "metrics.h"

namespace torch_tpu::engine {

struct CacheStats {
  int64_t hits = 0, misses = 0, disk_hits = 0, entries = 0;
  int64_t disk_bytes = 0;
  double compile_seconds = 0;
};

class Cache {
 public:
  // `directory` empty disables the disk cache.
  Cache(pjrt::Client& client, Metrics& metrics, std::string directory);

  // The executable stored under `key`, or null (counted as a hit if found).
  pjrt::ExecutablePtr lookup(const hlo::Fingerprint& key);
  // The executable for `program` (whose fingerprint is `key`), compiling or
  // loading it from disk on a miss.
  pjrt::ExecutablePtr get(const hlo::Fingerprint& key, const std::string& program);
  // The same, keyed by the text alone (for programs not built here).
  pjrt::ExecutablePtr get(const std::string& program);
  CacheStats stats() const;
  void clear(bool disk);
  const std::string& directory() const { return directory_; }

  static uint64_t hash(const std::string& text);  // FNV-1a 64

 private:
  pjrt::ExecutablePtr load(const std::string& path, const std::string& program);
  void store(const std::string& path, const std::string& program,
             const pjrt::Executable& exe);

  pjrt::Client& client_;  // owned by the Engine, which owns this cache
  Metrics& metrics_;      // likewise
  std::string directory_;
  std::string identity_;  // plugin path, platform and version: part of keys
  mutable std::mutex mu_;
  std::unordered_map<hlo::Fingerprint, pjrt::ExecutablePtr, hlo::FingerprintHash> entries_;
  CacheStats stats_;
};

}  // namespace torch_tpu::engine
