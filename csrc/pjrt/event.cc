#include "event.h"

namespace torch_tpu::pjrt {

Event::~Event() {
  if (event_ == nullptr) return;
  auto a = PJRT_ARGS(PJRT_Event_Destroy);
  a.event = event_;
  api_->PJRT_Event_Destroy(&a);  // an error while destroying cannot be acted on
}

void Event::await() {
  auto a = PJRT_ARGS(PJRT_Event_Await);
  a.event = event_;
  PJRT_CALL(api_, PJRT_Event_Await, a);
}

bool Event::is_ready() const {
  auto a = PJRT_ARGS(PJRT_Event_IsReady);
  a.event = event_;
  PJRT_CALL(api_, PJRT_Event_IsReady, a);
  return a.is_ready;
}

void Event::check_ready() const {
  auto a = PJRT_ARGS(PJRT_Event_Error);
  a.event = event_;
  PJRT_CALL(api_, PJRT_Event_Error, a);
}

namespace {
struct ReadyCall {
  const PJRT_Api* api;
  std::function<void()> fn;
};
}  // namespace

void Event::on_ready(std::function<void()> fn) const {
  auto* call = new ReadyCall{api_, std::move(fn)};
  auto a = PJRT_ARGS(PJRT_Event_OnReady);
  a.event = event_;
  a.user_arg = call;
  a.callback = [](PJRT_Error* error, void* arg) {
    auto* c = static_cast<ReadyCall*>(arg);
    if (error != nullptr) {  // the callback owns it; the event's waiters report it
      auto d = PJRT_ARGS(PJRT_Error_Destroy);
      d.error = error;
      c->api->PJRT_Error_Destroy(&d);
    }
    c->fn();
    delete c;
  };
  try {
    PJRT_CALL(api_, PJRT_Event_OnReady, a);
  } catch (...) {
    delete call;  // never registered
    throw;
  }
}

}  // namespace torch_tpu::pjrt
