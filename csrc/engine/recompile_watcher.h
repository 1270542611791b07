// The recompilation watcher: which programs each call site compiles, over
// which runs of its code. It tells the engine two things about a new
// program: whether it is a *reshaped recompilation* (the site compiled the
// same op sequence over other types on an earlier run: cache.h's
// Tiering::kRecompiles compiles it quickly), and whether the site keeps
// compiling (one warning, at the 4th run that compiled, naming the types
// that changed and, when one size varies, its dimension, and suggesting
// torch.tpu.mark_dynamic).
//
// A run of code starts when an op comes from another site than the op
// before it, at a host read or synchronize, and at each program flushed for
// another reason than its op (Fused Eager). The programs one run of a line
// compiles (a backward() compiling each of its matmul shapes once) are that
// line's programs, not recompilations. Sites are counted with the first op
// of their programs: one line's backward runs dozens of different ops.
//
// Not thread-safe: the engine calls it under its lock; new_run() is atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../hlo/builder.h"
#include "recorder.h"

namespace torch_tpu::engine {

class RecompileWatcher {
 public:
  // "input types -> result types | op names" of a recorded program.
  static std::string signature(const hlo::Builder& b, const std::vector<OpSite>& ops);
  // Why `signature` differs from `previous`: the first few types that
  // changed and, when the first of them differs in one dimension only,
  // which (a varying length), else that the op sequence changed.
  static std::string describe_change(const std::string& previous, const std::string& signature);

  void new_run() { ++run_; }
  // Whether a program with `signature` at `site`, starting with `first_op`,
  // is a reshaped recompilation.
  bool reshaped(const std::string& site, const char* first_op, const std::string& signature) const;
  // Notes that such a program compiled; returns the warning to give (empty:
  // none).
  std::string note(const std::string& site, const char* first_op, const std::string& signature);
  void clear() { sites_.clear(); }

 private:
  struct Site {
    int programs = 0, runs = 0;
    uint64_t last_run = 0;
    std::string signature;  // of the last program compiled there
  };
  static constexpr int kWarnAtRun = 4;
  static std::string key(const std::string& site, const char* first_op) {
    return site + " " + first_op;
  }

  std::map<std::string, Site> sites_;
  std::atomic<uint64_t> run_{1};
};

}  // namespace torch_tpu::engine
