#include "types.h"

#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace torch_tpu::hlo {

bool is_float(ElementType t) {
  return t == ElementType::kF16 || t == ElementType::kBF16 ||
         t == ElementType::kF32 || t == ElementType::kF64;
}
bool is_complex(ElementType t) {
  return t == ElementType::kC64 || t == ElementType::kC128;
}
bool is_unsigned(ElementType t) {
  return t == ElementType::kU8 || t == ElementType::kU16 ||
         t == ElementType::kU32 || t == ElementType::kU64;
}
bool is_integer(ElementType t) {
  return is_unsigned(t) || t == ElementType::kI8 || t == ElementType::kI16 ||
         t == ElementType::kI32 || t == ElementType::kI64;
}

int bit_width(ElementType t) {
  switch (t) {
    case ElementType::kPred: case ElementType::kI8: case ElementType::kU8: return 8;
    case ElementType::kI16: case ElementType::kU16: case ElementType::kF16:
    case ElementType::kBF16: return 16;
    case ElementType::kI32: case ElementType::kU32: case ElementType::kF32: return 32;
    case ElementType::kI64: case ElementType::kU64: case ElementType::kF64:
    case ElementType::kC64: return 64;
    case ElementType::kC128: return 128;
  }
  return 0;
}

const char* mlir_name(ElementType t) {
  switch (t) {
    case ElementType::kPred: return "i1";
    case ElementType::kI8: return "i8";
    case ElementType::kI16: return "i16";
    case ElementType::kI32: return "i32";
    case ElementType::kI64: return "i64";
    case ElementType::kU8: return "ui8";
    case ElementType::kU16: return "ui16";
    case ElementType::kU32: return "ui32";
    case ElementType::kU64: return "ui64";
    case ElementType::kF16: return "f16";
    case ElementType::kBF16: return "bf16";
    case ElementType::kF32: return "f32";
    case ElementType::kF64: return "f64";
    case ElementType::kC64: return "complex<f32>";
    case ElementType::kC128: return "complex<f64>";
  }
  return "?";
}

int64_t TensorType::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorType::str() const {
  std::string s = "tensor<";
  for (int64_t d : shape) {
    s += std::to_string(d);
    s += 'x';
  }
  s += mlir_name(dtype);
  s += '>';
  return s;
}

namespace {
struct TypeHash {
  size_t operator()(const TensorType& t) const {
    uint64_t h = static_cast<uint64_t>(t.dtype) * 0x9E3779B97F4A7C15ull;
    for (int64_t d : t.shape) h = (h ^ static_cast<uint64_t>(d)) * 0x100000001B3ull;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

const TensorType* intern_shared(const TensorType& t) {
  static std::mutex mu;
  static std::unordered_set<TensorType, TypeHash> table;  // node-based: stable addresses
  std::lock_guard<std::mutex> lock(mu);
  return &*table.insert(t).first;
}
}  // namespace

const TensorType* intern(const TensorType& t) {
  // Each thread remembers what it interned: the shared table's lock is taken
  // once per new type and thread.
  thread_local std::unordered_map<TensorType, const TensorType*, TypeHash> known;
  auto it = known.find(t);
  if (it != known.end()) return it->second;
  const TensorType* canonical = intern_shared(t);
  known.emplace(t, canonical);
  return canonical;
}

}  // namespace torch_tpu::hlo
