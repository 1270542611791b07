// A loaded PJRT plugin: the shared library, its PJRT_Api table, and the
// checks that the table is one this build understands.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "api.h"

namespace torch_tpu::pjrt {

using Attribute = std::variant<std::string, int64_t, std::vector<int64_t>,
                               float, bool>;

class Plugin {
 public:
  // dlopens `path`, resolves GetPjrtApi, checks the API version and struct
  // size, and initializes the plugin. Throws Error with what to install when
  // the file is missing or incompatible. The library stays loaded for the
  // life of the process (plugins are not safe to unload).
  static std::shared_ptr<Plugin> load(const std::string& path);

  const PJRT_Api* api() const { return api_; }
  const std::string& path() const { return path_; }
  int major_version() const { return api_->pjrt_api_version.major_version; }
  int minor_version() const { return api_->pjrt_api_version.minor_version; }
  std::map<std::string, Attribute> attributes() const;

 private:
  Plugin(std::string path, const PJRT_Api* api) : path_(std::move(path)), api_(api) {}
  std::string path_;
  const PJRT_Api* api_;
};

// Turns a list of PJRT_NamedValue into a map.
std::map<std::string, Attribute> to_attributes(const PJRT_NamedValue* values,
                                               size_t count);

}  // namespace torch_tpu::pjrt
