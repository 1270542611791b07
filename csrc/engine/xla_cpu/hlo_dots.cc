#include "hlo_dots.h"

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch_tpu::engine::xla_cpu {
namespace {

// A minimal protobuf wire-format reader: the few HloModuleProto fields read
// here, by number (xla/service/hlo.proto, xla/xla_data.proto).
struct Field {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t value = 0;     // varint
  std::string_view bytes; // length-delimited
};

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}
  bool done() const { return i_ >= s_.size(); }
  bool ok() const { return ok_; }

  bool next(Field& f) {
    if (done() || !ok_) return false;
    uint64_t key;
    if (!varint(key)) return fail();
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = key & 7;
    f.bytes = {};
    switch (f.wire) {
      case 0: return varint(f.value) || fail();
      case 1: return skip(8);
      case 5: return skip(4);
      case 2: {
        uint64_t n;
        if (!varint(n) || n > s_.size() - i_) return fail();
        f.bytes = s_.substr(i_, n);
        i_ += n;
        return true;
      }
      default: return fail();
    }
  }

  bool varint(uint64_t& out) {
    out = 0;
    for (int shift = 0; shift < 64 && i_ < s_.size(); shift += 7) {
      uint8_t c = static_cast<uint8_t>(s_[i_++]);
      out |= static_cast<uint64_t>(c & 0x7f) << shift;
      if (c < 0x80) return true;
    }
    return false;
  }

 private:
  bool skip(size_t n) {
    if (n > s_.size() - i_) return fail();
    i_ += n;
    return true;
  }
  bool fail() {
    ok_ = false;
    return false;
  }
  std::string_view s_;
  size_t i_ = 0;
  bool ok_ = true;
};

// A repeated int64 field: packed or one value per occurrence.
bool add_ints(const Field& f, std::vector<int64_t>& out) {
  if (f.wire == 0) {
    out.push_back(static_cast<int64_t>(f.value));
    return true;
  }
  if (f.wire != 2) return false;
  Reader r(f.bytes);
  while (!r.done()) {
    uint64_t v;
    if (!r.varint(v)) return false;
    out.push_back(static_cast<int64_t>(v));
  }
  return true;
}

constexpr int64_t kF32 = 11, kBF16 = 16;  // xla.PrimitiveType

struct Shape {
  int64_t element_type = 0;
  std::vector<int64_t> dims, minor_to_major;
  bool tuple = false;
};

bool parse_shape(std::string_view bytes, Shape& s) {
  Reader r(bytes);
  Field f;
  while (r.next(f)) {
    if (f.number == 2 && f.wire == 0) s.element_type = static_cast<int64_t>(f.value);
    else if (f.number == 3 && !add_ints(f, s.dims)) return false;
    else if (f.number == 4) s.tuple = true;
    else if (f.number == 5 && f.wire == 2) {
      Reader l(f.bytes);
      Field g;
      while (l.next(g))
        if (g.number == 1 && !add_ints(g, s.minor_to_major)) return false;
      if (!l.ok()) return false;
    }
  }
  return r.ok();
}

struct Dims {
  std::vector<int64_t> lhs_contract, rhs_contract, lhs_batch, rhs_batch;
};

struct Instruction {
  bool dot = false;
  std::string_view op_name;  // metadata: the StableHLO op's loc("...") name
  Shape shape;
  std::vector<int64_t> operands;
  Dims dims;
};

bool parse_instruction(std::string_view bytes, int64_t& id, Instruction& ins) {
  Reader r(bytes);
  Field f;
  bool has_id = false;
  while (r.next(f)) {
    switch (f.number) {
      case 2: ins.dot = f.wire == 2 && f.bytes == "dot"; break;
      case 3: if (f.wire != 2 || !parse_shape(f.bytes, ins.shape)) return false; break;
      case 7: {  // OpMetadata
        if (f.wire != 2) return false;
        Reader m(f.bytes);
        Field g;
        while (m.next(g))
          if (g.number == 2 && g.wire == 2) ins.op_name = g.bytes;
        if (!m.ok()) return false;
        break;
      }
      case 30: {
        if (f.wire != 2) return false;
        Reader d(f.bytes);
        Field g;
        while (d.next(g)) {
          std::vector<int64_t>* out = g.number == 1 ? &ins.dims.lhs_contract
                                    : g.number == 2 ? &ins.dims.rhs_contract
                                    : g.number == 3 ? &ins.dims.lhs_batch
                                    : g.number == 4 ? &ins.dims.rhs_batch : nullptr;
          if (out != nullptr && !add_ints(g, *out)) return false;
        }
        if (!d.ok()) return false;
        break;
      }
      case 35: if (f.wire != 0) return false; id = static_cast<int64_t>(f.value); has_id = true; break;
      case 36: if (!add_ints(f, ins.operands)) return false; break;
      default: break;
    }
  }
  return r.ok() && has_id;
}

bool row_major(const Shape& s) {
  if (s.tuple) return false;
  if (s.minor_to_major.empty()) return true;
  int64_t rank = static_cast<int64_t>(s.dims.size());
  if (static_cast<int64_t>(s.minor_to_major.size()) != rank) return false;
  for (int64_t i = 0; i < rank; ++i)
    if (s.minor_to_major[i] != rank - 1 - i) return false;
  return true;
}

bool leading(const std::vector<int64_t>& dims) {
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != static_cast<int64_t>(i)) return false;
  return true;
}

int64_t elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s.dims) n *= d;
  return n;
}

bool gemm_form(const Instruction& dot, const Shape& lhs, const Shape& rhs) {
  const Dims& d = dot.dims;
  int64_t nb = static_cast<int64_t>(d.lhs_batch.size());
  if (d.lhs_contract.size() != 1 || d.rhs_contract.size() != 1) return false;
  if (d.rhs_batch.size() != d.lhs_batch.size() || !leading(d.lhs_batch) || !leading(d.rhs_batch))
    return false;
  if (static_cast<int64_t>(lhs.dims.size()) != nb + 2 ||
      static_cast<int64_t>(rhs.dims.size()) != nb + 2 ||
      static_cast<int64_t>(dot.shape.dims.size()) != nb + 2)
    return false;
  if (d.lhs_contract[0] != nb + 1) return false;  // lhs [batch..., m, k]
  int64_t rc = d.rhs_contract[0];
  if (rc != nb && rc != nb + 1) return false;      // rhs [batch..., k, n] or [batch..., n, k]
  if (!row_major(lhs) || !row_major(rhs) || !row_major(dot.shape)) return false;
  int64_t m = lhs.dims[nb], n = rhs.dims[rc == nb ? nb + 1 : nb];
  return !(nb > 0 && m == 1 && n == 1);
}

}  // namespace

Bf16DotCheck check_bf16_dots(std::string_view format, std::string_view code) {
  Bf16DotCheck out;
  std::string_view module_bytes = code;
  if (format == "hlo_with_config") {  // HloModuleProtoWithConfig: hlo_module = 1
    module_bytes = {};
    Reader r(code);
    Field f;
    while (r.next(f))
      if (f.number == 1 && f.wire == 2) module_bytes = f.bytes;
    if (!r.ok()) return out;
  } else if (format != "hlo") {
    return out;
  }
  std::unordered_map<int64_t, Instruction> all;
  std::vector<int64_t> dots;
  Reader module(module_bytes);
  Field f;
  while (module.next(f)) {
    if (f.number != 3 || f.wire != 2) continue;  // computations
    Reader computation(f.bytes);
    Field g;
    while (computation.next(g)) {
      if (g.number != 2 || g.wire != 2) continue;  // instructions
      int64_t id = 0;
      Instruction ins;
      if (!parse_instruction(g.bytes, id, ins)) return out;
      if (ins.dot) dots.push_back(id);
      all.emplace(id, std::move(ins));
    }
    if (!computation.ok()) return out;
  }
  if (!module.ok() || all.empty()) return out;
  for (int64_t id : dots) {
    const Instruction& dot = all.at(id);
    if (dot.operands.size() != 2) return out;
    auto lhs = all.find(dot.operands[0]), rhs = all.find(dot.operands[1]);
    if (lhs == all.end() || rhs == all.end()) return out;
    const Shape &l = lhs->second.shape, &r = rhs->second.shape;
    bool lb = l.element_type == kBF16, rb = r.element_type == kBF16;
    bool mixed = lb && rb && dot.shape.element_type == kF32;
    if ((mixed && !gemm_form(dot, l, r)) || lb != rb)
      out.unsafe.push_back({std::string(dot.op_name), elements(dot.shape), elements(l),
                            elements(r)});
  }
  out.read = true;
  return out;
}

}  // namespace torch_tpu::engine::xla_cpu
