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

namespace {

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// "tensor<2x7xf32>" → ({2, 7}, "f32"); rank 0: ({}, "f32").
std::pair<std::vector<std::string>, std::string> dims_of(const std::string& type) {
  auto open = type.find('<'), close = type.rfind('>');
  std::string inner = open == std::string::npos ? type : type.substr(open + 1, close - open - 1);
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t x; (x = inner.find('x', start)) != std::string::npos; start = x + 1)
    parts.push_back(inner.substr(start, x - start));
  return {parts, inner.substr(start)};
}

// "dimension 1 of input 0 (7 became 9)" when `was` and `now` differ in one
// dimension only, else "".
std::string changed_dimension(const std::string& was, const std::string& now,
                              const std::string& what) {
  auto [a, ta] = dims_of(was);
  auto [b, tb] = dims_of(now);
  if (ta != tb || a.size() != b.size()) return {};
  int dim = -1;
  for (size_t d = 0; d < a.size(); ++d) {
    if (a[d] == b[d]) continue;
    if (dim >= 0) return {};
    dim = static_cast<int>(d);
  }
  if (dim < 0) return {};
  return "dimension " + std::to_string(dim) + " of " + what + " (" + a[dim] + " became " +
         b[dim] + ")";
}

}  // namespace

std::string RecompileWatcher::describe_change(const std::string& previous,
                                              const std::string& signature) {
  auto a = previous.find('|'), b = signature.find('|');
  if (previous.compare(0, a, signature, 0, b) == 0)
    return previous.compare(a, std::string::npos, signature, b, std::string::npos) == 0
               ? "the program changed"
               : "the recorded op sequence changed";
  std::vector<std::string> was = words(previous.substr(0, a)), now = words(signature.substr(0, b));
  if (was.size() != now.size()) return "the number of inputs and results changed";
  std::string changes, dimension;
  int changed = 0, input = 0, result = -1;
  for (size_t i = 0; i < was.size(); ++i) {
    if (was[i] == "->") {
      result = 0;
      continue;
    }
    std::string what = result < 0 ? "input " + std::to_string(input++)
                                  : "result " + std::to_string(result++);
    if (was[i] == now[i]) continue;
    if (dimension.empty()) dimension = changed_dimension(was[i], now[i], what);
    if (++changed <= 3) changes += (changes.empty() ? "" : ", ") + was[i] + " became " + now[i];
  }
  if (changed > 3) changes += " and " + std::to_string(changed - 3) + " more";
  return "tensor types changed (" + changes + ")" +
         (dimension.empty() ? "" : "; the size that varies is " + dimension);
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
  if (count != kWarnAtRun) return {};
  // Once per site (line), whichever of its programs (first ops) got there
  // first: a marker entry under the bare site, a key no program has (theirs
  // are "site first_op").
  Site& line = sites_[site + "\n"];
  if (line.runs++ > 0) return {};
  return "torch_tpu: " + site + " has compiled new programs on " + std::to_string(count) +
         " runs (" + std::to_string(at.programs) + " programs); " +
         describe_change(previous, signature) +
         ". For a size that varies, torch.compile(backend=\"tpu\") with "
         "torch.tpu.mark_dynamic(t, dim, lower, upper) compiles one program per bucket of sizes "
         "(this warning comes once per site).";
}

}  // namespace torch_tpu::engine
