// The compilation cache: program → executable. In memory, keyed by the
// program's structural fingerprint (so a hit never prints the program); on
// disk when a directory is configured, keyed by the program text plus the
// plugin identity, as executables serialized by the plugin, written
// atomically and validated on read. A damaged entry is compiled again and
// replaced, and a path that is not a file (a directory) is removed first;
// each is warned about once, naming the file.
//
// The memory tier is bounded (least recently used first out): a loaded
// executable holds host resources for as long as it lives, and on XLA:CPU
// each one maps its JIT code as about three memory regions, counted against
// the process's vm.max_map_count (65530 by default). An unbounded tier let a
// long process (the OpInfo sweep: ~20000 programs) reach that limit, where
// LLVM fails to map code and the process dies of SIGSEGV. Executables differ
// in how many maps they take, so past half of that limit (looked at every 64
// executables added) the tier also halves itself. An evicted program
// is compiled again (or loaded from disk) when it comes back; an executable
// still running or held by a caller stays alive through its shared pointer.
//
// Processes that share the disk tier (the ranks of a job on one machine, one
// per device) compile each program once: a miss takes an exclusive flock on
// the program's lock file (its cache file's name plus ".lock") before it
// compiles and stores, so another miss of the same program meanwhile waits
// there, then loads the stored file ("compile_wait_s" in the metrics). The
// kernel releases a lock whose holder dies; where the lock file cannot be
// made, each process compiles for itself as before.
//
// Compile options (set_thread_overrides; the user layer's
// torch.tpu.compiler.custom_compiler_options): each thread compiles under
// its own overrides, and they are part of both tiers' keys, so one program
// compiled under two sets of options is two executables. No overrides (the
// default) leave every key as it was.
//
// Tiered compilation (set_tiering; on XLA:CPU kRecompiles by default:
// misses the caller calls reshaped recompilations, RecompileWatcher::reshaped,
// never a Strict program;
// kAll with TORCH_TPU_TIERED_COMPILE=1, kOff with =0): such a
// program missing from both tiers is compiled quickly, with the backend's
// optimizations off (pjrt::Client::compile's `quick`: about half the compile
// time, slower code), so a first step or a first generate() waits less;
// short programs (kTierMinBytes: one op's) compile optimized at once. Its
// kHotUses-th hit queues an optimizing compile on a background thread, whose
// executable replaces the quick one when it is ready; programs run once
// never pay for it. Both are stored on disk, the quick one under its own
// key, and a quick one loaded from disk is upgraded the same way. The two can
// differ in the last bit (see pjrt::Client::compile), so when the upgrade
// lands would decide a result's rounding: a caller that asks for
// deterministic results (set_quick_allowed's predicate says no; the aten
// layer wires torch.use_deterministic_algorithms) gets optimized compiles
// only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "../hlo/builder.h"
#include "../pjrt/client.h"
#include "background.h"
#include "metrics.h"

namespace torch_tpu::engine {

struct CacheStats {
  int64_t hits = 0, misses = 0, disk_hits = 0, entries = 0, evictions = 0;
  int64_t disk_bytes = 0;
  double compile_seconds = 0;
};

class Cache {
 public:
  // Executables kept in memory by default: far below what exhausts the
  // memory maps (see above), far above a training loop's working set.
  static constexpr size_t kDefaultCapacity = 4096;
  // Hits after which a quickly compiled program is compiled optimized.
  static constexpr int kHotUses = 2;
  // Programs shorter than this (text bytes) compile optimized at once: a
  // single op's program compiles in milliseconds either way, and Strict
  // Eager's thousands of them would only double the compile work.
  static constexpr size_t kTierMinBytes = 8192;

  // `directory` empty disables the disk cache.
  Cache(pjrt::Client& client, Metrics& metrics, std::string directory,
        size_t capacity = kDefaultCapacity);

  // The executable stored under `key`, or null (counted as a hit if found).
  pjrt::ExecutablePtr lookup(const hlo::Fingerprint& key);
  // The executable for `program` (whose fingerprint is `key`), compiling or
  // loading it from disk on a miss. `recompile`: the caller has compiled
  // this program's op sequence for the same code over other shapes before,
  // which Tiering::kRecompiles compiles quickly. `upgrade` false: a quick
  // executable stays (a program known to run once: an optimizer's first
  // step), its optimizing compile never queued.
  pjrt::ExecutablePtr get(const hlo::Fingerprint& key, const std::string& program,
                          bool recompile = false, bool upgrade = true);
  // The same, keyed by the text alone (for programs not built here).
  pjrt::ExecutablePtr get(const std::string& program);
  // From disk or compiled (then stored on disk), leaving the memory tier and
  // the statistics alone: for the engine's own warm-up program.
  pjrt::ExecutablePtr get_uncounted(const std::string& program);
  CacheStats stats() const;
  void clear(bool disk);
  // At most `capacity` (at least 1) executables in memory; evicts down now.
  void set_capacity(size_t capacity);
  size_t capacity() const;
  const std::string& directory() const { return directory_; }
  // Receives the disk tier's warnings (a damaged entry, a path repaired).
  // Those found on another thread (the warm-up's) wait for the next compile
  // on a caller's thread, or for this call.
  void set_warning_handler(std::function<void(const std::string&)> handler);

  static uint64_t hash(const std::string& text);  // FNV-1a 64

  // The compile options of the calling thread's compiles (null: none), and
  // those of every thread that set none (torch.tpu.allow_excess_precision).
  using OverridesPtr = std::shared_ptr<const pjrt::CompileOverrides>;
  static void set_thread_overrides(OverridesPtr overrides);
  static void set_default_overrides(OverridesPtr overrides);
  static OverridesPtr thread_overrides();

  // Tiered compilation (see above): which misses compile quickly. Off by
  // default (the engine sets it for its plugin).
  enum class Tiering { kOff, kRecompiles, kAll };
  void set_tiering(Tiering t) { tiering_ = t; }
  Tiering tiering() const { return tiering_; }
  // XLA:CPU: programs whose arrays are all small compile without loop
  // partitions (xla_cpu/partitions.h). Off by default (the engine sets it
  // from its target profile).
  void set_unpartitioned_small(bool on) { unpartitioned_small_ = on; }
  // Asked at each compile: whether a quick one may be made now.
  void set_quick_allowed(std::function<bool()> allowed) { quick_allowed_ = std::move(allowed); }
  // Waits for the optimizing compiles queued so far.
  void drain_background() { background_.drain(); }
  // Compiles `program` on the background worker, after the jobs queued
  // before it, under the calling thread's compile options, and keeps it in
  // both tiers like get(program); then calls `done` there with the
  // executable, or with null and the compiler's error. Dropped (never
  // called) when queued at exit.
  using CompileDone = std::function<void(pjrt::ExecutablePtr, const std::string&)>;
  void compile_in_background(std::string program, CompileDone done);
  // The same for a builder's program, kept under its fingerprint `key` (a
  // later lookup(key) finds it): Fused Eager's asynchronous compiles.
  void compile_in_background(const hlo::Fingerprint& key, std::string program, CompileDone done);
  // The executable for `program` if either tier holds it (a disk hit is
  // loaded into memory); never compiles.
  pjrt::ExecutablePtr find(const hlo::Fingerprint& key, const std::string& program);
  // Test hooks: keeps the worker waiting (Background::hold); the next
  // background compile gets text that is not StableHLO, so it fails.
  void hold_background(bool on) { background_.hold(on); }
  void break_next_background_compile() { break_next_ = true; }
  // Drops queued optimizing compiles and waits for the running one (exit).
  void stop_background() { background_.stop(); }

 private:
  // Every compile: the plugin's, with the workarounds of xla_cpu/ (checked
  // bf16 dots, unpartitioned small programs).
  pjrt::ExecutablePtr compile(const std::string& program, bool quick,
                              const OverridesPtr& overrides);
  // `key` with the calling thread's overrides mixed in.
  static hlo::Fingerprint with_overrides(const hlo::Fingerprint& key);
  // A text's key, apart from builder fingerprints (its lanes are text hashes).
  static hlo::Fingerprint text_key(const std::string& program);
  // Counts an executable loaded from disk since `start` (mu_ not held).
  void count_disk_hit(const hlo::Fingerprint& key, std::chrono::steady_clock::time_point start,
                      int64_t traced, size_t bytes);
  pjrt::ExecutablePtr lookup_exact(const hlo::Fingerprint& key);
  // What the disk tier keys `program` by under `overrides`.
  static std::string disk_program(const std::string& program, const OverridesPtr& overrides);
  std::string path_of(const std::string& program) const;  // empty: no disk tier
  // `caller`: on the thread of a counted get (warnings go out at once).
  pjrt::ExecutablePtr load(const std::string& path, const std::string& program, bool caller);
  // Removes what stands at `path` when it is not a regular file (true: a
  // file can be written there now).
  bool repair(const std::string& path, bool caller);
  // Once per path: counts `metric`, queues the warning, and delivers the
  // queue when `caller` and a handler is set.
  void warn(const std::string& path, const char* metric, const std::string& message,
            bool caller);
  void deliver_warnings();
  void store(const std::string& path, const std::string& program,
             const pjrt::Executable& exe, bool counted = true);
  // Both with mu_ held.
  void insert(const hlo::Fingerprint& key, pjrt::ExecutablePtr exe,
              std::shared_ptr<const std::string> quick_program = nullptr,
              OverridesPtr overrides = nullptr);
  void evict_to(size_t size);

  struct Entry {
    pjrt::ExecutablePtr exe;
    std::list<hlo::Fingerprint>::iterator recent;  // its place in recent_
    // A quick executable (tiered compilation): its program, kept until the
    // optimized one replaces it, and its hits so far.
    std::shared_ptr<const std::string> quick_program;
    OverridesPtr overrides;  // what the quick one was compiled under
    int hits = 0;
  };
  // With mu_ held: counts a hit of a quick entry; the kHotUses-th queues its
  // optimizing compile.
  void note_hit(const hlo::Fingerprint& key, Entry& entry);
  void upgrade(const hlo::Fingerprint& key, const std::shared_ptr<const std::string>& program,
               const OverridesPtr& overrides);
  // The disk path of a quick executable of `program`.
  std::string quick_path_of(const std::string& program) const;

  pjrt::Client& client_;  // owned by the Engine, which owns this cache
  Metrics& metrics_;      // likewise
  std::string directory_;
  std::string identity_;  // plugin path, platform and version: part of keys
  mutable std::mutex mu_;
  size_t capacity_;
  std::list<hlo::Fingerprint> recent_;  // keys, most recently used first
  std::unordered_map<hlo::Fingerprint, Entry, hlo::FingerprintHash> entries_;
  CacheStats stats_;
  std::function<void(const std::string&)> warn_;  // guarded by mu_, like the two below
  std::set<std::string> warned_;                  // paths warned about
  std::vector<std::string> pending_warnings_;
  Tiering tiering_ = Tiering::kOff;
  bool unpartitioned_small_ = false;
  std::function<bool()> quick_allowed_;
  std::atomic<bool> break_next_{false};  // break_next_background_compile
  Background background_;  // last: stopped before the members its jobs use go
};

}  // namespace torch_tpu::engine
