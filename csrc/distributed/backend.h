// `tpu_dist`: the c10d process-group backend for tpu tensors.
//
// Transports: device-native (native.h) when every rank is a thread of this
// process, else host-staged: each collective copies its tpu tensors to
// host memory, runs the same collective on a host backend (PyTorch's Gloo
// process group, created by the Python layer on the same store, rank and
// size), and copies the results back into the tpu tensors in place, so
// views and aliases see them as after any other in-place op.
//
// Collectives complete before they return (the device-to-host copy waits
// for the device anyway) and hand back a finished Work whose future holds
// the tpu tensors: `async_op=True`, `wait()`, `get_future()` and DDP's
// communication hooks behave as on other backends. Point-to-point receives
// complete on `wait()`, so posting receives before the matching sends (as
// `batch_isend_irecv` may) cannot deadlock.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "native.h"

namespace torch_tpu::distributed {

class Backend final : public c10d::Backend {
 public:
  // Makes the host process group (Gloo) of a new group: its store, this
  // rank's place in it, its size and timeout. Supplied by the Python layer,
  // which owns the Gloo binding; used by `split`.
  using HostFactory = std::function<c10::intrusive_ptr<c10d::Backend>(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      std::chrono::milliseconds timeout)>;

  // `host`: a process group over the same ranks that runs collectives on
  // CPU tensors (Gloo). Kept for the life of this backend. `make_host`
  // makes the host group of each group split from this one. With
  // `check_signatures`, every collective first exchanges what it is (see
  // Signature) so that ranks that disagree raise instead of reaching Gloo,
  // which aborts the process on a size mismatch.
  // `make_host` makes the host group of a split; `native`: the
  // device-native transport's group when all ranks are threads of this
  // process (native.h), else null (host-staged only).
  // `join_native`: instead of `native`, joins the native group at the
  // first call that needs it (a split group, made where ranks cannot wait).
  Backend(int rank, int size, c10::intrusive_ptr<c10d::Backend> host, HostFactory make_host,
          std::chrono::milliseconds timeout, bool check_signatures = true,
          std::shared_ptr<NativeGroup> native = nullptr, NativeGroup::Join join_native = {});

  const std::string getBackendName() const override { return "tpu_dist"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  void setTimeout(std::chrono::milliseconds timeout) override;

  // Groups split from this one (`split_group`, DeviceMesh sub-meshes and
  // `new_group` once `init_process_group(device_id=...)` bound a device):
  // `ranks` are ranks of this group; a rank outside them gets nullptr, as
  // c10d expects. The new group's host process group is made on `store`.
  bool supportsSplitting() const override { return true; }
  // c10d numbers a split group's collectives: every rank of a new group
  // starts at 0 and counts each collective (not sends and receives).
  void setSequenceNumberForGroup() override { seq_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return seq_; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  // What all ranks of one collective must agree on.
  struct Signature {
    int64_t op = 0;       // index into the collective names (backend.cc)
    int64_t dtype = -1;   // c10::ScalarType of the tensors
    int64_t reduce = -1;  // c10d::ReduceOp::RedOpType
    int64_t root = -1;
    int64_t tensors = 0;  // how many tensors (inputs and outputs)
    int64_t numel = 0;    // their elements; -1 when ranks may differ (splits)
  };
  // One small host all-gather of every rank's signature (and all-to-all
  // splits); raises a DistBackendError naming the collective and each rank's
  // view when they differ.
  void agree(const char* op, const std::vector<at::Tensor>& ts, int64_t reduce = -1,
             int64_t root = -1, const std::vector<int64_t>& in_splits = {},
             const std::vector<int64_t>& out_splits = {});

  // The path of every collective with inputs and separate outputs: check
  // the tensors, agree on `signature` (with `reduce`, `root`), copy the
  // inputs to the host, run `launch(host_inputs, host_outputs)` (a host
  // Work), wait, copy the outputs back. Defined in backend.cc.
  template <class In, class Out, class Launch>
  c10::intrusive_ptr<c10d::Work> staged(const char* op, In& inputs, Out& outputs,
                                        const std::vector<at::Tensor>& signature, int64_t reduce,
                                        int64_t root, Launch launch);

  // Runs the collective device-native when the group can (see native.h);
  // false: run it host-staged (every rank decides the same).
  bool native(const char* op, Collective kind, const std::vector<at::Tensor>& inputs,
              const std::vector<at::Tensor>& outputs, int64_t reduce = -1, int64_t root = -1,
              const char* host_reason = nullptr);
  // The native group, joined first if this group was split (null: host-staged).
  NativeGroup* native_group();

  c10::intrusive_ptr<c10d::Backend> host_;
  std::shared_ptr<NativeGroup> native_;
  NativeGroup::Join join_native_;
  std::once_flag joined_;  // join_native_ runs once, whichever thread calls first
  int device_ = -1;  // the device of this rank's last native collective (barrier's)
  HostFactory make_host_;
  std::chrono::milliseconds timeout_;
  bool check_signatures_;
  uint64_t seq_ = 0;
};

}  // namespace torch_tpu::distributed
