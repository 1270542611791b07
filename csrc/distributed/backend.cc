#include "backend.h"

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "staging.h"

namespace torch_tpu::distributed {

namespace {

// Gloo has no PREMUL_SUM: scale the host copies, then SUM.
c10d::ReduceOp host_op(const c10d::ReduceOp& op, std::vector<at::Tensor>& host) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return op;
  auto* factor = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK_VALUE(factor, "tpu_dist: PREMUL_SUM needs a factor (make it with "
                            "torch.distributed._make_nccl_premul_sum)");
  for (auto& t : host) {
    if (!factor->tensor_factor.defined()) {
      t.mul_(factor->double_factor);
    } else {
      const at::Tensor& f = factor->tensor_factor;
      t.mul_(f.device().type() == c10::DeviceType::PrivateUse1 ? to_host(f) : f);
    }
  }
  return c10d::ReduceOp(c10d::ReduceOp::SUM);
}

// The collectives, by name, as signatures carry them.
constexpr const char* kOps[] = {
    "broadcast", "allreduce", "allreduce_coalesced", "reduce", "allgather",
    "all_gather_into_tensor", "gather", "scatter", "reduce_scatter", "reduce_scatter_tensor",
    "all_to_all_single", "all_to_all", "barrier"};
constexpr int64_t kNumOps = sizeof(kOps) / sizeof(kOps[0]);
constexpr int64_t kFields = 6;  // Backend::Signature

int64_t op_index(const char* op) {
  for (int64_t i = 0; i < kNumOps; ++i)
    if (std::strcmp(kOps[i], op) == 0) return i;
  return -1;
}

// One rank's signature row, as the error message shows it.
std::string describe(const int64_t* row, int64_t size) {
  std::ostringstream s;
  s << (row[0] >= 0 && row[0] < kNumOps ? kOps[row[0]] : "?") << " with " << row[4]
    << " tensor(s)";
  if (row[1] >= 0) s << " of " << c10::toString(static_cast<c10::ScalarType>(row[1]));
  if (row[5] >= 0) s << ", " << row[5] << " elements";
  if (row[2] >= 0) s << ", reduce op " << row[2];
  if (row[3] >= 0) s << ", root " << row[3];
  if (row[kFields] >= 0 || row[kFields + size] >= 0) {
    s << ", splits in [";
    for (int64_t i = 0; i < size; ++i) s << (i ? ", " : "") << row[kFields + i];
    s << "] out [";
    for (int64_t i = 0; i < size; ++i) s << (i ? ", " : "") << row[kFields + size + i];
    s << "]";
  }
  return s.str();
}

// Whether all-to-all splits are equal (none given: equal).
bool even(const std::vector<int64_t>& splits) {
  for (int64_t s : splits)
    if (s != splits[0]) return false;
  return true;
}

std::vector<at::Tensor> joined(std::vector<at::Tensor> a, const std::vector<at::Tensor>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

Backend::Backend(int rank, int size, c10::intrusive_ptr<c10d::Backend> host,
                 HostFactory make_host, std::chrono::milliseconds timeout,
                 bool check_signatures, std::shared_ptr<NativeGroup> native,
                 NativeGroup::Join join_native)
    : c10d::Backend(rank, size),
      host_(std::move(host)),
      native_(std::move(native)),
      join_native_(std::move(join_native)),
      make_host_(std::move(make_host)),
      timeout_(timeout),
      check_signatures_(check_signatures) {
  TORCH_CHECK_VALUE(host_, "tpu_dist: a host process group is required");
  TORCH_CHECK_VALUE(host_->getRank() == rank && host_->getSize() == size,
                    "tpu_dist: the host process group is rank ", host_->getRank(), " of ",
                    host_->getSize(), ", expected rank ", rank, " of ", size);
}

c10::intrusive_ptr<c10d::Backend> Backend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                 const std::vector<int>& ranks,
                                                 const c10::intrusive_ptr<Options>& opts) {
  TORCH_CHECK_VALUE(!ranks.empty(), "tpu_dist: split needs at least one rank");
  std::vector<int> seen;
  for (int r : ranks) {
    TORCH_CHECK_VALUE(r >= 0 && r < size_, "tpu_dist: split: rank ", r,
                      " is not a rank of the parent group (its ranks are 0..", size_ - 1, ")");
    TORCH_CHECK_VALUE(std::find(seen.begin(), seen.end(), r) == seen.end(),
                      "tpu_dist: split: rank ", r, " is listed twice");
    seen.push_back(r);
  }
  auto mine = std::find(ranks.begin(), ranks.end(), rank_);
  if (mine == ranks.end()) return nullptr;
  TORCH_CHECK_VALUE(make_host_, "tpu_dist: this group was made without a host factory and "
                                "cannot be split; make groups with torch.distributed");
  int rank = static_cast<int>(mine - ranks.begin());
  int size = static_cast<int>(ranks.size());
  auto timeout = opts ? opts->timeout : timeout_;
  auto host = make_host_(store, rank, size, timeout);
  // A split of a native group is native when its ranks are all in this
  // process. Joining waits for the other ranks' threads, which this call
  // (under the GIL) cannot: it offers here and joins at the first call.
  NativeGroup::Join join;
  if (native_ || join_native_) join = NativeGroup::offer(store, rank, size);
  return c10::make_intrusive<Backend>(rank, size, std::move(host), make_host_, timeout,
                                      check_signatures_, nullptr, std::move(join));
}

NativeGroup* Backend::native_group() {
  if (join_native_) std::call_once(joined_, [this] { native_ = join_native_(); });
  return native_.get();
}

bool Backend::native(const char* op, Collective kind, const std::vector<at::Tensor>& inputs,
                     const std::vector<at::Tensor>& outputs, int64_t reduce, int64_t root,
                     const char* host_reason) {
  NativeGroup* group = native_group();
  if (!group) return false;
  const at::Tensor* first = !inputs.empty() ? &inputs[0] : !outputs.empty() ? &outputs[0] : nullptr;
  if (first) device_ = first->device().index();
  if (!group->run(op, rank_, timeout_, kind, inputs, outputs, reduce, root, host_reason))
    return false;
  ++seq_;
  return true;
}

void Backend::agree(const char* op, const std::vector<at::Tensor>& ts, int64_t reduce,
                    int64_t root, const std::vector<int64_t>& in_splits,
                    const std::vector<int64_t>& out_splits) {
  ++seq_;
  if (!check_signatures_ || size_ == 1) return;
  const int64_t row = kFields + 2 * size_;
  bool splits = !in_splits.empty() || !out_splits.empty();
  at::Tensor mine = at::full({row}, -1, at::kLong);
  int64_t* m = mine.data_ptr<int64_t>();
  m[0] = op_index(op);
  m[1] = ts.empty() ? -1 : static_cast<int64_t>(ts[0].scalar_type());
  m[2] = reduce;
  m[3] = root;
  m[4] = static_cast<int64_t>(ts.size());
  m[5] = 0;
  for (const auto& t : ts) m[5] += t.numel();
  if (splits) m[5] = -1;
  for (size_t i = 0; i < in_splits.size() && i < static_cast<size_t>(size_); ++i)
    m[kFields + i] = in_splits[i];
  for (size_t i = 0; i < out_splits.size() && i < static_cast<size_t>(size_); ++i)
    m[kFields + size_ + i] = out_splits[i];
  at::Tensor all = at::empty({size_ * row}, at::kLong);
  wait_for(op, host_->_allgather_base(all, mine, c10d::AllgatherOptions()), rank_, size_);
  const int64_t* a = all.data_ptr<int64_t>();
  bool same = true;
  for (int64_t r = 1; r < size_; ++r)
    same = same && std::equal(a, a + kFields, a + r * row);
  // What rank j receives from rank i is what rank i sends to rank j.
  for (int64_t i = 0; same && i < size_; ++i) {
    for (int64_t j = 0; j < size_; ++j) {
      int64_t sent = a[i * row + kFields + j], received = a[j * row + kFields + size_ + i];
      if (sent >= 0 && received >= 0 && sent != received) same = false;
    }
  }
  if (same) return;
  std::ostringstream msg;
  msg << "tpu_dist: " << op << ": the ranks called different collectives or shapes; every rank "
      << "must make the same call (same collective, dtype and sizes). ";
  for (int64_t r = 0; r < size_; ++r)
    msg << (r ? "; " : "") << "rank " << r << ": " << describe(a + r * row, size_);
  C10_THROW_ERROR(DistBackendError, msg.str());
}

c10::intrusive_ptr<c10d::Backend::Options> Backend::getBackendOptions() {
  return c10::make_intrusive<Options>(getBackendName(), timeout_);
}

void Backend::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  host_->setTimeout(timeout);
}

c10::intrusive_ptr<c10d::Work> Backend::broadcast(std::vector<at::Tensor>& tensors,
                                                  const c10d::BroadcastOptions& opts) {
  check_tpu("broadcast", tensors, "tensor");
  if (native("broadcast", Collective::kBroadcast, tensors, tensors, -1, opts.rootRank))
    return finished(tensors);
  agree("broadcast", tensors, -1, opts.rootRank);
  auto host = to_host(tensors);
  wait_host("broadcast", host_->broadcast(host, opts), rank_, size_, nbytes(host));
  if (rank_ != opts.rootRank) copy_back(tensors, host);
  return finished(tensors);
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  check_tpu("allreduce", tensors, "tensor");
  if (native("allreduce", Collective::kAllReduce, tensors, tensors, opts.reduceOp.op_))
    return finished(tensors);
  agree("allreduce", tensors, opts.reduceOp.op_);
  auto host = to_host(tensors);
  c10d::AllreduceOptions o = opts;
  o.reduceOp = host_op(opts.reduceOp, host);
  wait_host("allreduce", host_->allreduce(host, o), rank_, size_, nbytes(host));
  copy_back(tensors, host);
  return finished(tensors);
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  check_tpu("allreduce_coalesced", tensors, "tensor");
  if (native("allreduce_coalesced", Collective::kAllReduce, tensors, tensors,
             opts.reduceOp.op_))
    return finished(tensors);
  agree("allreduce_coalesced", tensors, opts.reduceOp.op_);
  auto host = to_host(tensors);
  c10d::AllreduceCoalescedOptions o = opts;
  o.reduceOp = host_op(opts.reduceOp, host);
  wait_host("allreduce_coalesced", host_->allreduce_coalesced(host, o), rank_, size_,
            nbytes(host));
  copy_back(tensors, host);
  return finished(tensors);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce(std::vector<at::Tensor>& tensors,
                                               const c10d::ReduceOptions& opts) {
  check_tpu("reduce", tensors, "tensor");
  if (native("reduce", Collective::kReduce, tensors, tensors, opts.reduceOp.op_, opts.rootRank))
    return finished(tensors);
  agree("reduce", tensors, opts.reduceOp.op_, opts.rootRank);
  auto host = to_host(tensors);
  c10d::ReduceOptions o = opts;
  o.reduceOp = host_op(opts.reduceOp, host);
  wait_host("reduce", host_->reduce(host, o), rank_, size_, nbytes(host));
  if (rank_ == opts.rootRank) copy_back(tensors, host);
  return finished(tensors);
}

template <class In, class Out, class Launch>
c10::intrusive_ptr<c10d::Work> Backend::staged(const char* op, In& inputs, Out& outputs,
                                               const std::vector<at::Tensor>& signature,
                                               int64_t reduce, int64_t root, Launch launch) {
  check_tpu(op, inputs, "input");
  check_tpu(op, outputs, "output");
  agree(op, signature, reduce, root);
  auto host_in = to_host(inputs);
  auto host_out = host_like(outputs);
  int64_t bytes = nbytes(flat(host_in));
  wait_host(op, launch(host_in, host_out), rank_, size_, bytes);
  copy_back(outputs, host_out);
  return finished(flat(outputs));
}

c10::intrusive_ptr<c10d::Work> Backend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  check_tpu("allgather", inputs, "input");
  check_tpu("allgather", outputs, "output");
  if (native("allgather", Collective::kAllGather, inputs, outputs.empty() ? inputs : outputs[0],
             -1, -1, inputs.size() == 1 && outputs.size() == 1 ? nullptr : "several inputs"))
    return finished(flat(outputs));
  return staged("allgather", inputs, outputs, inputs, -1, -1, [&](auto& in, auto& out) {
    return host_->allgather(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> Backend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> outputs{output}, inputs{input};
  return allgather_into_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  check_tpu("all_gather_into_tensor", inputs, "input");
  check_tpu("all_gather_into_tensor", outputs, "output");
  if (native("all_gather_into_tensor", Collective::kAllGather, inputs, outputs, -1, -1,
             inputs.size() == 1 ? nullptr : "several inputs"))
    return finished(outputs);
  return staged("all_gather_into_tensor", inputs, outputs, joined(inputs, outputs), -1, -1,
                [&](auto& in, auto& out) {
                  return out.size() == 1 ? host_->_allgather_base(out[0], in[0], opts)
                                         : host_->allgather_into_tensor_coalesced(out, in, opts);
                });
}

c10::intrusive_ptr<c10d::Work> Backend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                               std::vector<at::Tensor>& inputs,
                                               const c10d::GatherOptions& opts) {
  check_tpu("gather", inputs, "input");
  check_tpu("gather", outputs, "output");
  // The root brings its list of outputs; the others none.
  std::vector<at::Tensor> mine = outputs.empty() ? std::vector<at::Tensor>{} : outputs[0];
  if (native("gather", Collective::kGather, inputs, mine, -1, opts.rootRank,
             inputs.size() == 1 && outputs.size() <= 1 ? nullptr : "several inputs"))
    return finished(flat(outputs));
  return staged("gather", inputs, outputs, inputs, -1, opts.rootRank,
                [&](auto& in, auto& out) { return host_->gather(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> Backend::scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ScatterOptions& opts) {
  check_tpu("scatter", inputs, "input");
  check_tpu("scatter", outputs, "output");
  // The root brings its list of inputs; the others none.
  std::vector<at::Tensor> mine = inputs.empty() ? std::vector<at::Tensor>{} : inputs[0];
  if (native("scatter", Collective::kScatter, mine, outputs, -1, opts.rootRank,
             outputs.size() == 1 && inputs.size() <= 1 ? nullptr : "several outputs"))
    return finished(outputs);
  return staged("scatter", inputs, outputs, outputs, -1, opts.rootRank,
                [&](auto& in, auto& out) { return host_->scatter(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  check_tpu("reduce_scatter", inputs, "input");
  check_tpu("reduce_scatter", outputs, "output");
  if (native("reduce_scatter", Collective::kReduceScatter, inputs.empty() ? outputs : inputs[0],
             outputs, opts.reduceOp.op_, -1,
             inputs.size() == 1 && outputs.size() == 1 ? nullptr : "several outputs"))
    return finished(outputs);
  return staged("reduce_scatter", inputs, outputs, joined(flat(inputs), outputs),
                opts.reduceOp.op_, -1, [&](auto& in, auto& out) {
                  c10d::ReduceScatterOptions o = opts;
                  for (auto& list : in) o.reduceOp = host_op(opts.reduceOp, list);
                  return host_->reduce_scatter(out, in, o);
                });
}

c10::intrusive_ptr<c10d::Work> Backend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outputs{output}, inputs{input};
  return reduce_scatter_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  check_tpu("reduce_scatter_tensor", inputs, "input");
  check_tpu("reduce_scatter_tensor", outputs, "output");
  if (native("reduce_scatter_tensor", Collective::kReduceScatter, inputs, outputs,
             opts.reduceOp.op_, -1, inputs.size() == 1 ? nullptr : "several inputs"))
    return finished(outputs);
  return staged("reduce_scatter_tensor", inputs, outputs, joined(inputs, outputs),
                opts.reduceOp.op_, -1, [&](auto& in, auto& out) {
                  c10d::ReduceScatterOptions o = opts;
                  o.reduceOp = host_op(opts.reduceOp, in);
                  return out.size() == 1 ? host_->_reduce_scatter_base(out[0], in[0], o)
                                         : host_->reduce_scatter_tensor_coalesced(out, in, o);
                });
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& output_splits,
                                                      std::vector<int64_t>& input_splits,
                                                      const c10d::AllToAllOptions& opts) {
  check_tpu("all_to_all_single", input, "input");
  check_tpu("all_to_all_single", output, "output");
  if (native("all_to_all_single", Collective::kAllToAll, {input}, {output}, -1, -1,
             even(input_splits) && even(output_splits) ? nullptr : "uneven splits"))
    return finished({output});
  agree("all_to_all_single", {input, output}, -1, -1, input_splits, output_splits);
  at::Tensor host_in = to_host(input);
  at::Tensor host_out = at::empty(output.sizes(), output.options().device(c10::kCPU));
  wait_host("all_to_all_single",
            host_->alltoall_base(host_out, host_in, output_splits, input_splits, opts), rank_,
            size_, host_in.numel() * host_in.element_size());
  copy_back({output}, {host_out});
  return finished({output});
}

// Gloo has no list all-to-all: one flat alltoall_base with a split per tensor.
c10::intrusive_ptr<c10d::Work> Backend::alltoall(std::vector<at::Tensor>& outputs,
                                                 std::vector<at::Tensor>& inputs,
                                                 const c10d::AllToAllOptions& opts) {
  check_tpu("all_to_all", inputs, "input");
  check_tpu("all_to_all", outputs, "output");
  TORCH_CHECK_VALUE(inputs.size() == static_cast<size_t>(size_) && outputs.size() == inputs.size(),
                    "tpu_dist: all_to_all needs one input and one output tensor per rank (",
                    size_, "), got ", inputs.size(), " inputs and ", outputs.size(), " outputs");
  std::vector<int64_t> in_splits, out_splits;
  std::vector<at::Tensor> host_in;
  for (const auto& t : inputs) {
    TORCH_CHECK_VALUE(t.scalar_type() == inputs[0].scalar_type() &&
                          outputs[&t - inputs.data()].scalar_type() == inputs[0].scalar_type(),
                      "tpu_dist: all_to_all needs one dtype for all its tensors");
    host_in.push_back(to_host(t).reshape({-1}));
    in_splits.push_back(t.numel());
  }
  int64_t total = 0;
  for (const auto& t : outputs) {
    out_splits.push_back(t.numel());
    total += t.numel();
  }
  if (native("all_to_all", Collective::kAllToAll, inputs, outputs, -1, -1,
             even(in_splits) && even(out_splits) ? nullptr : "uneven tensors"))
    return finished(outputs);
  agree("all_to_all", joined(inputs, outputs), -1, -1, in_splits, out_splits);
  at::Tensor flat_in = at::cat(host_in);
  at::Tensor flat_out = at::empty({total}, flat_in.options());
  // Gloo takes the split vectors by reference and may move from them.
  std::vector<int64_t> out_counts = out_splits, in_counts = in_splits;
  wait_host("all_to_all", host_->alltoall_base(flat_out, flat_in, out_counts, in_counts, opts),
            rank_, size_, flat_in.numel() * flat_in.element_size());
  std::vector<at::Tensor> host_out;
  int64_t start = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    host_out.push_back(flat_out.narrow(0, start, out_splits[i]).view(outputs[i].sizes()));
    start += out_splits[i];
  }
  copy_back(outputs, host_out);
  return finished(outputs);
}

// A send's destination or a receive's source: another rank of this group.
void check_peer(const char* op, const char* role, int peer, int rank, int size) {
  TORCH_CHECK_VALUE(peer >= 0 && peer < size && peer != rank, "tpu_dist: ", op, ": ", role,
                    " rank ", peer, " is not another rank of this group (its ranks are 0..",
                    size - 1, "; this is rank ", rank, ")");
}

c10::intrusive_ptr<c10d::Work> Backend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_tpu("send", tensors, "tensor");
  check_peer("send", "destination", dst, rank_, size_);
  if (NativeGroup* group = native_group()) return group->send(rank_, dst, tag, tensors, timeout_);
  auto host = to_host(tensors);
  // The host work keeps its tensors alive until the data has left.
  auto work = host_->send(host, dst, tag);
  count_host_staged(nbytes(host));
  return work;
}

c10::intrusive_ptr<c10d::Work> Backend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_tpu("recv", tensors, "tensor");
  check_peer("recv", "source", src, rank_, size_);
  if (NativeGroup* group = native_group()) return group->recv(rank_, src, tag, tensors, timeout_);
  auto host = host_like(tensors);
  auto work = host_->recv(host, src, tag);
  return pending_recv(std::move(work), tensors, std::move(host), rank_, size_);
}

c10::intrusive_ptr<c10d::Work> Backend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                      int tag) {
  check_tpu("recv", tensors, "tensor");
  if (NativeGroup* group = native_group()) return group->recv(rank_, -1, tag, tensors, timeout_);
  auto host = host_like(tensors);
  auto work = host_->recvAnysource(host, tag);
  return pending_recv(std::move(work), tensors, std::move(host), rank_, size_);
}

c10::intrusive_ptr<c10d::Work> Backend::barrier(const c10d::BarrierOptions& opts) {
  if (native_group()) {
    // A one-element all_reduce on this rank's device: the one asked for,
    // else that of its last collective (as NCCL guesses), else the current.
    int device = device_;
    if (opts.device && opts.device->type() == c10::DeviceType::PrivateUse1 &&
        opts.device->has_index())
      device = opts.device->index();
    else if (!opts.device_ids.empty())
      device = static_cast<int>(opts.device_ids[0]);
    if (device < 0)
      device = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index();
    std::vector<at::Tensor> token{
        at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(c10::DeviceType::PrivateUse1, device))};
    if (native("barrier", Collective::kAllReduce, token, token, c10d::ReduceOp::SUM))
      return finished({});
  }
  agree("barrier", {});
  wait_host("barrier", host_->barrier(opts), rank_, size_, 0);
  return finished({});
}

// DDP's timer for tpu modules (its logger's forward, backward and
// communication times): host timestamps, as for CPU modules. Device events
// would flush Fused Eager's pending program at each mark of every step.
class HostTimer : public c10d::Timer {
 public:
  explicit HostTimer(c10::Device /*device*/) {}
  std::optional<int64_t> measureDifference(Event start, Event end) override {
    const int64_t from = getTimeRef(start), to = getTimeRef(end);
    // Unset marks, or an end from an earlier iteration (the backward may not
    // have finished in this one): nothing to report.
    if (from == c10d::kUnsetTime || to == c10d::kUnsetTime || to < from) return std::nullopt;
    return to - from;
  }
};

}  // namespace torch_tpu::distributed

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, torch_tpu::distributed::HostTimer);
}  // namespace c10d
