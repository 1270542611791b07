// The eager modes and what names an op in messages: shared by the engine's
// recorder, flush policy and launcher.
#pragma once

#include <string>
#include <vector>

namespace torch_tpu::engine {

enum class Mode {
  kDeferNever = 0,                 // Strict Eager: one async program per op
  kDeferNeverAndLaunchBlocking = 1,  // Debug Eager: wait for every op
  kDeferAndFuse = 2,               // Fused Eager: grow a program until a flush
  kDeferAll = 3,                   // tracing: flush only when asked
};

// An op of a recording and where it came from (null: unknown).
struct OpSite {
  const char* op;
  const std::string* site;
  std::string where() const { return site ? *site : std::string(); }
};

// "(in a deferred program of N ops ...)" with each op's site, for errors.
std::string describe_ops(const std::vector<OpSite>& ops, Mode mode);

}  // namespace torch_tpu::engine
