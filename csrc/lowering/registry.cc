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
    register_ops_gaps(*r);
    register_optimizer(*r);
    register_special(*r);  // last: _foreach_* wrap lowerings registered above
    return r;
  }();
  return *registry;
}

void Registry::add(const std::string& op, LoweringFn fn) { fns_[op] = std::move(fn); }

const LoweringFn* Registry::find(const std::string& op) const {
  auto it = fns_.find(op);
  return it == fns_.end() ? nullptr : &it->second;
}

std::vector<std::string> Registry::ops() const {
  std::vector<std::string> out;
  out.reserve(fns_.size());
  for (const auto& [name, fn] : fns_) out.push_back(name);
  return out;
}

}  // namespace torch_tpu::lowering
