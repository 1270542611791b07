#include "recompile_watcher.h"

#include <sstream>
#include <utility>

namespace torch_tpu::engine {

std::string RecompileWatcher::signature(const hlo::Builder& b, const std::vector<OpSite>& ops) {
  std::string s;
  for (const hlo::Value& p : b.parameters()) s += p.type().str() + " ";
  s += "->";
  for (const hlo::Value& r : b.results()) s += " " + r.type().str();
  s += " |";
  for (const OpSite& op : ops) s += std::string(op.op) + " ";
  return s;
}

std::string RecompileWatcher::describe_change(const std::string& previous,
                                              const std::string& signature) {
  auto a = previous.find('|'), b = signature.find('|');
  if (previous.compare(0, a, signature, 0, b) == 0)
    return previous.compare(a, std::string::npos, signature, b, std::string::npos) == 0
               ? "the program changed"
               : "the recorded op sequence changed";
  auto words = [](const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string w; in >> w;) out.push_back(w);
    return out;
  };
  std::vector<std::string> was = words(previous.substr(0, a)), now = words(signature.substr(0, b));
  if (was.size() != now.size()) return "the number of inputs and results changed";
  std::string changes;
  int changed = 0;
  for (size_t i = 0; i < was.size(); ++i) {
    if (was[i] == now[i]) continue;
    if (++changed <= 3) changes += (changes.empty() ? "" : ", ") + was[i] + " became " + now[i];
  }
  if (changed > 3) changes += " and " + std::to_string(changed - 3) + " more";
  return "tensor types changed (" + changes + ")";
}

bool RecompileWatcher::reshaped(const std::string& site, const char* first_op,
                                const std::string& signature) const {
  auto it = sites_.find(key(site, first_op));
  if (it == sites_.end() || it->second.programs == 0 || it->second.last_run == run_.load())
    return false;
  const std::string& previous = it->second.signature;
  auto a = previous.find('|'), b = signature.find('|');
  return a != std::string::npos && b != std::string::npos &&
         previous.compare(a, std::string::npos, signature, b, std::string::npos) == 0;
}

std::string RecompileWatcher::note(const std::string& site, const char* first_op,
                                   const std::string& signature) {
  Site& at = sites_[key(site, first_op)];
  ++at.programs;
  std::string previous = std::exchange(at.signature, signature);
  uint64_t run = run_.load();
  if (at.last_run == run) return {};
  at.last_run = run;
  int count = ++at.runs;
  if (count < 4 || (count & (count - 1)) != 0) return {};  // 4, 8, 16, ...
  return "torch_tpu: " + site + " has compiled new programs on " + std::to_string(count) +
         " runs (" + std::to_string(at.programs) + " programs); " +
         describe_change(previous, signature) +
         ". Stable shapes and dtypes (or Fused Eager / torch.compile) avoid recompiling.";
}

}  // namespace torch_tpu::engine
