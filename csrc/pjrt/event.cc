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

}  // namespace torch_tpu::pjrt
