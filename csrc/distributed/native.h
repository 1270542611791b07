// The device-native transport of `tpu_dist`: a collective is one StableHLO
// collective op (programs.h) in a PJRT program compiled for one replica per
// participating device and launched on all of them at once.
//
// Used when every rank of the group is a thread of this process (ranks as
// threads, each on its own device of the one PJRT client: XLA:CPU's
// in-process collectives across `TORCH_TPU_NUM_DEVICES` devices). The ranks
// meet in a NativeGroup: each brings its call (what collective, dtype,
// sizes, device) and its input buffers; the last to arrive checks that the
// calls agree, compiles (once per spec and device set) and launches the
// program for everyone, waits for it, and hands each rank its outputs. A
// mismatch raises on every rank naming each rank's call; a rank that never
// comes makes the others raise after the group's timeout. When any rank
// cannot run its call natively (an unsupported dtype or reduce op, ranks on
// one device, uneven splits) every rank runs it host-staged instead.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "../pjrt/buffer.h"
#include "programs.h"

namespace torch_tpu::distributed {

class NativeGroup {
 public:
  // Meets the other ranks on `store`: the group when all `size` ranks are
  // in this process, else null (the backend stays host-staged).
  static std::shared_ptr<NativeGroup> connect(const c10::intrusive_ptr<c10d::Store>& store,
                                              int rank, int size);
  explicit NativeGroup(int size);

  // Runs `kind` on this rank's tensors with the other ranks: inputs are
  // read, outputs written in place (any view). False when the ranks agreed
  // to run this call host-staged (nothing was written). Throws
  // DistBackendError naming `op` on a mismatch, a failure or a timeout.
  // `host_reason`: why this rank's call cannot run natively (all-to-all
  // with uneven splits), which makes every rank run it host-staged.
  bool run(const char* op, int rank, std::chrono::milliseconds timeout, Collective kind,
           const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
           int64_t reduce = -1, int64_t root = -1, const char* host_reason = nullptr);

 private:
  struct Call {
    CollectiveSpec spec;
    int device = -1;
    std::string host_reason;  // non-empty: this rank asks for host-staged
    std::string invalid;      // non-empty: this rank's call is wrong (raised everywhere)
    std::vector<pjrt::BufferPtr> inputs;
  };
  struct Outcome {
    std::vector<std::vector<pjrt::BufferPtr>> outputs;  // per rank
    std::string error;
    bool host = false;
  };
  // Deposits `call`, waits for (or is) the launch; this rank's outputs, or
  // nullopt when the ranks run it host-staged.
  std::optional<std::vector<pjrt::BufferPtr>> meet(const char* op, int rank, Call call,
                                                   std::chrono::milliseconds timeout);
  Outcome launch(const char* op, std::vector<Call>& calls);

  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;  // completed collectives
  int arrived_ = 0;
  bool launching_ = false;
  std::vector<Call> calls_;
  Outcome outcome_;          // of the last completed collective
  std::string broken_;       // set after a timeout: the group is unusable
};

}  // namespace torch_tpu::distributed
