// A worker thread that runs jobs one at a time in submission order: the
// compile cache's optimizing compiles (tiered compilation, cache.h). Jobs
// submitted after stop() are dropped; stop() waits for the running one, so
// no compile is in the plugin when the process's static objects go.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace torch_tpu::engine {

class Background {
 public:
  Background() = default;
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  ~Background() { stop(); }

  // Queues `job` (the thread starts with the first one).
  void submit(std::function<void()> job);
  // Waits until every job submitted so far has run.
  void drain();
  // Drops the queued jobs and waits for the running one; later submissions
  // are dropped.
  void stop();
  // Test hook: hold(true) queues a job that keeps the worker waiting (the
  // jobs queued after it wait too) until hold(false). drain() waits for it.
  void hold(bool on);

 private:
  // The worker's nice value: it runs when the recording threads leave a core.
  static constexpr int kNice = 10;
  void run();

  std::mutex mu_;
  std::condition_variable wake_, idle_, released_;
  std::deque<std::function<void()>> jobs_;
  bool busy_ = false, stopping_ = false, held_ = false;
  std::thread thread_;
};

}  // namespace torch_tpu::engine
