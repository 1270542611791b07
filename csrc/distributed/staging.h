// The host-staged transport's pieces: argument checks, tpu -> host copies,
// running a host collective to completion with errors that name the
// collective, copying results back in place, and the Work objects handed
// to c10d.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <vector>

namespace torch_tpu::distributed {

// Raises a clear error unless `t` is a defined, dense tpu tensor; `op` is
// the collective, `role` what the tensor is to it ("input 0", "output").
void check_tpu(const char* op, const at::Tensor& t, const char* role);
void check_tpu(const char* op, const std::vector<at::Tensor>& ts, const char* role);
void check_tpu(const char* op, const std::vector<std::vector<at::Tensor>>& ts, const char* role);

// Dense host copies of tpu tensors (they wait for pending device work), and
// uninitialized host tensors shaped like them.
at::Tensor to_host(const at::Tensor& t);
std::vector<at::Tensor> to_host(const std::vector<at::Tensor>& ts);
std::vector<std::vector<at::Tensor>> to_host(const std::vector<std::vector<at::Tensor>>& ts);
std::vector<at::Tensor> host_like(const std::vector<at::Tensor>& ts);
std::vector<std::vector<at::Tensor>> host_like(const std::vector<std::vector<at::Tensor>>& ts);

// The tensors of a list of lists, in order (a plain list as it is).
std::vector<at::Tensor> flat(const std::vector<std::vector<at::Tensor>>& lists);
inline const std::vector<at::Tensor>& flat(const std::vector<at::Tensor>& list) { return list; }

// Writes each host result into its tpu tensor (any view; aliases see it).
void copy_back(const std::vector<at::Tensor>& device, const std::vector<at::Tensor>& host);
void copy_back(const std::vector<std::vector<at::Tensor>>& device,
               const std::vector<std::vector<at::Tensor>>& host);

// Waits for a host collective; a failure becomes a DistBackendError naming
// `op`, this rank and the group size.
void wait_for(const char* op, const c10::intrusive_ptr<c10d::Work>& work, int rank, int size);
// wait_for, then counts the collective in the engine's metrics
// (`collectives_host_staged`, `collective_bytes_host_staged`).
void wait_host(const char* op, const c10::intrusive_ptr<c10d::Work>& work, int rank, int size,
               int64_t bytes);
// Counts one host-staged collective of `bytes` in the engine's metrics.
void count_host_staged(int64_t bytes);

// A finished Work whose future holds `result` (the tpu tensors written).
c10::intrusive_ptr<c10d::Work> finished(std::vector<at::Tensor> result);

// A receive: completes (copies into the tpu tensors) when waited for, or
// when polled and found complete.
c10::intrusive_ptr<c10d::Work> pending_recv(c10::intrusive_ptr<c10d::Work> host_work,
                                            std::vector<at::Tensor> device,
                                            std::vector<at::Tensor> host, int rank, int size);

int64_t nbytes(const std::vector<at::Tensor>& ts);

}  // namespace torch_tpu::distributed
