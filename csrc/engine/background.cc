#include "background.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace torch_tpu::engine {

void Background::submit(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return;
  jobs_.push_back(std::move(job));
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  wake_.notify_one();
}

void Background::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return jobs_.empty() && !busy_; });
}

void Background::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    jobs_.clear();
    wake_.notify_one();
    released_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void Background::hold(bool on) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!on) {
      held_ = false;
      released_.notify_all();
      return;
    }
    if (held_) return;
    held_ = true;
  }
  submit([this] {
    std::unique_lock<std::mutex> lock(mu_);
    released_.wait(lock, [&] { return !held_ || stopping_; });
  });
}

void Background::run() {
  // Below the threads that run the user's steps: an upgrade only takes the
  // time they leave (Linux nice values are per thread).
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kNice);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (stopping_) break;
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    busy_ = true;
    lock.unlock();
    job();  // a job reports its own errors
    lock.lock();
    busy_ = false;
    if (jobs_.empty()) idle_.notify_all();
  }
  busy_ = false;
  idle_.notify_all();
}

}  // namespace torch_tpu::engine
