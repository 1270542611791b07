// Batched host<->device copies of many tensors: every PJRT transfer of a
// batch is issued before any is awaited (device->host: the pending programs
// are flushed once first), and the batch is a TransferFuture to wait on.
// torch.tpu.batch_to_device / batch_to_host and the reference's
// torch_tpu._internal.batch_transfer are built on these.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <exception>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "../engine/transfers.h"

namespace torch_tpu::aten {

// A batch of copies in flight. wait() blocks until every copy finished
// (raising the first error), completes destinations that needed a staging
// copy and drops the host memory it held; done() asks without blocking.
class TransferFuture {
 public:
  TransferFuture(engine::Transfers transfers, std::vector<at::Tensor> keep,
                 std::vector<std::pair<at::Tensor, at::Tensor>> finish,
                 std::vector<at::Tensor> results, bool has_results);
  ~TransferFuture();  // waits (errors dropped): the plugin may still use the host memory
  TransferFuture(const TransferFuture&) = delete;
  TransferFuture& operator=(const TransferFuture&) = delete;

  void wait();
  bool done() const;
  // The new tensors of batch_to_device / batch_to_host; copies into given
  // tensors have none (their wait() returns None).
  bool has_results() const { return has_results_; }
  const std::vector<at::Tensor>& results() const { return results_; }

 private:
  mutable std::mutex mu_;
  engine::Transfers transfers_;
  std::vector<at::Tensor> keep_;  // host memory the copies read or write
  std::vector<std::pair<at::Tensor, at::Tensor>> finish_;  // (destination, staged) after the copies
  std::vector<at::Tensor> results_;
  bool has_results_;
  bool finished_ = false;
  std::exception_ptr error_;  // raised again by every later wait()
};

using TransferFuturePtr = std::shared_ptr<TransferFuture>;

// New tpu tensors on `device` with the sources' contents, sizes, dtypes and
// (for dense sources) strides, as Tensor.to(device) makes them. Sources are
// CPU tensors (any layout, views, zero-size).
TransferFuturePtr batch_to_device(const std::vector<at::Tensor>& srcs, int device);
// New CPU tensors (pinned when `pin_memory`) with the tpu sources' contents,
// as Tensor.cpu() makes them.
TransferFuturePtr batch_to_host(const std::vector<at::Tensor>& srcs, bool pin_memory);

// The reference's copies along dimension 0: for each i,
// dst[i][dst_offsets[i] : +sizes[i]] = src[i][src_offsets[i] : +sizes[i]].
// Same dtype and trailing sizes; every argument is checked before any copy.
// Host to device: CPU sources, tpu destinations.
TransferFuturePtr copy_rows_to_device(const std::vector<at::Tensor>& srcs,
                                      const std::vector<at::Tensor>& dsts,
                                      const std::vector<int64_t>& src_offsets,
                                      const std::vector<int64_t>& dst_offsets,
                                      const std::vector<int64_t>& sizes);
// Device to host: tpu sources, CPU destinations.
TransferFuturePtr copy_rows_to_host(const std::vector<at::Tensor>& srcs,
                                    const std::vector<at::Tensor>& dsts,
                                    const std::vector<int64_t>& src_offsets,
                                    const std::vector<int64_t>& dst_offsets,
                                    const std::vector<int64_t>& sizes);

// Waits for each future (all of them, even after one failed), then raises
// the first error.
void await_all(const std::vector<TransferFuturePtr>& futures);

}  // namespace torch_tpu::aten
