#include "plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <mutex>

#include "elf_check.h"
#include "log_level.h"

namespace torch_tpu::pjrt {

namespace {
// What to reinstall for a damaged plugin file, judged by its path.
std::string reinstall_hint(const std::string& path) {
  if (path.find("xla_cpu_pjrt") != std::string::npos)
    return "Reinstall the CPU plugin: `pip install --force-reinstall xla-cpu-pjrt`.";
  if (path.find("libtpu") != std::string::npos)
    return "Reinstall libtpu: `pip install --force-reinstall libtpu`.";
  return "Reinstall the package that provides it, or point TORCH_TPU_PJRT_PLUGIN at an intact "
         "PJRT plugin .so.";
}
}  // namespace

std::map<std::string, Attribute> to_attributes(const PJRT_NamedValue* values,
                                               size_t count) {
  std::map<std::string, Attribute> out;
  for (size_t i = 0; i < count; ++i) {
    const PJRT_NamedValue& v = values[i];
    std::string name(v.name, v.name_size);
    switch (v.type) {
      case PJRT_NamedValue_kString:
        out[name] = std::string(v.string_value, v.value_size);
        break;
      case PJRT_NamedValue_kInt64:
        out[name] = v.int64_value;
        break;
      case PJRT_NamedValue_kInt64List:
        out[name] = std::vector<int64_t>(v.int64_array_value,
                                         v.int64_array_value + v.value_size);
        break;
      case PJRT_NamedValue_kFloat:
        out[name] = v.float_value;
        break;
      case PJRT_NamedValue_kBool:
        out[name] = v.bool_value;
        break;
    }
  }
  return out;
}

std::shared_ptr<Plugin> Plugin::load(const std::string& path) {
  // One Plugin per path: PJRT_Plugin_Initialize must run once per process.
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<Plugin>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded.find(path); it != loaded.end()) return it->second;

  struct stat st;
  if (path.empty() || ::stat(path.c_str(), &st) != 0) {
    throw Error("PJRT plugin not found at '" + path +
                "'. Install the CPU plugin with `pip install xla-cpu-pjrt`, "
                "or point TORCH_TPU_PJRT_PLUGIN at a PJRT plugin .so "
                "(libtpu, an XLA CUDA plugin).");
  }
  // A file cut short would be mapped anyway and kill the process with
  // SIGBUS at its first use: look at its headers first.
  if (std::string damage = elf_damage(path); !damage.empty()) {
    throw Error("PJRT plugin '" + path + "' is damaged (" + damage +
                "; a truncated download or copy?). " + reinstall_hint(path));
  }
  apply_plugin_log_level();  // read by the plugin at its first log line
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw Error("cannot load PJRT plugin '" + path + "': " + ::dlerror());
  }
  using GetApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetApiFn>(::dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    throw Error("'" + path + "' is not a PJRT plugin: it exports no GetPjrtApi");
  }
  const PJRT_Api* api = get_api();
  if (api == nullptr) throw Error("GetPjrtApi in '" + path + "' returned null");
  const auto& v = api->pjrt_api_version;
  if (v.major_version != PJRT_API_MAJOR) {
    throw Error("PJRT plugin '" + path + "' implements C API " +
                std::to_string(v.major_version) + "." +
                std::to_string(v.minor_version) + " but torch_tpu was built for " +
                std::to_string(PJRT_API_MAJOR) + "." +
                std::to_string(PJRT_API_MINOR) +
                "; install a plugin with the same major version.");
  }
  // Fields we call must lie inside the plugin's table. Older minor versions
  // have a shorter table; we only rely on functions up to PJRT_Compile, and
  // check optional later ones for null at the call site.
  if (api->struct_size < offsetof(PJRT_Api, PJRT_Executable_OutputElementTypes)) {
    throw Error("PJRT plugin '" + path + "' has a PJRT_Api table of " +
                std::to_string(api->struct_size) +
                " bytes, too old for torch_tpu; install a newer plugin.");
  }
  auto init = PJRT_ARGS(PJRT_Plugin_Initialize);
  PJRT_CALL(api, PJRT_Plugin_Initialize, init);
  auto plugin = std::shared_ptr<Plugin>(new Plugin(path, api));
  loaded[path] = plugin;
  return plugin;
}

std::map<std::string, Attribute> Plugin::attributes() const {
  auto a = PJRT_ARGS(PJRT_Plugin_Attributes);
  PJRT_CALL(api_, PJRT_Plugin_Attributes, a);
  return to_attributes(a.attributes, a.num_attributes);
}

}  // namespace torch_tpu::pjrt
