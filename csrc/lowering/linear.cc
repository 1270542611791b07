// A linear layer as one op each way: aten::linear (x·wᵀ + b) and
// aten::linear_backward (the input, weight and bias gradients together),
// which tpu's autograd kernel for linear calls (aten/linear_ops.cc). PyTorch
// would run linear as addmm or matmul and its backward as two matmuls and a
// sum; here a Strict Eager step launches one program for each, and Fused
// Eager records one op. Numerics are the matmuls': TPU numerics at the op's
// precision (precise_dot), 16-bit products kept f32 until the bias is added
// and rounded once (as addmm), sums in f32.
#include "helpers.h"
#include "precision.h"

namespace torch_tpu::lowering {
namespace {

std::vector<int64_t> leading(int64_t rank) {
  std::vector<int64_t> dims;
  for (int64_t i = 0; i + 1 < rank; ++i) dims.push_back(i);
  return dims;
}

// (input [..., in], weight [out, in], bias [out]?) → [..., out]
Values linear(Context& c, const Args& a) {
  Builder& b = c.b;
  const TensorType& out = c.out();
  Value x = b.convert(a[0].tensor, out.dtype);
  Value w = b.convert(a[1].tensor, out.dtype);
  const int64_t rank = static_cast<int64_t>(x.shape().size());
  Value p = precise_dot(c, x, w, {{}, {}, {rank - 1}, {1}}, /*keep_f32=*/true);
  if (!a[2].none()) p = b.add(p, b.broadcast_to(b.convert(a[2].tensor, p.dtype()), p.shape()));
  return {b.convert(p, out.dtype)};
}

// (input [..., in], grad_output [..., out], weight [out, in], output_mask[3])
// → the requested of grad_input [..., in], grad_weight [out, in], grad_bias [out].
Values linear_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a[0].tensor, g = a[1].tensor, w = a[2].tensor;
  const std::vector<bool>& mask = a[3].bools;
  const int64_t rank = static_cast<int64_t>(g.shape().size());
  Values grads;
  size_t next = 0;
  if (mask.at(0)) {
    Value gi = precise_dot(c, g, b.convert(w, g.dtype()), {{}, {}, {rank - 1}, {0}});
    grads.push_back(b.convert(gi, c.out(next++).dtype));
  }
  if (mask.at(1)) {
    // Σ over every leading dimension of gᵀ·x: [out, in].
    const std::vector<int64_t> batch = leading(rank);
    Value gw = precise_dot(c, g, b.convert(x, g.dtype()), {{}, {}, batch, batch});
    grads.push_back(b.convert(gw, c.out(next++).dtype));
  }
  if (mask.at(2)) {
    const ElementType t = g.dtype();
    const bool half = t == ElementType::kBF16 || t == ElementType::kF16;
    Value gb = reduce_sum(b, b.convert(g, half ? ElementType::kF32 : t), leading(rank));
    grads.push_back(b.convert(gb, c.out(next++).dtype));
  }
  return grads;
}

}  // namespace

void register_linear(Registry& r) {
  r.add("aten::linear", linear);
  r.add("aten::linear_backward", linear_backward);
}

}  // namespace torch_tpu::lowering
