// Element and tensor types of StableHLO values, and their MLIR spelling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torch_tpu::hlo {

enum class ElementType : uint8_t {
  kPred, kI8, kI16, kI32, kI64, kU8, kU16, kU32, kU64,
  kF16, kBF16, kF32, kF64, kC64, kC128,
};

bool is_float(ElementType t);     // f16, bf16, f32, f64
bool is_complex(ElementType t);   // complex<f32>, complex<f64>
bool is_integer(ElementType t);   // signed or unsigned, not pred
bool is_unsigned(ElementType t);  // u8..u64
int bit_width(ElementType t);     // pred counts as 8 (its storage)
const char* mlir_name(ElementType t);  // "f32", "i1", "ui8", "complex<f32>"

// A ranked tensor type; rank 0 is a scalar.
struct TensorType {
  ElementType dtype = ElementType::kF32;
  std::vector<int64_t> shape;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const;
  std::string str() const;  // "tensor<2x3xf32>"
  bool operator==(const TensorType& o) const { return dtype == o.dtype && shape == o.shape; }
  bool operator!=(const TensorType& o) const { return !(*this == o); }
};

// The canonical copy of `t`: equal types share one address for the life of
// the process, so a builder stores and compares types as pointers.
const TensorType* intern(const TensorType& t);

// Raised for an op whose operands do not type-check: a bug in a lowering or
// a shape the caller failed to validate, never a crash.
struct TypeError : std::exception {
  explicit TypeError(std::string m) : message(std::move(m)) {}
  const char* what() const noexcept override { return message.c_str(); }
  std::string message;
};

}  // namespace torch_tpu::hlo
