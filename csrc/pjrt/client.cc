#include "client.h"

#include "kv_store.h"

namespace torch_tpu::pjrt {

std::string default_compile_options() {
  // ExecutableBuildOptionsProto fields: device_ordinal = 1,
  // num_replicas = 4, num_partitions = 5.
  // CompileOptionsProto fields: executable_build_options = 3,
  // compile_portable_executable = 4.
  std::string build;
  put_int_field(build, 1, -1);
  put_int_field(build, 4, 1);
  put_int_field(build, 5, 1);
  std::string out;
  put_bytes_field(out, 3, build);
  // compile_portable_executable = 4: the executable runs on whichever device
  // execute() names, so one compiled program serves tpu:0, tpu:1, ...
  put_int_field(out, 4, 1);
  return out;
}

Client::Client(std::shared_ptr<Plugin> plugin,
               const std::map<std::string, Attribute>& options)
    : plugin_(std::move(plugin)), api_(plugin_->api()) {
  std::vector<PJRT_NamedValue> values;
  values.reserve(options.size());
  for (const auto& [name, value] : options) {
    PJRT_NamedValue v;
    std::memset(&v, 0, sizeof(v));
    v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
    v.name = name.c_str();
    v.name_size = name.size();
    if (auto* i = std::get_if<int64_t>(&value)) {
      v.type = PJRT_NamedValue_kInt64;
      v.int64_value = *i;
      v.value_size = 1;
    } else if (auto* s = std::get_if<std::string>(&value)) {
      v.type = PJRT_NamedValue_kString;
      v.string_value = s->c_str();
      v.value_size = s->size();
    } else if (auto* b = std::get_if<bool>(&value)) {
      v.type = PJRT_NamedValue_kBool;
      v.bool_value = *b;
      v.value_size = 1;
    } else if (auto* f = std::get_if<float>(&value)) {
      v.type = PJRT_NamedValue_kFloat;
      v.float_value = *f;
      v.value_size = 1;
    } else if (auto* l = std::get_if<std::vector<int64_t>>(&value)) {
      v.type = PJRT_NamedValue_kInt64List;
      v.int64_array_value = l->data();
      v.value_size = l->size();
    }
    values.push_back(v);
  }
  auto a = PJRT_ARGS(PJRT_Client_Create);
  a.create_options = values.data();
  a.num_options = values.size();
  // The process's key-value store (kv_store.h), for plugins that span
  // processes; kept alive by its registry for as long as the client lives.
  std::shared_ptr<KeyValueStore> kv = client_kv_store();
  attach_kv_store(a, kv.get());
  PJRT_CALL(api_, PJRT_Client_Create, a);
  client_ = a.client;
  if (kv) count_client_with_kv_store();

  auto d = PJRT_ARGS(PJRT_Client_AddressableDevices);
  d.client = client_;
  PJRT_CALL(api_, PJRT_Client_AddressableDevices, d);
  devices_.assign(d.addressable_devices, d.addressable_devices + d.num_addressable_devices);

  auto n = PJRT_ARGS(PJRT_Client_PlatformName);
  n.client = client_;
  PJRT_CALL(api_, PJRT_Client_PlatformName, n);
  platform_name_.assign(n.platform_name, n.platform_name_size);
  auto v = PJRT_ARGS(PJRT_Client_PlatformVersion);
  v.client = client_;
  PJRT_CALL(api_, PJRT_Client_PlatformVersion, v);
  platform_version_.assign(v.platform_version, v.platform_version_size);
}

Client::~Client() {
  auto a = PJRT_ARGS(PJRT_Client_Destroy);
  a.client = client_;
  api_->PJRT_Client_Destroy(&a);
}

PJRT_Device* Client::device(int index) const {
  if (index < 0 || index >= device_count()) {
    throw Error("device index " + std::to_string(index) + " is out of range: " +
                "the " + platform_name_ + " client has " +
                std::to_string(device_count()) + " device(s)");
  }
  return devices_[index];
}

DeviceInfo Client::device_info(int index) const {
  auto g = PJRT_ARGS(PJRT_Device_GetDescription);
  g.device = device(index);
  PJRT_CALL(api_, PJRT_Device_GetDescription, g);
  DeviceInfo info;
  auto id = PJRT_ARGS(PJRT_DeviceDescription_Id);
  id.device_description = g.device_description;
  PJRT_CALL(api_, PJRT_DeviceDescription_Id, id);
  info.id = id.id;
  auto k = PJRT_ARGS(PJRT_DeviceDescription_Kind);
  k.device_description = g.device_description;
  PJRT_CALL(api_, PJRT_DeviceDescription_Kind, k);
  info.kind.assign(k.device_kind, k.device_kind_size);
  auto s = PJRT_ARGS(PJRT_DeviceDescription_DebugString);
  s.device_description = g.device_description;
  PJRT_CALL(api_, PJRT_DeviceDescription_DebugString, s);
  info.description.assign(s.debug_string, s.debug_string_size);
  return info;
}

int64_t Client::memory_limit(int index) const {
  if (!api_->PJRT_Device_MemoryStats) return -1;
  auto m = PJRT_ARGS(PJRT_Device_MemoryStats);
  m.device = device(index);
  try {
    PJRT_CALL(api_, PJRT_Device_MemoryStats, m);
  } catch (const Error&) {
    return -1;  // unimplemented by this plugin
  }
  return m.bytes_limit_is_set ? m.bytes_limit : -1;
}

BufferPtr Client::buffer_from_host(const void* data, PJRT_Buffer_Type type,
                                   const std::vector<int64_t>& dims,
                                   int index) const {
  // Only during the call: XLA:CPU copies on this thread, no hand-off.
  Upload up = upload(data, type, dims, index, PJRT_HostBufferSemantics_kImmutableOnlyDuringCall);
  if (up.host_done) up.host_done->await();
  return up.buffer;
}

Client::Upload Client::buffer_from_host_async(const void* data, PJRT_Buffer_Type type,
                                              const std::vector<int64_t>& dims,
                                              int index) const {
  // XLA:CPU copies a large array on its thread pool under these semantics.
  return upload(data, type, dims, index,
                PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes);
}

Client::Upload Client::upload(const void* data, PJRT_Buffer_Type type,
                              const std::vector<int64_t>& dims, int index,
                              PJRT_HostBufferSemantics semantics) const {
  auto a = PJRT_ARGS(PJRT_Client_BufferFromHostBuffer);
  a.client = client_;
  a.data = data;
  a.type = type;
  a.dims = dims.data();
  a.num_dims = dims.size();
  a.host_buffer_semantics = semantics;
  a.device = device(index);
  PJRT_CALL(api_, PJRT_Client_BufferFromHostBuffer, a);
  Upload up;
  up.buffer = std::make_shared<Buffer>(api_, a.buffer);
  if (a.done_with_host_buffer != nullptr)
    up.host_done = std::make_shared<Event>(api_, a.done_with_host_buffer);
  return up;
}

std::string quick_compile_options() {
  // CompileOptionsProto.env_option_overrides = 7: map<string,
  // OptionOverrideProto>, applied over the debug options the plugin takes
  // from its flags (an entry is a message with key = 1, value = 2;
  // OptionOverrideProto.bool_field = 2, int_field = 3). LLVM without its
  // optimizations; XLA's own passes are unchanged. The code can differ from
  // the optimized one in the last bit: optimizing LLVM contracts a multiply
  // and an add into an FMA (measured: x * a + b, layer_norm, tanh differ by
  // 1-2 ulp; exp, log, sin, erf, softmax, sums and dots do not). Opt level 1
  // keeps the numerics but saved only ~15% of the compile time, level 0 ~50%.
  // XLA:CPU's fusion emitters (one MLIR context and LLVM module per fusion)
  // are off too: its older elemental emitter compiles a tiny Llama's first
  // generate() programs in about half the time again, with the same results
  // (tests/python/test_tiered_compile.py).
  std::string out = default_compile_options();
  auto entry = [&](const std::string& key, int value_field, int64_t value) {
    std::string override_value, e;
    put_int_field(override_value, value_field, value);
    put_bytes_field(e, 1, key);
    put_bytes_field(e, 2, override_value);
    put_bytes_field(out, 7, e);
  };
  entry("xla_backend_optimization_level", 3, 0);
  entry("xla_llvm_disable_expensive_passes", 2, 1);
  entry("xla_cpu_use_fusion_emitters", 2, 0);
  return out;
}

ExecutablePtr Client::compile(const std::string& mlir, bool quick,
                              const CompileOverrides& overrides) const {
  static const std::string optimized = default_compile_options(), fast = quick_compile_options();
  // The caller's overrides come last: a repeated map key or message field
  // parses as the later one, so they win over ours.
  std::string with_overrides;
  if (!overrides.empty()) with_overrides = (quick ? fast : optimized) + overrides.encode();
  return compile_with_options(mlir, !overrides.empty() ? with_overrides : quick ? fast : optimized);
}

ExecutablePtr Client::compile_with_options(const std::string& mlir,
                                           const std::string& options) const {
  static const char kFormat[] = "mlir";
  auto program = PJRT_STRUCT(PJRT_Program);
  program.code = const_cast<char*>(mlir.data());
  program.code_size = mlir.size();
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;
  auto a = PJRT_ARGS(PJRT_Client_Compile);
  a.client = client_;
  a.program = &program;
  a.compile_options = options.data();
  a.compile_options_size = options.size();
  PJRT_CALL(api_, PJRT_Client_Compile, a);
  return std::make_shared<Executable>(api_, a.executable);
}

ExecutablePtr Client::deserialize(const std::string& bytes) const {
  auto a = PJRT_ARGS(PJRT_Executable_DeserializeAndLoad);
  a.client = client_;
  a.serialized_executable = bytes.data();
  a.serialized_executable_size = bytes.size();
  PJRT_CALL(api_, PJRT_Executable_DeserializeAndLoad, a);
  return std::make_shared<Executable>(api_, a.loaded_executable);
}

}  // namespace torch_tpu::pjrt
