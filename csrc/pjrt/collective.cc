#include "collective.h"

#include <set>

#include "compile_options.h"

namespace torch_tpu::pjrt {

std::string replicated_compile_options(const std::vector<int64_t>& device_ids) {
  // DeviceAssignmentProto: replica_count = 1, computation_count = 2,
  // computation_devices = 3 (ComputationDevice: replica_device_ids = 1,
  // packed). One computation (partition) holding one device per replica.
  std::string ids;
  for (int64_t id : device_ids) put_varint(ids, static_cast<uint64_t>(id));
  std::string computation;
  put_bytes_field(computation, 1, ids);
  std::string assignment;
  put_int_field(assignment, 1, static_cast<int64_t>(device_ids.size()));
  put_int_field(assignment, 2, 1);
  put_bytes_field(assignment, 3, computation);
  // ExecutableBuildOptionsProto: device_ordinal = 1, num_replicas = 4,
  // num_partitions = 5, device_assignment = 9.
  std::string build;
  put_int_field(build, 1, -1);
  put_int_field(build, 4, static_cast<int64_t>(device_ids.size()));
  put_int_field(build, 5, 1);
  put_bytes_field(build, 9, assignment);
  // CompileOptionsProto: executable_build_options = 3.
  std::string out;
  put_bytes_field(out, 3, build);
  return out;
}

ExecutablePtr compile_replicated(const Client& client, const std::string& mlir,
                                 const std::vector<int>& devices) {
  if (devices.empty()) throw Error("compile_replicated: no devices");
  std::set<int> seen;
  std::vector<int64_t> ids;
  for (int d : devices) {
    if (d < 0 || d >= client.device_count())
      throw Error("compile_replicated: device " + std::to_string(d) + " out of range (" +
                  std::to_string(client.device_count()) + " devices)");
    if (!seen.insert(d).second)
      throw Error("compile_replicated: device " + std::to_string(d) + " named twice");
    ids.push_back(client.device_info(d).id);
  }
  return client.compile_with_options(mlir, replicated_compile_options(ids));
}

ReplicatedResult execute_replicated(const Executable& exe,
                                    const std::vector<std::vector<PJRT_Buffer*>>& args) {
  const size_t n = args.size();
  const PJRT_Api* api = exe.api();
  auto options = PJRT_STRUCT(PJRT_ExecuteOptions);
  std::vector<PJRT_Buffer* const*> arg_lists(n);
  std::vector<std::vector<PJRT_Buffer*>> outputs(n,
                                                 std::vector<PJRT_Buffer*>(exe.num_outputs()));
  std::vector<PJRT_Buffer**> output_lists(n);
  std::vector<PJRT_Event*> done(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    if (args[i].size() != args[0].size())
      throw Error("execute_replicated: replicas differ in their argument count");
    arg_lists[i] = args[i].data();
    output_lists[i] = outputs[i].data();
  }
  auto a = PJRT_ARGS(PJRT_LoadedExecutable_Execute);
  a.executable = exe.get();
  a.options = &options;
  a.argument_lists = arg_lists.data();
  a.num_devices = n;
  a.num_args = n ? args[0].size() : 0;
  a.output_lists = output_lists.data();
  a.device_complete_events = done.data();
  a.execute_device = nullptr;  // every device of the program's assignment
  PJRT_CALL(api, PJRT_LoadedExecutable_Execute, a);
  ReplicatedResult result;
  result.outputs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    for (PJRT_Buffer* b : outputs[i]) result.outputs[i].push_back(std::make_shared<Buffer>(api, b));
    result.done.push_back(done[i] ? std::make_shared<Event>(api, done[i]) : nullptr);
  }
  return result;
}

}  // namespace torch_tpu::pjrt
