#include "registry.h"

namespace torch_tpu::lowering {

Registry& Registry::get() {
  static Registry* registry = [] {
    auto* r = new Registry;
    register_elementwise(*r);
    register_reduction(*r);
    register_linalg(*r);
    register_shape(*r);
    register_indexing(*r);
    register_nn(*r);
    register_random(*r);
    register_factory(*r);
    register_conv(*r);
    register_misc(*r);
    register_optimizer(*r);
    register_bounded_dims(*r);
    register_special(*r);  // last: _foreach_* wrap lowerings registered above
    return r;
  }();
  return *registry;
}

namespace {

// "lowering/elementwise.cc" from however the compiler spelled the path.
std::string short_path(const std::string& file) {
  auto slash = file.find_last_of('/');
  if (slash == std::string::npos || slash == 0) return file;
  auto folder = file.find_last_of('/', slash - 1);
  return file.substr(folder == std::string::npos ? 0 : folder + 1);
}

}  // namespace

void Registry::add(const std::string& op, LoweringFn fn, std::source_location where) {
  Entry entry{std::move(fn), where.file_name(), static_cast<unsigned>(where.line())};
  auto [it, fresh] = fns_.emplace(op, std::move(entry));
  if (!fresh)
    throw std::logic_error("lowering registry: " + op + " is registered twice, at " +
                           this->where(op) + " and at " + short_path(where.file_name()) + ":" +
                           std::to_string(where.line()) + "; keep one (one op, one place)");
}

const LoweringFn* Registry::find(const std::string& op) const {
  auto it = fns_.find(op);
  return it == fns_.end() ? nullptr : &it->second.fn;
}

std::string Registry::family(const std::string& op) const {
  auto it = fns_.find(op);
  if (it == fns_.end()) return "";
  std::string name = short_path(it->second.file);
  name = name.substr(name.find('/') + 1);
  return name.substr(0, name.find('.'));
}

std::string Registry::where(const std::string& op) const {
  auto it = fns_.find(op);
  if (it == fns_.end()) return "";
  return short_path(it->second.file) + ":" + std::to_string(it->second.line);
}

std::vector<std::string> Registry::ops() const {
  std::vector<std::string> out;
  out.reserve(fns_.size());
  for (const auto& [name, fn] : fns_) out.push_back(name);
  return out;
}

}  // namespace torch_tpu::lowering
