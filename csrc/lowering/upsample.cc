// Interpolation, forward and backward: nearest, nearest-exact and (bi/tri)
// linear upsampling over 1-3 spatial dims. Each spatial dim is resampled on
// its own: source indices and weights are computed on device with the
// arithmetic (and float type) of PyTorch's CPU kernels, the forward gathers
// along the dim and the backward scatter-adds the gradient back.
#include "conv_family.h"

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;

enum class Mode { kNearest, kNearestExact, kLinear };

// Where output positions read along one dim: one index (nearest) or two
// indices with weights (linear), each of shape [out].
struct Sampling {
  Value i0, i1, l0, l1;
};

// PyTorch computes sampling positions in float (double for double tensors).
ElementType opmath(ElementType t) {
  return t == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
}

// compute_scales_value / area_pixel_compute_scale, rounded like the C++ type.
double ratio(int64_t in, int64_t out, bool align_corners, const Arg& scale, ElementType t) {
  bool f32 = t != ElementType::kF64;
  if (align_corners) {
    if (out <= 1) return 0;
    return f32 ? static_cast<float>(in - 1) / static_cast<float>(out - 1)
               : static_cast<double>(in - 1) / static_cast<double>(out - 1);
  }
  if (!scale.none() && scale.d > 0) return f32 ? static_cast<float>(1.0 / scale.d) : 1.0 / scale.d;
  return f32 ? static_cast<float>(in) / static_cast<float>(out)
             : static_cast<double>(in) / static_cast<double>(out);
}

Value positions(Builder& b, int64_t out) {
  return b.iota(TensorType{ElementType::kI64, {out}}, 0);
}

Value index_at_most(Builder& b, Value i, int64_t last) {
  return b.min(i, b.broadcast_in_dim(b.constant_int(ElementType::kI64, last), i.shape(), {}));
}

// nearest_idx / nearest_exact_idx: floor(dst * scale) (exact: dst + 0.5).
Sampling nearest(Builder& b, int64_t in, int64_t out, const Arg& scale, bool exact) {
  Value i = positions(b, out);
  if (!exact && out == in) return {i};
  if (!exact && out == 2 * in) return {b.shift_right_arithmetic(i, splat_like(b, 1, i))};
  Value dst = b.convert(i, ElementType::kF32);
  if (exact) dst = b.add(dst, splat_like(b, 0.5, dst));
  Value r = splat_like(b, ratio(in, out, false, scale, ElementType::kF32), dst);
  return {index_at_most(b, b.convert(b.floor(b.mul(dst, r)), ElementType::kI64), in - 1)};
}

// compute_source_index_and_lambda, in type t; the weights rounded to `w`
// (CPU's generic kernel stores them in the tensor's dtype: l1 rounded, then
// l0 = 1 - l1 rounded; a no-op for f32 and f64).
Sampling linear(Builder& b, int64_t in, int64_t out, bool align_corners, const Arg& scale,
                ElementType t, ElementType w) {
  Value i = positions(b, out);
  Value one = b.full(TensorType{t, {out}}, 1), zero = b.zeros(TensorType{t, {out}});
  if (in == out) return {i, i, one, zero};
  Value dst = b.convert(i, t);
  Value r = splat_like(b, ratio(in, out, align_corners, scale, t), dst);
  Value src = align_corners ? b.mul(r, dst)
                            : b.max(b.sub(b.mul(r, b.add(dst, splat_like(b, 0.5, dst))),
                                          splat_like(b, 0.5, dst)),
                                    zero);
  Value i0 = index_at_most(b, b.convert(b.floor(src), ElementType::kI64), in - 1);
  Value l1 = round_like(b, b.clamp(zero, b.sub(src, b.convert(i0, t)), one), w);
  Value i1 = index_at_most(b, b.add(i0, splat_like(b, 1, i0)), in - 1);
  return {i0, i1, round_like(b, b.sub(one, l1), w), l1};
}

Value along(Builder& b, Value weights, Value like, int64_t dim) {
  return b.broadcast_in_dim(weights, like.shape(), {dim});
}

// g scatter-added along `dim` to the rows `index` of an `in`-long dim.
Value spread(Builder& b, Value g, int64_t dim, Value index, int64_t in) {
  std::vector<int64_t> shape = g.shape();
  shape[dim] = in;
  hlo::ScatterDims d;
  for (int64_t i = 0; i < g.rank(); ++i)
    if (i != dim) d.update_window_dims.push_back(i);
  d.inserted_window_dims = d.scatter_dims_to_operand_dims = {dim};
  d.index_vector_dim = 1;
  Value rows = b.reshape(index, {index.dim(0), 1});
  return b.scatter(b.zeros(TensorType{g.dtype(), shape}), rows, g, d,
                   [](Builder& r, const Values& v) { return Values{r.add(v[0], v[1])}; });
}

// The call's attributes: spatial extents, align_corners and scales.
struct Resize {
  std::vector<int64_t> in, out;
  bool align_corners = false;
  std::vector<Arg> scales;
};

// `w`: the dtype linear weights round to (see linear).
Sampling sampling(Builder& b, const Resize& z, size_t i, Mode m, ElementType t, ElementType w) {
  if (m == Mode::kLinear) return linear(b, z.in[i], z.out[i], z.align_corners, z.scales[i], t, w);
  return nearest(b, z.in[i], z.out[i], z.scales[i], m == Mode::kNearestExact);
}

// Forward: (self, output_size, [align_corners,] scales...).
LoweringFn upsample(size_t n, Mode m) {
  return [n, m](Context& c, const Args& a) {
    Value x = a[0].tensor;
    size_t lead = x.rank() - n, first_scale = m == Mode::kLinear ? 3 : 2;
    Resize z{tail(x.shape(), lead), tail(c.out().shape, lead), m == Mode::kLinear && a[2].b,
             {a.begin() + static_cast<std::ptrdiff_t>(first_scale), a.end()}};
    ElementType t = m == Mode::kLinear ? opmath(x.dtype()) : x.dtype();
    // 16-bit weights round on CPU's generic kernel (1d, 3d), not on its
    // bilinear one; the sum is f32 either way, rounded once.
    ElementType w = n == 2 ? t : x.dtype();
    Value y = c.b.convert(x, t);
    for (size_t i = n; i-- > 0;) {  // innermost first, as the CPU kernel
      int64_t dim = static_cast<int64_t>(lead + i);
      Sampling s = sampling(c.b, z, i, m, t, w);
      Value near = take(c.b, y, dim, s.i0);
      if (m != Mode::kLinear) {
        y = near;
        continue;
      }
      Value far = take(c.b, y, dim, s.i1);
      y = c.b.add(c.b.mul(near, along(c.b, s.l0, near, dim)),
                  c.b.mul(far, along(c.b, s.l1, far, dim)));
      // CPU's uint8 kernel is separable and keeps each pass in uint8.
      if (i > 0 && !hlo::is_float(x.dtype())) y = c.b.convert(resampled_to(c.b, y, x.dtype()), t);
    }
    return Values{resampled_to(c.b, y, c.out().dtype)};
  };
}

// Backward: (grad_output, output_size, input_size, [align_corners,] scales...).
LoweringFn upsample_backward(size_t n, Mode m) {
  return [n, m](Context& c, const Args& a) {
    Value g = a[0].tensor;
    size_t lead = g.rank() - n, first_scale = m == Mode::kLinear ? 4 : 3;
    Resize z{tail(a[2].ints, lead), tail(g.shape(), lead), m == Mode::kLinear && a[3].b,
             {a.begin() + static_cast<std::ptrdiff_t>(first_scale), a.end()}};
    ElementType t = m == Mode::kLinear ? opmath(g.dtype()) : accumulation_type(g.dtype());
    Value y = c.b.convert(g, t);
    for (size_t i = 0; i < n; ++i) {
      int64_t dim = static_cast<int64_t>(lead + i);
      Sampling s = sampling(c.b, z, i, m, t, t);
      if (m != Mode::kLinear) {
        y = spread(c.b, y, dim, s.i0, z.in[i]);
        continue;
      }
      y = c.b.add(spread(c.b, c.b.mul(y, along(c.b, s.l0, y, dim)), dim, s.i0, z.in[i]),
                  spread(c.b, c.b.mul(y, along(c.b, s.l1, y, dim)), dim, s.i1, z.in[i]));
    }
    return Values{c.b.convert(y, c.out().dtype)};
  };
}

}  // namespace

void register_upsample(Registry& r) {
  const char* linear_names[] = {"upsample_linear1d", "upsample_bilinear2d",
                                "upsample_trilinear3d"};
  for (size_t n : {1, 2, 3}) {
    std::string d = std::to_string(n) + "d";
    std::string names[] = {"aten::upsample_nearest" + d, "aten::_upsample_nearest_exact" + d,
                           std::string("aten::") + linear_names[n - 1]};
    Mode modes[] = {Mode::kNearest, Mode::kNearestExact, Mode::kLinear};
    for (size_t k = 0; k < 3; ++k) {
      r.add(names[k], upsample(n, modes[k]));
      r.add(names[k] + "_backward", upsample_backward(n, modes[k]));
    }
  }
}

}  // namespace torch_tpu::lowering
