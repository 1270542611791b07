#include "backend.h"

#include <ATen/ATen.h>

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

std::vector<at::Tensor> flat(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> out;
  for (const auto& l : lists) out.insert(out.end(), l.begin(), l.end());
  return out;
}

}  // namespace

Backend::Backend(int rank, int size, c10::intrusive_ptr<c10d::Backend> host,
                 std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), host_(std::move(host)), timeout_(timeout) {
  TORCH_CHECK_VALUE(host_, "tpu_dist: a host process group is required");
  TORCH_CHECK_VALUE(host_->getRank() == rank && host_->getSize() == size,
                    "tpu_dist: the host process group is rank ", host_->getRank(), " of ",
                    host_->getSize(), ", expected rank ", rank, " of ", size);
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
  auto host = to_host(tensors);
  wait_host("broadcast", host_->broadcast(host, opts), rank_, size_, nbytes(host));
  if (rank_ != opts.rootRank) copy_back(tensors, host);
  return finished(tensors);
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  check_tpu("allreduce", tensors, "tensor");
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
  auto host = to_host(tensors);
  c10d::ReduceOptions o = opts;
  o.reduceOp = host_op(opts.reduceOp, host);
  wait_host("reduce", host_->reduce(host, o), rank_, size_, nbytes(host));
  if (rank_ == opts.rootRank) copy_back(tensors, host);
  return finished(tensors);
}

c10::intrusive_ptr<c10d::Work> Backend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  check_tpu("allgather", inputs, "input");
  check_tpu("allgather", outputs, "output");
  auto host_in = to_host(inputs);
  auto host_out = host_like(outputs);
  wait_host("allgather", host_->allgather(host_out, host_in, opts), rank_, size_,
            nbytes(flat(host_out)));
  copy_back(outputs, host_out);
  return finished(flat(outputs));
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
  auto host_in = to_host(inputs);
  auto host_out = host_like(outputs);
  auto work = host_out.size() == 1
                  ? host_->_allgather_base(host_out[0], host_in[0], opts)
                  : host_->allgather_into_tensor_coalesced(host_out, host_in, opts);
  wait_host("all_gather_into_tensor", work, rank_, size_, nbytes(host_out));
  copy_back(outputs, host_out);
  return finished(outputs);
}

c10::intrusive_ptr<c10d::Work> Backend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                               std::vector<at::Tensor>& inputs,
                                               const c10d::GatherOptions& opts) {
  check_tpu("gather", inputs, "input");
  check_tpu("gather", outputs, "output");
  auto host_in = to_host(inputs);
  auto host_out = host_like(outputs);
  wait_host("gather", host_->gather(host_out, host_in, opts), rank_, size_, nbytes(host_in));
  copy_back(outputs, host_out);
  return finished(flat(outputs));
}

c10::intrusive_ptr<c10d::Work> Backend::scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ScatterOptions& opts) {
  check_tpu("scatter", inputs, "input");
  check_tpu("scatter", outputs, "output");
  auto host_in = to_host(inputs);
  auto host_out = host_like(outputs);
  wait_host("scatter", host_->scatter(host_out, host_in, opts), rank_, size_, nbytes(host_out));
  copy_back(outputs, host_out);
  return finished(outputs);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  check_tpu("reduce_scatter", inputs, "input");
  check_tpu("reduce_scatter", outputs, "output");
  auto host_in = to_host(inputs);
  auto host_out = host_like(outputs);
  c10d::ReduceScatterOptions o = opts;
  for (auto& list : host_in) o.reduceOp = host_op(opts.reduceOp, list);
  wait_host("reduce_scatter", host_->reduce_scatter(host_out, host_in, o), rank_, size_,
            nbytes(flat(host_in)));
  copy_back(outputs, host_out);
  return finished(outputs);
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
  auto host_in = to_host(inputs);
  auto host_out = host_like(outputs);
  c10d::ReduceScatterOptions o = opts;
  o.reduceOp = host_op(opts.reduceOp, host_in);
  auto work = host_out.size() == 1
                  ? host_->_reduce_scatter_base(host_out[0], host_in[0], o)
                  : host_->reduce_scatter_tensor_coalesced(host_out, host_in, o);
  wait_host("reduce_scatter_tensor", work, rank_, size_, nbytes(host_in));
  copy_back(outputs, host_out);
  return finished(outputs);
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& output_splits,
                                                      std::vector<int64_t>& input_splits,
                                                      const c10d::AllToAllOptions& opts) {
  check_tpu("all_to_all_single", input, "input");
  check_tpu("all_to_all_single", output, "output");
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
  at::Tensor flat_in = at::cat(host_in);
  at::Tensor flat_out = at::empty({total}, flat_in.options());
  wait_host("all_to_all", host_->alltoall_base(flat_out, flat_in, out_splits, in_splits, opts),
            rank_, size_, flat_in.numel() * flat_in.element_size());
  std::vector<at::Tensor> host_out;
  int64_t at = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    host_out.push_back(flat_out.narrow(0, at, out_splits[i]).view(outputs[i].sizes()));
    at += out_splits[i];
  }
  copy_back(outputs, host_out);
  return finished(outputs);
}

c10::intrusive_ptr<c10d::Work> Backend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_tpu("send", tensors, "tensor");
  auto host = to_host(tensors);
  // The host work keeps its tensors alive until the data has left.
  auto work = host_->send(host, dst, tag);
  count_host_staged(nbytes(host));
  return work;
}

c10::intrusive_ptr<c10d::Work> Backend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_tpu("recv", tensors, "tensor");
  auto host = host_like(tensors);
  auto work = host_->recv(host, src, tag);
  return pending_recv(std::move(work), tensors, std::move(host), rank_, size_);
}

c10::intrusive_ptr<c10d::Work> Backend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                      int tag) {
  check_tpu("recv", tensors, "tensor");
  auto host = host_like(tensors);
  auto work = host_->recvAnysource(host, tag);
  return pending_recv(std::move(work), tensors, std::move(host), rank_, size_);
}

c10::intrusive_ptr<c10d::Work> Backend::barrier(const c10d::BarrierOptions& opts) {
  wait_host("barrier", host_->barrier(opts), rank_, size_, 0);
  return finished({});
}

}  // namespace torch_tpu::distributed
