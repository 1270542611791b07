// Background warm-up of the XLA:CPU runtime when the client is created.
//
// XLA:CPU runs f32 matmuls through Eigen with oneDNN's sgemm inside, and
// oneDNN generates its gemm kernels (Xbyak JIT) on the first call in a
// process; the plugin also sets up its execution runtime on the first launch
// and its code loader on the first executable. Measured on the quickstart
// MLP: the first step's program, loaded from the disk cache, took ~40 ms
// more to run than the same program a step later. Every process that runs a
// matmul pays this once, so a thread started with the client runs one small
// matmul program (from the disk cache when there is one) while the caller
// goes on building its model; the first step then finds the kernels made.
#pragma once

#include <sys/types.h>

#include <thread>

#include "../hlo/target.h"
#include "../pjrt/client.h"
#include "cache.h"

namespace torch_tpu::engine {

class Warmup {
 public:
  // Starts the thread. `client` and `cache` outlive it (the engine owns all
  // three and joins it first).
  Warmup(pjrt::Client& client, Cache& cache);
  ~Warmup() {
    join();
    if (thread_.joinable()) thread_.detach();  // a forked child's copy
  }
  // Waits for the thread (at interpreter exit, before the plugin's statics
  // go away); a no-op when done, or in a forked child, which has no thread.
  void join();

  // Whether to warm up for `target`: XLA:CPU, unless TORCH_TPU_WARMUP=0.
  static bool wanted(const hlo::Target& target);

 private:
  std::thread thread_;
  pid_t owner_;  // the process that started the thread
};

}  // namespace torch_tpu::engine
