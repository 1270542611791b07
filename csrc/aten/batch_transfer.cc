#include "batch_transfer.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>

#include <string>

#include "device.h"
#include "storage.h"
#include "tensor_io.h"

namespace torch_tpu::aten {

namespace {

constexpr auto kTpu = c10::DeviceType::PrivateUse1;

// Every check runs before the first copy is issued.
void check_tensor(const char* fn, const char* what, size_t i, const at::Tensor& t, bool on_tpu) {
  TORCH_CHECK_TYPE(t.defined(), fn, ": ", what, "[", i, "] is an undefined tensor");
  TORCH_CHECK_VALUE(t.layout() == c10::kStrided, fn, ": ", what, "[", i, "] has layout ",
                    t.layout(), "; only strided tensors are copied in a batch (.to_dense() first)");
  if (on_tpu) {
    TORCH_CHECK_VALUE(t.device().type() == kTpu, fn, ": ", what, "[", i, "] is on ", t.device(),
                      ", expected a tpu tensor");
  } else {
    TORCH_CHECK_VALUE(t.device().is_cpu(), fn, ": ", what, "[", i, "] is on ", t.device(),
                      ", expected a CPU tensor");
  }
  to_hlo(t.scalar_type());  // a dtype the device holds (raises TypeError naming it)
}

// The tensor's elements in storage order: for a non-overlapping dense
// tensor, the block its elements fill.
at::Tensor storage_order(const at::Tensor& t) {
  return t.as_strided({t.numel()}, {1}, t.storage_offset());
}

// Along dimension 0: the reference's row copies, checked.
struct Rows {
  int64_t src_offset, dst_offset, size;
};

std::vector<Rows> check_rows(const char* fn, const std::vector<at::Tensor>& srcs,
                             const std::vector<at::Tensor>& dsts,
                             const std::vector<int64_t>& src_offsets,
                             const std::vector<int64_t>& dst_offsets,
                             const std::vector<int64_t>& sizes, bool to_device) {
  size_t n = srcs.size();
  TORCH_CHECK_VALUE(dsts.size() == n && src_offsets.size() == n && dst_offsets.size() == n &&
                        sizes.size() == n,
                    fn, ": the five lists must have one entry per copy; got ", n, " src_arrs, ",
                    dsts.size(), " dst_arrs, ", src_offsets.size(), " src_offsets_major_dim, ",
                    dst_offsets.size(), " dst_offsets_major_dim and ", sizes.size(),
                    " copy_sizes_major_dim");
  std::vector<Rows> rows;
  rows.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor &s = srcs[i], &d = dsts[i];
    check_tensor(fn, "src_arrs", i, s, !to_device);
    check_tensor(fn, "dst_arrs", i, d, to_device);
    TORCH_CHECK_TYPE(s.scalar_type() == d.scalar_type(), fn, ": src_arrs[", i, "] is ",
                     s.scalar_type(), " but dst_arrs[", i, "] is ", d.scalar_type(),
                     "; convert one of them first (copies do not change dtypes)");
    TORCH_CHECK_VALUE(s.dim() >= 1 && d.dim() == s.dim() && s.sizes().slice(1) == d.sizes().slice(1),
                      fn, ": copy ", i, " needs tensors of at least one dimension with equal "
                      "sizes after the first; got src_arrs[", i, "] of shape ", s.sizes(),
                      " and dst_arrs[", i, "] of shape ", d.sizes());
    TORCH_CHECK_VALUE(!d.is_conj() && !d.is_neg(), fn, ": dst_arrs[", i,
                      "] is a conjugate or negative view; copy into its resolve_conj() instead");
    Rows r{src_offsets[i], dst_offsets[i], sizes[i]};
    TORCH_CHECK_INDEX(r.size >= 0 && r.src_offset >= 0 && r.dst_offset >= 0 &&
                          r.src_offset + r.size <= s.size(0) && r.dst_offset + r.size <= d.size(0),
                      fn, ": copy ", i, " of ", r.size, " rows from row ", r.src_offset,
                      " of src_arrs[", i, "] (", s.size(0), " rows) to row ", r.dst_offset,
                      " of dst_arrs[", i, "] (", d.size(0), " rows) is out of range");
    rows.push_back(r);
  }
  return rows;
}

// Issues the downloads of `srcs` (tpu views) into `dsts` (CPU tensors of the
// same sizes and dtype): straight into a destination whose memory is the
// source's in the order downloaded, else through a staging tensor copied at
// wait(). `results` are what the future hands back.
TransferFuturePtr download(const std::vector<at::Tensor>& srcs, const std::vector<at::Tensor>& dsts,
                           std::vector<at::Tensor> results, bool has_results) {
  std::vector<engine::ValuePtr> values;
  std::vector<engine::HostSpan> spans;
  std::vector<at::Tensor> keep;
  std::vector<std::pair<at::Tensor, at::Tensor>> finish;
  for (size_t i = 0; i < srcs.size(); ++i) {
    at::Tensor s = srcs[i].resolve_conj().resolve_neg();
    const at::Tensor& d = dsts[i];
    if (s.numel() == 0) continue;
    at::Tensor into = d;
    if (s.is_non_overlapping_and_dense() && d.strides() == s.strides()) {
      s = storage_order(s);  // same layout: the storage block, as it lies
    } else if (!d.is_contiguous() || d.is_conj() || d.is_neg()) {
      into = at::empty(d.sizes(), d.options().pinned_memory(false));
      finish.emplace_back(d, into);
    }
    values.push_back(flat_value(s));
    spans.push_back(engine::HostSpan{into.data_ptr(), into.nbytes()});
    keep.push_back(into);
  }
  engine::Transfers t = engine::Engine::get().download(values, spans);
  return std::make_shared<TransferFuture>(std::move(t), std::move(keep), std::move(finish),
                                          std::move(results), has_results);
}

// Issues the uploads of `hosts` (CPU tensors whose memory holds their
// elements densely, in the order of their targets' elements) into `targets`
// (tpu tensors or views of the same numel), assigned at once: ops on them
// wait for the data.
TransferFuturePtr upload(std::vector<at::Tensor> hosts, const std::vector<at::Tensor>& targets,
                         std::vector<at::Tensor> results, bool has_results) {
  std::vector<engine::HostArray> arrays;
  arrays.reserve(hosts.size());
  for (size_t i = 0; i < hosts.size(); ++i)
    arrays.push_back(engine::HostArray{
        hosts[i].data_ptr(), hlo::TensorType{to_hlo(hosts[i].scalar_type()), {hosts[i].numel()}},
        targets[i].device().index()});
  std::vector<engine::ValuePtr> values;
  engine::Transfers t = engine::Engine::get().upload(arrays, &values);
  for (size_t k = 0; k < values.size(); ++k) assign(targets[k], values[k]);
  return std::make_shared<TransferFuture>(std::move(t), std::move(hosts),
                                          std::vector<std::pair<at::Tensor, at::Tensor>>{},
                                          std::move(results), has_results);
}

}  // namespace

TransferFuture::TransferFuture(engine::Transfers transfers, std::vector<at::Tensor> keep,
                               std::vector<std::pair<at::Tensor, at::Tensor>> finish,
                               std::vector<at::Tensor> results, bool has_results)
    : transfers_(std::move(transfers)),
      keep_(std::move(keep)),
      finish_(std::move(finish)),
      results_(std::move(results)),
      has_results_(has_results) {}

TransferFuture::~TransferFuture() {
  if (finished_) return;
  // Dropped without wait(): the plugin may still read or write the host
  // memory this holds, so it is let go only once the copies are done.
  transfers_.drain();
  try {
    for (auto& [dst, staged] : finish_) dst.copy_(staged);
  } catch (...) {
  }
}

void TransferFuture::wait() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!finished_) {
    finished_ = true;
    try {
      engine::Engine::get().await(transfers_);
      for (auto& [dst, staged] : finish_) dst.copy_(staged);
    } catch (...) {
      error_ = std::current_exception();
    }
    keep_.clear();
    finish_.clear();
  }
  if (error_) std::rethrow_exception(error_);
}

bool TransferFuture::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_ || transfers_.ready();
}

TransferFuturePtr batch_to_device(const std::vector<at::Tensor>& srcs, int device) {
  check_device(device);
  for (size_t i = 0; i < srcs.size(); ++i)
    check_tensor("batch_to_device", "tensors", i, srcs[i], false);
  std::vector<at::Tensor> hosts, targets, results;
  results.reserve(srcs.size());
  for (size_t i = 0; i < srcs.size(); ++i) {
    at::Tensor h = srcs[i].resolve_conj().resolve_neg();
    // Tensor.to keeps a dense tensor's strides (preserve_format); others are
    // laid out as empty_like lays them out.
    if (!h.is_non_overlapping_and_dense()) h = at::empty_like(h).copy_(h);
    results.push_back(at::empty_strided(h.sizes(), h.strides(),
                                        h.options().device(c10::Device(kTpu, device))));
    if (h.numel() == 0) continue;
    hosts.push_back(h);  // its memory block, in storage order
    targets.push_back(storage_order(results.back()));
  }
  return upload(std::move(hosts), targets, std::move(results), true);
}

TransferFuturePtr batch_to_host(const std::vector<at::Tensor>& srcs, bool pin_memory) {
  for (size_t i = 0; i < srcs.size(); ++i)
    check_tensor("batch_to_host", "tensors", i, srcs[i], true);
  std::vector<at::Tensor> results;
  results.reserve(srcs.size());
  for (const at::Tensor& s : srcs)
    // Tensor.cpu()'s layout: the source's strides when it is dense.
    results.push_back(at::empty_like(s, s.options().device(c10::kCPU).pinned_memory(pin_memory)));
  return download(srcs, results, results, true);
}

TransferFuturePtr copy_rows_to_device(const std::vector<at::Tensor>& srcs,
                                      const std::vector<at::Tensor>& dsts,
                                      const std::vector<int64_t>& src_offsets,
                                      const std::vector<int64_t>& dst_offsets,
                                      const std::vector<int64_t>& sizes) {
  auto rows = check_rows("batch_transfer_h2d", srcs, dsts, src_offsets, dst_offsets, sizes, true);
  std::vector<at::Tensor> hosts, targets;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].size == 0 || srcs[i].numel() == 0) continue;
    at::Tensor h = srcs[i].narrow(0, rows[i].src_offset, rows[i].size);
    hosts.push_back(h.resolve_conj().resolve_neg().contiguous());
    targets.push_back(dsts[i].narrow(0, rows[i].dst_offset, rows[i].size));
  }
  auto future = upload(std::move(hosts), targets, {}, false);
  for (const at::Tensor& d : dsts) d.unsafeGetTensorImpl()->bump_version();
  return future;
}

TransferFuturePtr copy_rows_to_host(const std::vector<at::Tensor>& srcs,
                                    const std::vector<at::Tensor>& dsts,
                                    const std::vector<int64_t>& src_offsets,
                                    const std::vector<int64_t>& dst_offsets,
                                    const std::vector<int64_t>& sizes) {
  auto rows = check_rows("batch_transfer_d2h", srcs, dsts, src_offsets, dst_offsets, sizes, false);
  std::vector<at::Tensor> from, into;
  for (size_t i = 0; i < rows.size(); ++i) {
    from.push_back(srcs[i].narrow(0, rows[i].src_offset, rows[i].size));
    into.push_back(dsts[i].narrow(0, rows[i].dst_offset, rows[i].size));
  }
  for (const at::Tensor& d : dsts) d.unsafeGetTensorImpl()->bump_version();
  return download(from, into, {}, false);
}

void await_all(const std::vector<TransferFuturePtr>& futures) {
  std::exception_ptr first;
  for (const auto& f : futures) {
    TORCH_CHECK_TYPE(f != nullptr, "await_all: got None where a TransferFuture was expected");
  }
  for (const auto& f : futures) {
    try {
      f->wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace torch_tpu::aten
