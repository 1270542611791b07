#include "bf16_dots.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string_view>
#include <vector>

#include "../../hlo/builder.h"
#include "hlo_dots.h"

namespace torch_tpu::engine::xla_cpu {

namespace {

std::atomic<int64_t> g_fallbacks{0}, g_partial{0};

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

pjrt::ExecutablePtr compile_checked(const pjrt::Client& client, const std::string& mlir,
                                    bool quick, const pjrt::CompileOverrides& overrides) {
  pjrt::ExecutablePtr exe = client.compile(mlir, quick, overrides);
  if (mlir.find(hlo::kBf16SplitMarker) == std::string::npos) return exe;
  // XLA:CPU runs a bf16 x bf16 -> f32 dot in its bf16 gemm only in the forms
  // check_bf16_dots accepts, and which form a dot ends up in depends on the
  // whole optimized program. The groups of the dots outside those forms are
  // compiled again in f32; that can move other dots, so it is checked again
  // (a few rounds), and anything unreadable falls back to f32 throughout.
  std::set<int64_t> f32;
  std::map<std::array<int64_t, 3>, std::vector<int64_t>> signatures;
  for (int round = 0; round < 3; ++round) {
    pjrt::Executable::Program program = exe->optimized_program();
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
      if (round > 0) ++g_partial;
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
    exe = client.compile(with_f32_groups(mlir, f32, /*all=*/false), quick, overrides);
  }
  ++g_fallbacks;
  return client.compile(with_f32_groups(mlir, {}, /*all=*/true), quick, overrides);
}


Bf16SplitStats bf16_split_stats() { return {g_fallbacks.load(), g_partial.load()}; }

}  // namespace torch_tpu::engine::xla_cpu
