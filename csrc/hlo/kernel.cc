#include "kernel.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <map>
#include <regex>

namespace torch_tpu::hlo {

namespace {

bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.' ||
         c == '-';
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// The index just past the bracket that closes the one at `open`.
size_t matching(std::string_view s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    char c = s[i];
    if (c == '"') {  // skip string literals (attribute values)
      for (++i; i < s.size() && s[i] != '"'; ++i)
        if (s[i] == '\\') ++i;
      continue;
    }
    if (c == '(' || c == '{' || c == '[' || c == '<') ++depth;
    if (c == ')' || c == '}' || c == ']' || c == '>') {
      if (c == '>' && i > 0 && s[i - 1] == '-') continue;  // "->"
      if (--depth == 0) return i + 1;
    }
  }
  throw TypeError("unbalanced brackets in the kernel's text");
}

// Splits at the commas outside brackets.
std::vector<std::string> split_top(std::string_view s) {
  std::vector<std::string> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '"') {
      for (++i; i < s.size() && s[i] != '"'; ++i)
        if (s[i] == '\\') ++i;
      continue;
    }
    if (c == '(' || c == '{' || c == '[' || c == '<') ++depth;
    if ((c == ')' || c == '}' || c == ']' || c == '>') && !(c == '>' && i > 0 && s[i - 1] == '-'))
      --depth;
    if (c == ',' && depth == 0) {
      out.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  std::string last = trim(s.substr(start));
  if (!last.empty()) out.push_back(last);
  return out;
}

// "tensor<...>" at the start of `s` (after an optional "%name:"), attributes
// after it ignored.
TensorType type_of_entry(std::string_view item) {
  std::string s = trim(item);
  if (!s.empty() && s[0] == '%') {
    size_t colon = s.find(':');
    if (colon == std::string::npos) throw TypeError("cannot read the parameter '" + s + "'");
    s = trim(std::string_view(s).substr(colon + 1));
  }
  if (s.rfind("tensor<", 0) != 0)
    throw TypeError("a kernel's parameters and results are tensors, not '" + s + "'");
  size_t end = matching(s, 6);
  return parse_tensor_type(std::string_view(s).substr(0, end));
}

const std::map<std::string, ElementType>& element_types() {
  static const std::map<std::string, ElementType> m = [] {
    std::map<std::string, ElementType> out;
    for (int i = 0; i <= static_cast<int>(ElementType::kC128); ++i) {
      auto t = static_cast<ElementType>(i);
      out[mlir_name(t)] = t;
    }
    return out;
  }();
  return m;
}

}  // namespace

TensorType parse_tensor_type(std::string_view text) {
  std::string s = trim(text);
  if (s.rfind("tensor<", 0) != 0 || s.back() != '>')
    throw TypeError("not a tensor type: '" + s + "'");
  std::string body = s.substr(7, s.size() - 8);
  TensorType t;
  size_t pos = 0;
  while (true) {
    size_t x = body.find('x', pos);
    std::string dim = body.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    if (x == std::string::npos || dim.empty() ||
        !std::all_of(dim.begin(), dim.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      if (dim == "?" )
        throw TypeError("'" + s + "' has a dynamic dimension: a kernel's types must be static");
      break;
    }
    t.shape.push_back(std::stoll(dim));
    pos = x + 1;
  }
  std::string element = body.substr(pos);
  auto it = element_types().find(element);
  if (it == element_types().end())
    throw TypeError("'" + s + "': element type '" + element + "' is not one tpu tensors hold");
  t.dtype = it->second;
  return t;
}

std::shared_ptr<const Kernel> Kernel::parse(std::string_view text) {
  std::string src(text);
  // The module's body: from its first function to the module's closing brace.
  size_t first = src.find("func.func");
  if (first == std::string::npos)
    throw TypeError("the kernel's text defines no func.func: give an MLIR module or function");
  std::string body = src.substr(first);
  if (trim(std::string_view(src).substr(0, first)).rfind("module", 0) == 0) {
    size_t close = body.rfind('}');
    if (close == std::string::npos) throw TypeError("the kernel's module is not closed");
    body = body.substr(0, close);
  }

  // Its functions: name, visibility, where the signature starts.
  static const std::regex def(R"(func\.func\s+(public\s+|private\s+|nested\s+)?@([A-Za-z_$.][\w$.\-]*))");
  struct Fn {
    std::string name;
    bool is_public;
    size_t signature;  // index of '(' in body
  };
  std::vector<Fn> fns;
  for (auto m = std::sregex_iterator(body.begin(), body.end(), def); m != std::sregex_iterator(); ++m) {
    std::string vis = trim((*m)[1].str());
    fns.push_back(Fn{(*m)[2].str(), vis.empty() || vis == "public",
                     static_cast<size_t>(m->position(0) + m->length(0))});
  }
  const Fn* entry = nullptr;
  for (const Fn& f : fns)
    if (f.name == "main") entry = &f;
  if (!entry) {
    for (const Fn& f : fns) {
      if (!f.is_public) continue;
      if (entry)
        throw TypeError("the kernel has several public functions (@" + entry->name + ", @" +
                        f.name + "): name its entry @main");
      entry = &f;
    }
  }
  if (!entry) throw TypeError("the kernel has no @main and no public function to call");

  auto k = std::make_shared<Kernel>();
  // The signature: "(%a: tensor<..> {attrs}, ...) -> (tensor<..> {attrs}, ...)".
  size_t open = body.find('(', entry->signature);
  size_t close = matching(body, open);
  for (const std::string& p : split_top(std::string_view(body).substr(open + 1, close - open - 2)))
    k->parameters.push_back(type_of_entry(p));
  size_t arrow = body.find_first_not_of(" \t\n", close);
  if (arrow != std::string::npos && body.compare(arrow, 2, "->") == 0) {
    size_t r = body.find_first_not_of(" \t\n", arrow + 2);
    if (body[r] == '(') {
      size_t rclose = matching(body, r);
      for (const std::string& item : split_top(std::string_view(body).substr(r + 1, rclose - r - 2)))
        k->results.push_back(type_of_entry(item));
    } else {
      k->results.push_back(type_of_entry(std::string_view(body).substr(r, matching(body, r + 6) - r)));
    }
  }
  if (k->results.empty()) throw TypeError("the kernel's entry @" + entry->name + " returns nothing");

  // Renamed apart: a prefix from the text's digest, the same in every
  // process (the disk cache is keyed by the program's text).
  char prefix[32];
  std::snprintf(prefix, sizeof(prefix), "tt_kernel_%016zx_",
                std::hash<std::string_view>{}(text));
  std::string out;
  out.reserve(body.size() + 64 * fns.size());
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '@') {
      size_t j = i + 1;
      while (j < body.size() && ident_char(body[j])) ++j;
      std::string name = body.substr(i + 1, j - i - 1);
      bool defined = std::any_of(fns.begin(), fns.end(), [&](const Fn& f) { return f.name == name; });
      out += '@';
      if (defined) out += prefix;
      out += name;
      i = j - 1;
      continue;
    }
    out += body[i];
  }
  // Every function private: only the program calls them.
  static const std::regex vis(R"(func\.func\s+(public\s+|private\s+|nested\s+)?@)");
  k->functions = std::regex_replace(out, vis, "func.func private @");
  k->entry = prefix + entry->name;
  return k;
}

}  // namespace torch_tpu::hlo
