// The one door to the PJRT C API: every call fills `struct_size`, runs, and
// turns a returned PJRT_Error into a pjrt::Error carrying the code, the
// plugin's message and the function's name. The error is destroyed on every
// path.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>

#include "pjrt_c_api.h"

namespace torch_tpu::pjrt {

// Raised for every failure reported by a plugin or detected before a call.
class Error : public std::runtime_error {
 public:
  Error(std::string message, int code = 0)
      : std::runtime_error(std::move(message)), code_(code) {}
  int code() const { return code_; }
  // Out of memory: RESOURCE_EXHAUSTED, or an allocation failure the plugin
  // reports under another code (XLA:CPU fails a program whose temporaries it
  // cannot allocate with INTERNAL "... Out of memory allocating N bytes.").
  bool out_of_memory() const;

 private:
  int code_;
};

// Throws `message` as an Error with `code`; when that is out of memory and
// a handler is installed, through the handler instead (the torch layer's
// torch.OutOfMemoryError). For the outermost throws of the layers above
// (the engine's, which add the failing op to a plugin's error): below them
// errors stay plain Errors, which callers may catch.
[[noreturn]] void raise(std::string message, int code);
using OutOfMemoryHandler = void (*)(const std::string& message);  // must throw
void set_out_of_memory_handler(OutOfMemoryHandler handler);

// Converts `error` (may be null) into an exception; always destroys it.
void check(const PJRT_Api* api, PJRT_Error* error, const char* function);

// Zero-initialised argument struct with struct_size set.
template <typename Args>
Args args(size_t struct_size) {
  Args a;
  std::memset(&a, 0, sizeof(a));
  a.struct_size = struct_size;
  return a;
}

}  // namespace torch_tpu::pjrt

// PJRT_ARGS(PJRT_Client_Create) declares `PJRT_Client_Create_Args` zeroed and
// sized; PJRT_CALL(api, PJRT_Client_Create, a) calls through the table.
#define PJRT_ARGS(fn) ::torch_tpu::pjrt::args<fn##_Args>(fn##_Args_STRUCT_SIZE)
#define PJRT_STRUCT(type) ::torch_tpu::pjrt::args<type>(type##_STRUCT_SIZE)
#define PJRT_CALL(api, fn, a)                                              \
  do {                                                                     \
    if ((api)->fn == nullptr)                                              \
      throw ::torch_tpu::pjrt::Error(std::string("PJRT plugin does not "   \
                                                 "implement " #fn));       \
    ::torch_tpu::pjrt::check((api), (api)->fn(&(a)), #fn);                 \
  } while (0)
