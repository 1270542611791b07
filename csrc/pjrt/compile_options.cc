#include "compile_options.h"

#include <cstring>
#include <stdexcept>

namespace torch_tpu::pjrt {

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

void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | 2u);  // wire type 2
  put_varint(out, bytes.size());
  out += bytes;
}

namespace {

// ExecutionOptions.EffortLevel of "O0".."O3"; -1 for anything else.
int effort_level(const OptionValue& value) {
  const std::string* s = std::get_if<std::string>(&value);
  if (!s || s->size() != 2 || (*s)[0] != 'O' || (*s)[1] < '0' || (*s)[1] > '3') return -1;
  return 9 + 10 * ((*s)[1] - '0');  // EFFORT_O0 = 9, O1 = 19, O2 = 29, O3 = 39
}

bool is_effort_option(const std::string& name) {
  return name == CompileOverrides::kOptimizationLevel ||
         name == CompileOverrides::kMemoryFittingLevel;
}

std::string describe(const OptionValue& v) {
  switch (v.index()) {
    case 0: return "s:" + std::get<std::string>(v);
    case 1: return std::get<bool>(v) ? "b:1" : "b:0";
    case 2: return "i:" + std::to_string(std::get<int64_t>(v));
    default: {
      double d = std::get<double>(v);
      uint64_t bits;
      std::memcpy(&bits, &d, sizeof(bits));  // exact, whatever the locale
      return "d:" + std::to_string(bits);
    }
  }
}

}  // namespace

void CompileOverrides::set(const std::string& name, OptionValue value) {
  if (name.empty()) throw std::invalid_argument("a compiler option name is empty");
  if (is_effort_option(name) && effort_level(value) < 0)
    throw std::invalid_argument("compiler option '" + name +
                                "' takes one of 'O0', 'O1', 'O2', 'O3'");
  values_[name] = std::move(value);
  text_.clear();
  for (const auto& [n, v] : values_) text_ += n + "=" + describe(v) + "\n";
}

std::string CompileOverrides::encode() const {
  // CompileOptionsProto: executable_build_options = 3 (optimization_level =
  // 24, memory_fitting_level = 25), env_option_overrides = 7: map<string,
  // OptionOverrideProto> (an entry is key = 1, value = 2; the value is one of
  // string_field = 1, bool_field = 2, int_field = 3, double_field = 4).
  std::string out, build;
  for (const auto& [name, value] : values_) {
    if (is_effort_option(name)) {
      put_int_field(build, name == kOptimizationLevel ? 24 : 25, effort_level(value));
      continue;
    }
    std::string v, entry;
    switch (value.index()) {
      case 0: put_bytes_field(v, 1, std::get<std::string>(value)); break;
      case 1: put_int_field(v, 2, std::get<bool>(value) ? 1 : 0); break;
      case 2: put_int_field(v, 3, std::get<int64_t>(value)); break;
      default: {
        double d = std::get<double>(value);
        uint64_t bits;
        std::memcpy(&bits, &d, sizeof(bits));
        put_varint(v, (4u << 3) | 1u);  // wire type 1: 64-bit little-endian
        for (int i = 0; i < 8; ++i) v.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
      }
    }
    put_bytes_field(entry, 1, name);
    put_bytes_field(entry, 2, v);
    put_bytes_field(out, 7, entry);
  }
  if (!build.empty()) put_bytes_field(out, 3, build);
  return out;
}

}  // namespace torch_tpu::pjrt
