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
//
// Sends and receives meet in the group's mailbox instead (native_p2p.cc):
// a send waits there for the receive that names its rank and tag (or any
// source), in the order they were posted; whichever comes second launches
// one `collective_permute` over the pair's two devices.
#pragma once

#include <deque>
#include <functional>

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
#include "../pjrt/executable.h"
#include "programs.h"

namespace torch_tpu::distributed {

// The compiled program of `spec` for replica i on device devices[i]
// (compiled once per process; metric `collective_programs_compiled`).
pjrt::ExecutablePtr native_program(const CollectiveSpec& spec, const std::vector<int>& devices);

class NativeGroup : public std::enable_shared_from_this<NativeGroup> {
 public:
  // Meets the other ranks on `store`: the group when all `size` ranks are
  // in this process, else null (the backend stays host-staged).
  static std::shared_ptr<NativeGroup> connect(const c10::intrusive_ptr<c10d::Store>& store,
                                              int rank, int size);
  // connect() in two halves, for groups made where a rank cannot wait for
  // the others (a split, called under the GIL): `offer` only writes to the
  // store (rank 0 also makes and publishes the group); the function it
  // returns reads the others' offers (blocking) and gives what connect()
  // would. Call it where the ranks may wait (their first collective).
  using Join = std::function<std::shared_ptr<NativeGroup>()>;
  static Join offer(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size);
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

  // Point-to-point (native_p2p.cc): posts this rank's send to `dst` or
  // receive from `src` (-1: any source) and returns its Work, which
  // completes once the matching call has been posted and the pair's program
  // ran. A receive writes its tensors (in place, any view) on wait().
  // Errors (sizes or dtypes that differ from the peer's, no peer within
  // `timeout`) raise DistBackendError from wait() naming both ends.
  c10::intrusive_ptr<c10d::Work> send(int rank, int dst, int tag,
                                      const std::vector<at::Tensor>& tensors,
                                      std::chrono::milliseconds timeout);
  c10::intrusive_ptr<c10d::Work> recv(int rank, int src, int tag,
                                      const std::vector<at::Tensor>& tensors,
                                      std::chrono::milliseconds timeout);

  // One posted send or receive (native_p2p.cc); shared with its Work.
  struct Transfer;
  // Waits until `t` ran (or failed, or `timeout` passed with no match).
  void await(Transfer& t, std::chrono::milliseconds timeout);
  bool finished(const Transfer& t);

 private:
  c10::intrusive_ptr<c10d::Work> post(std::shared_ptr<Transfer> t,
                                      std::vector<at::Tensor> tensors,
                                      std::chrono::milliseconds timeout);
  // Runs the matched pair's program; sets their outcome (under mu_).
  void transfer(Transfer& send, Transfer& recv);

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
  std::deque<std::shared_ptr<Transfer>> sends_, recvs_;  // posted, not yet matched
};

}  // namespace torch_tpu::distributed
