#include "api.h"

#include <atomic>
#include <string_view>

namespace torch_tpu::pjrt {

namespace {
const char* code_name(int code) {
  switch (code) {
    case PJRT_Error_Code_CANCELLED: return "CANCELLED";
    case PJRT_Error_Code_UNKNOWN: return "UNKNOWN";
    case PJRT_Error_Code_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case PJRT_Error_Code_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case PJRT_Error_Code_NOT_FOUND: return "NOT_FOUND";
    case PJRT_Error_Code_ALREADY_EXISTS: return "ALREADY_EXISTS";
    case PJRT_Error_Code_PERMISSION_DENIED: return "PERMISSION_DENIED";
    case PJRT_Error_Code_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case PJRT_Error_Code_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case PJRT_Error_Code_ABORTED: return "ABORTED";
    case PJRT_Error_Code_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case PJRT_Error_Code_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case PJRT_Error_Code_INTERNAL: return "INTERNAL";
    case PJRT_Error_Code_UNAVAILABLE: return "UNAVAILABLE";
    case PJRT_Error_Code_DATA_LOSS: return "DATA_LOSS";
    case PJRT_Error_Code_UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "ERROR";
  }
}
std::atomic<OutOfMemoryHandler> g_out_of_memory_handler{nullptr};
}  // namespace

bool Error::out_of_memory() const {
  if (code_ == PJRT_Error_Code_RESOURCE_EXHAUSTED) return true;
  std::string_view m(what());
  return m.find("Out of memory") != m.npos || m.find("out of memory") != m.npos;
}

void raise(std::string message, int code) {
  Error error(std::move(message), code);
  if (error.out_of_memory())
    if (OutOfMemoryHandler handler = g_out_of_memory_handler.load()) handler(error.what());
  throw error;
}

void set_out_of_memory_handler(OutOfMemoryHandler handler) { g_out_of_memory_handler = handler; }

void check(const PJRT_Api* api, PJRT_Error* error, const char* function) {
  if (error == nullptr) return;
  auto msg_args = PJRT_ARGS(PJRT_Error_Message);
  msg_args.error = error;
  api->PJRT_Error_Message(&msg_args);
  std::string message(msg_args.message, msg_args.message_size);

  auto code_args = PJRT_ARGS(PJRT_Error_GetCode);
  code_args.error = error;
  int code = 0;
  if (api->PJRT_Error_GetCode(&code_args) == nullptr) code = code_args.code;

  auto destroy = PJRT_ARGS(PJRT_Error_Destroy);
  destroy.error = error;
  api->PJRT_Error_Destroy(&destroy);
  throw Error(std::string(function) + " failed (" + code_name(code) +
                  "): " + message,
              code);
}

}  // namespace torch_tpu::pjrt
