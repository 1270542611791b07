// A compiled, loaded program (PJRT_LoadedExecutable).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "buffer.h"
#include "event.h"

namespace torch_tpu::pjrt {

struct ExecuteResult {
  std::vector<BufferPtr> outputs;
  std::shared_ptr<Event> done;  // fires when the device finished the program
};

class Executable {
 public:
  Executable(const PJRT_Api* api, PJRT_LoadedExecutable* exe);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  size_t num_outputs() const { return num_outputs_; }
  PJRT_LoadedExecutable* get() const { return exe_; }  // borrowed (collective.h)
  const PJRT_Api* api() const { return api_; }
  // Device memory one run allocates beyond its arguments (outputs not
  // aliasing an argument, plus temporaries), from the compiled program's
  // memory statistics; -1 when the plugin does not report them.
  int64_t run_bytes() const { return run_bytes_; }

  // Launches on `device` without waiting. Arguments are borrowed for the
  // duration of the call; PJRT orders the launch after their producers.
  ExecuteResult execute(const std::vector<PJRT_Buffer*>& args,
                        PJRT_Device* device) const;

  // Plugin-specific bytes that Client::deserialize turns back into an
  // executable; empty when the plugin cannot serialize.
  std::string serialize() const;

  // The optimized program as the plugin gives it (XLA's plugins: format
  // "hlo_with_config", a serialized HloModuleProtoWithConfig); both empty
  // when the plugin does not give it.
  struct Program {
    std::string format, code;
  };
  Program optimized_program() const;

 private:
  const PJRT_Api* api_;  // the plugin's table, alive for the process
  PJRT_LoadedExecutable* exe_;
  PJRT_Executable* exe_view_;  // owned: from GetExecutable, destroyed with us
  size_t num_outputs_ = 0;
  int64_t run_bytes_ = -1;
};

using ExecutablePtr = std::shared_ptr<Executable>;

}  // namespace torch_tpu::pjrt
