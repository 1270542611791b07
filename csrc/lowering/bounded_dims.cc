// Bounded dynamic dimensions (torch.compile over bucketed sizes, see
// torch_tpu/dynamic_shapes.py). A graph compiled for a bucket takes its
// inputs padded to the bucket's size; on entry each varying dimension gets
// its true length (`tpu::_bounded_dim`: stablehlo.set_dimension_size), and
// XLA's dynamic padder then masks every reduction, dot and softmax over it,
// so one program serves every length up to the bound. Printed types stay
// static: XLA infers the bound from the operands. Before a result leaves the
// program `tpu::_static_dim` makes it static again (an identity gather over
// the padded size: a program's results cannot be dynamic, since XLA:CPU
// appends their sizes to the buffer), the valid elements at the front of
// each dimension and the rest undefined.
#include "helpers.h"

namespace torch_tpu::lowering {

namespace {

using hlo::ElementType;
using hlo::TensorType;
using hlo::Value;
using hlo::Values;

Values bounded_dim(Context& c, const Args& a) {
  Value x = a[0].tensor;
  int64_t dim = a[2].i;
  if (dim < 0 || dim >= x.rank())
    throw Unsupported("tpu::_bounded_dim: dim " + std::to_string(dim) + " out of range");
  Value size = c.b.convert(a[1].tensor, ElementType::kI32);
  if (size.rank() != 0) throw Unsupported("tpu::_bounded_dim: the size must be a 0-d tensor");
  return c.b.op("stablehlo.set_dimension_size", {x, size}, {x.type()},
                "{dimension = " + std::to_string(dim) + " : i64}");
}

Values static_dim(Context& c, const Args& a) {
  Value x = a[0].tensor;
  int64_t dim = a[1].i, r = x.rank();
  if (dim < 0 || dim >= r)
    throw Unsupported("tpu::_static_dim: dim " + std::to_string(dim) + " out of range");
  if (x.type().numel() == 0) return {x};
  hlo::GatherDims g;
  for (int64_t d = 0; d < r; ++d)
    if (d != dim) g.offset_dims.push_back(d);
  g.collapsed_slice_dims = g.start_index_map = {dim};
  g.index_vector_dim = 1;
  std::vector<int64_t> slice = x.shape();
  slice[dim] = 1;
  Value idx = c.b.iota({ElementType::kI32, {x.dim(dim), 1}}, 0);
  return {c.b.gather(x, idx, g, slice, x.type(), /*indices_are_sorted=*/true)};
}

}  // namespace

void register_bounded_dims(Registry& r) {
  r.add("tpu::_bounded_dim", bounded_dim);
  r.add("tpu::_static_dim", static_dim);
}

}  // namespace torch_tpu::lowering
