// Operators that fill gaps of the OpInfo sweep without a family of their own:
// hash_tensor here, and (through register_linalg_lstsq) geqrf and linalg_lstsq.
#include "helpers.h"

namespace torch_tpu::lowering {

void register_linalg_lstsq(Registry& r);  // linalg_lstsq.cc

namespace {

// The 64-bit pattern CPU hashes: floats widened to f64, integers and bools
// to i64 (sign-extended), then reinterpreted as u64.
Value as_u64(Builder& b, Value x) {
  TensorType u64{ElementType::kU64, x.shape()};
  if (x.dtype() == ElementType::kU64) return x;
  if (hlo::is_float(x.dtype()))
    return b.bitcast_convert(b.convert(x, ElementType::kF64), u64);
  if (x.dtype() == ElementType::kPred || x.dtype() == ElementType::kU8 ||
      x.dtype() == ElementType::kU16 || x.dtype() == ElementType::kU32)
    return b.convert(x, ElementType::kU64);
  return b.bitcast_convert(b.convert(x, ElementType::kI64), u64);
}

// hash_tensor(self, dim, keepdim, mode): xor of the elements' u64 patterns
// over `dim` (all dims when empty); mode 0 is the only mode.
Values hash_tensor(Context& c, const Args& a) {
  if (a[3].i != 0) throw Unsupported(c.op + " mode " + std::to_string(a[3].i));
  Value x = a[0].tensor;
  if (hlo::is_complex(x.dtype())) throw Unsupported(c.op + " of a complex tensor");
  std::vector<int64_t> dims = a[1].ints;
  if (dims.empty()) {
    for (int64_t d = 0; d < x.rank(); ++d) dims.push_back(d);
  }
  dims = wrap_dims(dims, x.rank());
  if (x.rank() == 0) dims.clear();
  Value u = as_u64(c.b, x);
  Value zero = c.b.constant(ElementType::kU64, 0);
  Value h = c.b.reduce({u}, {zero}, dims, [](Builder& w, const Values& s) {
    return Values{w.xor_(s[0], s[1])};
  })[0];
  return {c.b.reshape(h, c.out().shape)};
}

}  // namespace

void register_ops_gaps(Registry& r) {
  r.add("aten::hash_tensor", hash_tensor);
  register_linalg_lstsq(r);
}

}  // namespace torch_tpu::lowering
