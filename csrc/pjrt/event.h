// An owned PJRT_Event: completion of a transfer or an execution.
#pragma once

#include <functional>
#include <memory>

#include "api.h"

namespace torch_tpu::pjrt {

class Event {
 public:
  Event(const PJRT_Api* api, PJRT_Event* event) : api_(api), event_(event) {}
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Blocks until the event fires; throws the error it carries, if any.
  void await();
  bool is_ready() const;
  // Throws the error a ready event carries, if any, without waiting; call
  // only after is_ready() said true.
  void check_ready() const;
  // Calls `fn` once the event fires, whatever its outcome: on a plugin
  // thread, or on this one at once when it is ready already. `fn` must not
  // throw; it may outlive this Event (the plugin holds the completion).
  void on_ready(std::function<void()> fn) const;

 private:
  const PJRT_Api* api_;  // the plugin's table, alive for the process
  PJRT_Event* event_;
};

}  // namespace torch_tpu::pjrt
