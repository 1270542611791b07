#include "client.h"

#include "../hlo/builder.h"
#include "hlo_dots.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <array>
#include <map>
#include <set>
#include <vector>
#include <string_view>

namespace torch_tpu::pjrt {

namespace {

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_int_field(std::string& out, int field, int64_t v) {
  put_varint(out, static_cast<uint64_t>(field) << 3);  // wire type 0
  put_varint(out, static_cast<uint64_t>(v));
}

}  // namespace

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
  put_varint(out, (3u << 3) | 2u);  // wire type 2: length-delimited
  put_varint(out, build.size());
  out += build;
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
  PJRT_CALL(api_, PJRT_Client_Create, a);
  client_ = a.client;

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

BufferPtr Client::buffer_from_host(const void* data, PJRT_Buffer_Type type,
                                   const std::vector<int64_t>& dims,
                                   int index) const {
  auto a = PJRT_ARGS(PJRT_Client_BufferFromHostBuffer);
  a.client = client_;
  a.data = data;
  a.type = type;
  a.dims = dims.data();
  a.num_dims = dims.size();
  a.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
  a.device = device(index);
  PJRT_CALL(api_, PJRT_Client_BufferFromHostBuffer, a);
  auto buffer = std::make_shared<Buffer>(api_, a.buffer);
  if (a.done_with_host_buffer != nullptr) Event(api_, a.done_with_host_buffer).await();
  return buffer;
}

namespace {

// The group number after hlo::kBf16SplitMarker on `line`; -1 when unmarked.
int64_t bf16_split_group(std::string_view line) {
  size_t at = line.find(hlo::kBf16SplitMarker);
  if (at == std::string_view::npos) return -1;
  int64_t group = 0;
  size_t i = at + hlo::kBf16SplitMarker.size();
  if (i >= line.size()) return -1;
  for (; i < line.size() && line[i] >= '0' && line[i] <= '9'; ++i) group = group * 10 + (line[i] - '0');
  return group;
}

// The group of a dot named loc("tt_bf16_dot_<group>"); -1 for another name.
// XLA may add to the name (a prefix of enclosing scopes), so it is searched.
int64_t loc_group(std::string_view name) {
  size_t at = name.rfind(hlo::kBf16SplitLoc);
  if (at == std::string_view::npos) return -1;
  size_t i = at + hlo::kBf16SplitLoc.size();
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  int64_t group = 0;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) group = group * 10 + (name[i] - '0');
  return group;
}

// `mlir` with the marked ops of the groups in `f32` (all groups when `all`)
// taking and making f32 where they had bf16 (an f32 -> f32 convert is a
// no-op, and the dot then has the same products in f32).
std::string with_f32_groups(const std::string& mlir, const std::set<int64_t>& f32, bool all) {
  std::string out;
  out.reserve(mlir.size());
  size_t start = 0;
  while (start < mlir.size()) {
    size_t end = mlir.find('\n', start);
    if (end == std::string::npos) end = mlir.size();
    std::string line = mlir.substr(start, end - start);
    int64_t group = bf16_split_group(line);
    if (group >= 0 && (all || f32.count(group))) {
      // A convert makes f32 from what it takes (f32, or a bf16 operand of
      // the program); every other marked op takes and makes f32.
      size_t from = 0;
      if (line.find("\"stablehlo.convert\"") != std::string::npos) from = line.rfind(" -> ");
      if (from == std::string::npos) from = line.size();
      for (size_t at; (at = line.find("xbf16>", from)) != std::string::npos;) line.replace(at, 6, "xf32>");
      for (size_t at; (at = line.find("<bf16>", from)) != std::string::npos;) line.replace(at, 6, "<f32>");
    }
    out += line;
    if (end < mlir.size()) out += '\n';
    start = end + 1;
  }
  return out;
}

// The element count of each tensor type on `line` after its last " : (",
// in order (a dot: lhs, rhs, result).
std::vector<int64_t> tensor_elements(std::string_view line) {
  std::vector<int64_t> out;
  size_t at = line.rfind(" : (");
  if (at == std::string_view::npos) return out;
  while ((at = line.find("tensor<", at)) != std::string_view::npos) {
    at += 7;
    size_t end = line.find('>', at);
    if (end == std::string_view::npos) break;
    int64_t n = 1;
    std::string_view type = line.substr(at, end - at);
    size_t x;
    while ((x = type.find('x')) != std::string_view::npos) {
      int64_t d = 0;
      for (char ch : type.substr(0, x)) d = d * 10 + (ch - '0');
      n *= d;
      type.remove_prefix(x + 1);
    }
    out.push_back(n);
    at = end;
  }
  return out;
}

// For each split dot of `mlir`: its group and (result, lhs, rhs) elements.
std::map<std::array<int64_t, 3>, std::vector<int64_t>> split_dot_signatures(
    const std::string& mlir) {
  std::map<std::array<int64_t, 3>, std::vector<int64_t>> out;
  size_t start = 0;
  while (start < mlir.size()) {
    size_t end = mlir.find('\n', start);
    if (end == std::string::npos) end = mlir.size();
    std::string_view line(mlir.data() + start, end - start);
    start = end + 1;
    int64_t group = bf16_split_group(line);
    if (group < 0 || line.find("stablehlo.dot_general") == std::string_view::npos) continue;
    std::vector<int64_t> e = tensor_elements(line);
    if (e.size() == 3) out[{e[2], e[0], e[1]}].push_back(group);
  }
  return out;
}

bool debug_bf16_split() {
  static const bool on = [] {
    const char* v = std::getenv("TORCH_TPU_DEBUG_BF16_DOTS");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

}  // namespace

ExecutablePtr Client::compile(const std::string& mlir) const {
  ExecutablePtr exe = compile_as_is(mlir);
  if (mlir.find(hlo::kBf16SplitMarker) == std::string::npos) return exe;
  // XLA:CPU runs a bf16 x bf16 -> f32 dot in its bf16 gemm only in the forms
  // check_bf16_dots accepts, and which form a dot ends up in depends on the
  // whole optimized program. The groups of the dots outside those forms are
  // compiled again in f32; that can move other dots, so it is checked again
  // (a few rounds), and anything unreadable falls back to f32 throughout.
  std::set<int64_t> f32;
  std::map<std::array<int64_t, 3>, std::vector<int64_t>> signatures;
  for (int round = 0; round < 3; ++round) {
    Executable::Program program = exe->optimized_program();
    Bf16DotCheck check = check_bf16_dots(program.format, program.code);
    if (debug_bf16_split()) {
      std::fprintf(stderr, "[torch_tpu] bf16 dots round %d: format '%s', %zu bytes, read %d, "
                   "unsafe %zu\n", round, program.format.c_str(), program.code.size(),
                   check.read, check.unsafe.size());
      for (const UnsafeDot& d : check.unsafe)
        std::fprintf(stderr, "  unsafe '%s' out %lld lhs %lld rhs %lld\n", d.op_name.c_str(),
                     (long long)d.out, (long long)d.lhs, (long long)d.rhs);
    }
    if (check.all_safe()) {
      if (round > 0) ++bf16_split_partial_;
      return exe;
    }
    if (!check.read) break;
    // A dot is found by its name, or else by its element counts (every split
    // dot with those counts goes to f32: more than needed is still right).
    if (signatures.empty()) signatures = split_dot_signatures(mlir);
    size_t before = f32.size();
    bool lost = false;
    for (const UnsafeDot& d : check.unsafe) {
      if (int64_t group = loc_group(d.op_name); group >= 0) {
        f32.insert(group);
        continue;
      }
      auto it = signatures.find({d.out, d.lhs, d.rhs});
      if (it == signatures.end()) it = signatures.find({d.out, d.rhs, d.lhs});
      if (it == signatures.end()) {
        lost = true;
        break;
      }
      f32.insert(it->second.begin(), it->second.end());
    }
    if (lost || f32.size() <= before) break;  // not ours, or no progress
    exe = compile_as_is(with_f32_groups(mlir, f32, /*all=*/false));
  }
  ++bf16_split_fallbacks_;
  return compile_as_is(with_f32_groups(mlir, {}, /*all=*/true));
}

ExecutablePtr Client::compile_as_is(const std::string& mlir) const {
  static const std::string options = default_compile_options();
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
