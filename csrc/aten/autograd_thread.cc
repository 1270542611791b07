#include "autograd_thread.h"

#include <c10/core/AutogradState.h>

#include <cstdlib>
#include <cstring>

namespace torch_tpu::aten {

void run_backward_on_calling_thread() {
  static const bool keep = [] {
    const char* v = std::getenv("TORCH_TPU_AUTOGRAD_THREAD");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  if (!keep) c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
}

}  // namespace torch_tpu::aten
