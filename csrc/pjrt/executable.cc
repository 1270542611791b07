#include "executable.h"

#include <algorithm>

namespace torch_tpu::pjrt {

Executable::Executable(const PJRT_Api* api, PJRT_LoadedExecutable* exe)
    : api_(api), exe_(exe) {
  auto g = PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable);
  g.loaded_executable = exe_;
  PJRT_CALL(api_, PJRT_LoadedExecutable_GetExecutable, g);
  exe_view_ = g.executable;
  auto n = PJRT_ARGS(PJRT_Executable_NumOutputs);
  n.executable = exe_view_;
  PJRT_CALL(api_, PJRT_Executable_NumOutputs, n);
  num_outputs_ = n.num_outputs;
  auto m = PJRT_ARGS(PJRT_Executable_GetCompiledMemoryStats);
  m.executable = exe_view_;
  if (api_->PJRT_Executable_GetCompiledMemoryStats) {
    try {
      PJRT_CALL(api_, PJRT_Executable_GetCompiledMemoryStats, m);
      run_bytes_ = std::max<int64_t>(
          0, m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes);
    } catch (const Error&) {
      // Not reported by this plugin: launches are not checked.
    }
  }
}

Executable::~Executable() {
  auto d = PJRT_ARGS(PJRT_Executable_Destroy);
  d.executable = exe_view_;
  api_->PJRT_Executable_Destroy(&d);
  auto l = PJRT_ARGS(PJRT_LoadedExecutable_Destroy);
  l.executable = exe_;
  api_->PJRT_LoadedExecutable_Destroy(&l);
}

ExecuteResult Executable::execute(const std::vector<PJRT_Buffer*>& args,
                                  PJRT_Device* device) const {
  auto options = PJRT_STRUCT(PJRT_ExecuteOptions);
  std::vector<PJRT_Buffer*> outputs(num_outputs_, nullptr);
  PJRT_Buffer* const* arg_list = args.data();
  PJRT_Buffer** output_list = outputs.data();
  PJRT_Event* done = nullptr;

  auto a = PJRT_ARGS(PJRT_LoadedExecutable_Execute);
  a.executable = exe_;
  a.options = &options;
  a.argument_lists = &arg_list;
  a.num_devices = 1;
  a.num_args = args.size();
  a.output_lists = &output_list;
  a.device_complete_events = &done;
  a.execute_device = device;
  PJRT_CALL(api_, PJRT_LoadedExecutable_Execute, a);

  ExecuteResult result;
  result.outputs.reserve(outputs.size());
  for (PJRT_Buffer* b : outputs) result.outputs.push_back(std::make_shared<Buffer>(api_, b));
  if (done != nullptr) result.done = std::make_shared<Event>(api_, done);
  return result;
}

std::string Executable::serialize() const {
  if (api_->PJRT_Executable_Serialize == nullptr) return {};
  auto a = PJRT_ARGS(PJRT_Executable_Serialize);
  a.executable = exe_view_;
  PJRT_CALL(api_, PJRT_Executable_Serialize, a);
  std::string bytes(a.serialized_bytes, a.serialized_bytes_size);
  if (a.serialized_executable_deleter != nullptr)
    a.serialized_executable_deleter(a.serialized_executable);
  return bytes;
}

Executable::Program Executable::optimized_program() const {
  if (api_->PJRT_Executable_OptimizedProgram == nullptr) return {};
  // The plugin names the format it writes (and owns that string); the code
  // buffer is ours: the first call gives its size, the second fills it.
  auto program = PJRT_STRUCT(PJRT_Program);
  auto a = PJRT_ARGS(PJRT_Executable_OptimizedProgram);
  a.executable = exe_view_;
  a.program = &program;
  try {
    PJRT_CALL(api_, PJRT_Executable_OptimizedProgram, a);
    std::string code(program.code_size, '\0');
    program.code = code.data();
    PJRT_CALL(api_, PJRT_Executable_OptimizedProgram, a);
    code.resize(std::min(code.size(), program.code_size));
    std::string format = program.format == nullptr
                             ? std::string()
                             : std::string(program.format, program.format_size);
    return {std::move(format), std::move(code)};
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace torch_tpu::pjrt
