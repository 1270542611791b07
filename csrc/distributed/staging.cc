#include "staging.h"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <string>

#include "../aten/tensor_io.h"
#include "../engine/engine.h"

namespace torch_tpu::distributed {

void check_tpu(const char* op, const at::Tensor& t, const char* role) {
  TORCH_CHECK_VALUE(t.defined(), "tpu_dist: ", op, " got an undefined tensor as its ", role);
  TORCH_CHECK_VALUE(t.device().type() == c10::DeviceType::PrivateUse1, "tpu_dist: ", op,
                    " got a ", t.device().str(), " tensor as its ", role,
                    "; tpu_dist runs collectives on tpu tensors. Move it with .to('tpu'), or "
                    "give CPU tensors a CPU backend: init_process_group(backend='cpu:gloo,"
                    "tpu:tpu_dist')");
  TORCH_CHECK_VALUE(t.layout() == c10::kStrided, "tpu_dist: ", op, " supports dense tensors; its ",
                    role, " has layout ", t.layout());
}

void check_tpu(const char* op, const std::vector<at::Tensor>& ts, const char* role) {
  for (size_t i = 0; i < ts.size(); ++i)
    check_tpu(op, ts[i], (std::string(role) + " " + std::to_string(i)).c_str());
}

void check_tpu(const char* op, const std::vector<std::vector<at::Tensor>>& ts, const char* role) {
  for (size_t i = 0; i < ts.size(); ++i)
    for (size_t j = 0; j < ts[i].size(); ++j)
      check_tpu(op, ts[i][j],
                (std::string(role) + " [" + std::to_string(i) + "][" + std::to_string(j) + "]")
                    .c_str());
}

at::Tensor to_host(const at::Tensor& t) { return aten::to_cpu(t); }

std::vector<at::Tensor> to_host(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(to_host(t));
  return out;
}

namespace {

template <class F>
std::vector<std::vector<at::Tensor>> each_list(const std::vector<std::vector<at::Tensor>>& ts,
                                               F f) {
  std::vector<std::vector<at::Tensor>> out;
  out.reserve(ts.size());
  for (const auto& list : ts) out.push_back(f(list));
  return out;
}

}  // namespace

std::vector<std::vector<at::Tensor>> to_host(const std::vector<std::vector<at::Tensor>>& ts) {
  return each_list(ts, [](const auto& list) { return to_host(list); });
}

std::vector<at::Tensor> host_like(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(at::empty(t.sizes(), t.options().device(c10::kCPU)));
  return out;
}

std::vector<std::vector<at::Tensor>> host_like(const std::vector<std::vector<at::Tensor>>& ts) {
  return each_list(ts, [](const auto& list) { return host_like(list); });
}

std::vector<at::Tensor> flat(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> out;
  for (const auto& l : lists) out.insert(out.end(), l.begin(), l.end());
  return out;
}

void copy_back(const std::vector<at::Tensor>& device, const std::vector<at::Tensor>& host) {
  for (size_t i = 0; i < device.size(); ++i) aten::copy_from_cpu(device[i], host[i]);
}

void copy_back(const std::vector<std::vector<at::Tensor>>& device,
               const std::vector<std::vector<at::Tensor>>& host) {
  for (size_t i = 0; i < device.size(); ++i) copy_back(device[i], host[i]);
}

int64_t nbytes(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel() * t.element_size();
  return n;
}

void wait_for(const char* op, const c10::intrusive_ptr<c10d::Work>& work, int rank, int size) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (auto* c10 = dynamic_cast<const c10::Error*>(&e)) what = c10->what_without_backtrace();
    C10_THROW_ERROR(DistBackendError,
                    c10::str("tpu_dist: ", op, " failed on rank ", rank, " of ", size,
                             " (host-staged through gloo): ", what));
  }
}

void wait_host(const char* op, const c10::intrusive_ptr<c10d::Work>& work, int rank, int size,
               int64_t bytes) {
  wait_for(op, work, rank, size);
  count_host_staged(bytes);
}

void count_host_staged(int64_t bytes) {
  auto& metrics = engine::Engine::get().metrics();
  metrics.count("collectives_host_staged");
  metrics.count("collective_bytes_host_staged", bytes);
}

c10::intrusive_ptr<c10d::Work> finished(std::vector<at::Tensor> result) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()));
  future->markCompleted(c10::IValue(std::move(result)));
  return c10d::Work::create_from_future(future);
}

namespace {

class RecvWork final : public c10d::Work {
 public:
  RecvWork(c10::intrusive_ptr<c10d::Work> host_work, std::vector<at::Tensor> device,
           std::vector<at::Tensor> host, int rank, int size)
      : c10d::Work(rank, c10d::OpType::RECV),
        host_work_(std::move(host_work)),
        device_(std::move(device)),
        host_(std::move(host)),
        size_(size) {}

  bool isCompleted() override {
    if (!done_ && host_work_->isCompleted()) complete();
    return done_;
  }
  bool isSuccess() const override { return done_; }
  bool wait(std::chrono::milliseconds timeout) override {
    if (!done_) {
      if (timeout != kNoTimeout) host_work_->wait(timeout);
      complete();
    }
    return true;
  }
  int sourceRank() const override { return host_work_->sourceRank(); }
  std::vector<at::Tensor> result() override { return device_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    wait(kNoTimeout);
    auto future = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()));
    future->markCompleted(c10::IValue(device_));
    return future;
  }

 private:
  void complete() {
    wait_host("recv", host_work_, rank_, size_, nbytes(host_));
    copy_back(device_, host_);
    done_ = true;
  }

  c10::intrusive_ptr<c10d::Work> host_work_;
  std::vector<at::Tensor> device_, host_;
  int size_;
  bool done_ = false;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> pending_recv(c10::intrusive_ptr<c10d::Work> host_work,
                                            std::vector<at::Tensor> device,
                                            std::vector<at::Tensor> host, int rank, int size) {
  return c10::make_intrusive<RecvWork>(std::move(host_work), std::move(device), std::move(host),
                                       rank, size);
}

}  // namespace torch_tpu::distributed
