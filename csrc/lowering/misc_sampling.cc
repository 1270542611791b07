// Resampling outside the interpolate family of upsample.cc: bicubic
// upsampling and 2-d grid sampling (F.grid_sample), forward and backward.
// Registered from register_misc (misc.cc).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "helpers.h"
#include "indexing.h"

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;
constexpr ElementType kI64 = ElementType::kI64;

// ---- bicubic ---------------------------------------------------------------
//
// Sampling positions and weights depend only on sizes and scales, so they are
// computed here in the C++ type of PyTorch's kernel (float, or double for
// double tensors) and enter the program as exact constants.

// Four taps per output position along one dim: source rows and weights.
struct Taps {
  std::vector<int64_t> index[4];
  std::vector<double> weight[4];
};

template <typename T>
T cubic_near(T x) {  // |x| <= 1, A = -0.75
  const T A = T(-0.75);
  return ((A + 2) * x - (A + 3)) * x * x + 1;
}
template <typename T>
T cubic_far(T x) {  // 1 < |x| < 2
  const T A = T(-0.75);
  return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
}

template <typename T>
Taps cubic_taps(int64_t in, int64_t out, bool align_corners, const Arg& scale) {
  T ratio;
  if (align_corners) ratio = out > 1 ? T(in - 1) / T(out - 1) : T(0);
  else if (!scale.none() && scale.d > 0) ratio = T(1.0 / scale.d);
  else ratio = T(in) / T(out);
  Taps t;
  for (int64_t i = 0; i < out; ++i) {
    T real = align_corners ? ratio * T(i) : ratio * (T(i) + T(0.5)) - T(0.5);
    int64_t base = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
    T l = std::min(std::max(real - T(base), T(0)), T(1));
    T w[4] = {cubic_far<T>(l + 1), cubic_near<T>(l), cubic_near<T>(1 - l), cubic_far<T>(2 - l)};
    for (int k = 0; k < 4; ++k) {
      t.index[k].push_back(std::max<int64_t>(0, std::min(base - 1 + k, in - 1)));
      t.weight[k].push_back(static_cast<double>(w[k]));
    }
  }
  return t;
}

// A vector constant of type t (f32 or f64) holding exactly `values`.
Value exact_constant(Builder& b, const std::vector<double>& values, ElementType t) {
  std::vector<int64_t> bits;
  for (double v : values) {
    if (t == ElementType::kF64) {
      int64_t u;
      std::memcpy(&u, &v, sizeof u);
      bits.push_back(u);
    } else {
      float f = static_cast<float>(v);
      int32_t u;
      std::memcpy(&u, &f, sizeof u);
      bits.push_back(u);
    }
  }
  Value raw = b.constant_i64_vector(bits);
  int64_t n = static_cast<int64_t>(values.size());
  if (t == ElementType::kF64) return b.bitcast_convert(raw, TensorType{t, {n}});
  return b.bitcast_convert(b.convert(raw, ElementType::kI32), TensorType{t, {n}});
}

Taps taps_for(int64_t in, int64_t out, bool align_corners, const Arg& scale, ElementType t) {
  return t == ElementType::kF64 ? cubic_taps<double>(in, out, align_corners, scale)
                                : cubic_taps<float>(in, out, align_corners, scale);
}

Value weights_along(Builder& b, const Taps& taps, int k, Value like, int64_t dim) {
  return b.broadcast_in_dim(exact_constant(b, taps.weight[k], like.dtype()), like.shape(), {dim});
}

ElementType opmath(ElementType t) {
  return t == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
}

// upsample_bicubic2d(self, output_size, align_corners, scales_h, scales_w).
Values upsample_bicubic2d(Context& c, const Args& a) {
  Value x = a[0].tensor;
  ElementType t = opmath(x.dtype());
  Value y = c.b.convert(x, t);
  for (int64_t i = 1; i >= 0; --i) {  // width first, as the CPU kernel nests
    int64_t dim = x.rank() - 2 + i;
    Taps taps = taps_for(x.dim(dim), c.out().shape[dim], a[2].b, a[3 + i], t);
    Value sum;
    for (int k = 0; k < 4; ++k) {
      Value v = take_static(c.b, y, dim, taps.index[k]);
      v = c.b.mul(v, weights_along(c.b, taps, k, v, dim));
      sum = k == 0 ? v : c.b.add(sum, v);
    }
    y = sum;
  }
  return {c.b.convert(y, c.out().dtype)};
}

// upsample_bicubic2d_backward(grad_output, output_size, input_size,
// align_corners, scales_h, scales_w): each tap's weighted gradient added back.
Values upsample_bicubic2d_backward(Context& c, const Args& a) {
  Value g = a[0].tensor;
  ElementType t = opmath(g.dtype());
  Value y = c.b.convert(g, t);
  for (int64_t i = 0; i < 2; ++i) {
    int64_t dim = g.rank() - 2 + i, in = a[2].ints[dim];
    Taps taps = taps_for(in, g.dim(dim), a[3].b, a[4 + i], t);
    Value sum;
    for (int k = 0; k < 4; ++k) {
      Value v = add_static(c.b, c.b.mul(y, weights_along(c.b, taps, k, y, dim)), dim,
                           taps.index[k], in);
      sum = k == 0 ? v : c.b.add(sum, v);
    }
    y = sum;
  }
  return {c.b.convert(y, c.out().dtype)};
}

// ---- grid sampling -----------------------------------------------------------
//
// grid_sampler_2d(input [N, C, H, W], grid [N, Ho, Wo, 2], interpolation,
// padding, align_corners): grid (x, y) in [-1, 1] is mapped to source pixels,
// padded (0 zeros, 1 border, 2 reflection), and read bilinearly (0) or at the
// nearest pixel (1). Corners outside the input read as zero. The backward
// scatter-adds into the input and differentiates through the mapping.

enum Interp { kBilinear = 0, kNearest = 1 };
enum Padding { kZeros = 0, kBorder = 1, kReflection = 2 };

// A source coordinate and its derivative by the grid coordinate.
struct Coord {
  Value v, grad;
};

Value full_like(Builder& b, Value like, double v) { return splat_like(b, v, like); }

// clip_coordinates_set_grad: into [0, size-1]; the derivative is 0 outside.
Coord clip(Builder& b, Coord c, int64_t size) {
  Value lo = full_like(b, c.v, 0), hi = full_like(b, c.v, static_cast<double>(size - 1));
  Value inside = b.and_(b.compare(Compare::kGT, c.v, lo), b.compare(Compare::kLT, c.v, hi));
  Value v = b.select(b.compare(Compare::kLE, c.v, lo), lo, b.select(inside, c.v, hi));
  return {v, b.select(inside, c.grad, full_like(b, c.v, 0))};
}

// reflect_coordinates_set_grad over [twice_low/2, twice_high/2].
Coord reflect(Builder& b, Coord c, int64_t twice_low, int64_t twice_high) {
  if (twice_low == twice_high) return {full_like(b, c.v, 0), full_like(b, c.v, 0)};
  double lo = twice_low / 2.0, span = (twice_high - twice_low) / 2.0;
  Value d = b.sub(c.v, full_like(b, c.v, lo));
  Value neg = b.compare(Compare::kLT, d, full_like(b, d, 0));
  Value sign = b.select(neg, full_like(b, d, -1), full_like(b, d, 1));
  d = b.abs(d);
  Value extra = b.rem(d, full_like(b, d, span));
  Value flips = b.floor(b.div(d, full_like(b, d, span)));
  Value even = b.compare(Compare::kEQ, b.rem(flips, full_like(b, d, 2)), full_like(b, d, 0));
  Value v = b.select(even, b.add(extra, full_like(b, d, lo)),
                     b.add(b.sub(full_like(b, d, span), extra), full_like(b, d, lo)));
  return {v, b.mul(c.grad, b.select(even, sign, b.neg(sign)))};
}

// grid_sampler_compute_source_index_set_grad.
Coord source(Builder& b, Value g, int64_t size, int64_t padding, bool align) {
  double scale = align ? (size - 1) / 2.0 : size / 2.0;
  Value v = b.mul(b.add(g, full_like(b, g, 1)), full_like(b, g, scale));
  if (!align) v = b.sub(v, full_like(b, g, 0.5));
  Coord c{v, full_like(b, g, scale)};
  if (padding == kBorder) return clip(b, c, size);
  if (padding == kReflection) {
    c = align ? reflect(b, c, 0, 2 * (size - 1)) : reflect(b, c, -1, 2 * size - 1);
    return clip(b, c, size);
  }
  return c;
}

// A pixel read at integer source coords (iy, ix) [N, Ho, Wo], with `valid`
// (false outside the input); reads and writes use clamped positions.
struct Corner {
  Value indices, valid;  // i64 [N, Ho, Wo, 3] (n, y, x); i1 [N, Ho, Wo]
};

Corner corner(Builder& b, Value iy, Value ix, int64_t h, int64_t w) {
  auto in_range = [&](Value i, int64_t n) {
    return b.and_(b.compare(Compare::kGE, i, full_like(b, i, 0)),
                  b.compare(Compare::kLT, i, full_like(b, i, static_cast<double>(n))));
  };
  Value valid = b.and_(in_range(iy, h), in_range(ix, w));
  std::vector<int64_t> col = iy.shape();
  col.push_back(1);
  auto clamped = [&](Value i, int64_t n) {
    return b.reshape(b.clamp(full_like(b, i, 0), i, full_like(b, i, static_cast<double>(n - 1))),
                     col);
  };
  Value batch = b.reshape(b.iota(TensorType{kI64, iy.shape()}, 0), col);
  return {b.concatenate({batch, clamped(iy, h), clamped(ix, w)}, 3), valid};
}

hlo::GatherDims pixel_gather() {
  hlo::GatherDims d;
  d.offset_dims = {3};
  d.collapsed_slice_dims = d.start_index_map = {0, 1, 2};
  d.index_vector_dim = 3;
  return d;
}

// input [N, H, W, C] at the corner: [N, Ho, Wo, C], zero where invalid.
Value read(Builder& b, Value input, const Corner& k) {
  std::vector<int64_t> shape = k.valid.shape();
  shape.push_back(input.dim(3));
  Value v = b.gather(input, k.indices, pixel_gather(), {1, 1, 1, input.dim(3)},
                     TensorType{input.dtype(), shape});
  return b.select(b.broadcast_in_dim(k.valid, shape, {0, 1, 2}), v, full_like(b, v, 0));
}

// `acc` [N, H, W, C] plus `update` [N, Ho, Wo, C] at the corner (valid only).
Value write(Builder& b, Value acc, Value update, const Corner& k) {
  update = b.select(b.broadcast_in_dim(k.valid, update.shape(), {0, 1, 2}), update,
                    full_like(b, update, 0));
  hlo::ScatterDims d;
  d.update_window_dims = {3};
  d.inserted_window_dims = d.scatter_dims_to_operand_dims = {0, 1, 2};
  d.index_vector_dim = 3;
  return b.scatter(acc, k.indices, update, d,
                   [](Builder& r, const Values& v) { return Values{r.add(v[0], v[1])}; });
}

// The sampling of one call: source coords, corners and bilinear weights.
struct Sample {
  Coord x, y;
  Corner corners[4];  // nw, ne, sw, se (nearest: corners[0] only)
  Value dx, dy;       // ix - floor(ix), iy - floor(iy) (bilinear)
};

Sample sample(Builder& b, Value grid, int64_t h, int64_t w, const Args& a, size_t first) {
  int64_t interp = a[first].i, padding = a[first + 1].i;
  bool align = a[first + 2].b;
  if (interp != kBilinear && interp != kNearest)
    throw Unsupported("grid_sampler_2d: bicubic interpolation is not lowered");
  const auto& s = grid.shape();
  auto part = [&](int64_t i) {
    return b.reshape(b.slice(grid, {0, 0, 0, i}, {s[0], s[1], s[2], i + 1}), {s[0], s[1], s[2]});
  };
  Sample r{source(b, part(0), w, padding, align), source(b, part(1), h, padding, align), {}, {},
           {}};
  if (interp == kNearest) {
    auto near = [&](Value v) {
      return b.convert(b.unary("stablehlo.round_nearest_even", v), kI64);
    };
    r.corners[0] = corner(b, near(r.y.v), near(r.x.v), h, w);
    return r;
  }
  Value fx = b.floor(r.x.v), fy = b.floor(r.y.v);
  r.dx = b.sub(r.x.v, fx);
  r.dy = b.sub(r.y.v, fy);
  Value x0 = b.convert(fx, kI64), y0 = b.convert(fy, kI64);
  Value x1 = b.add(x0, full_like(b, x0, 1)), y1 = b.add(y0, full_like(b, y0, 1));
  r.corners[0] = corner(b, y0, x0, h, w);
  r.corners[1] = corner(b, y0, x1, h, w);
  r.corners[2] = corner(b, y1, x0, h, w);
  r.corners[3] = corner(b, y1, x1, h, w);
  return r;
}

// Bilinear weights of the four corners, [N, Ho, Wo] each.
std::vector<Value> weights(Builder& b, const Sample& s) {
  Value one = full_like(b, s.dx, 1);
  Value rx = b.sub(one, s.dx), ry = b.sub(one, s.dy);
  return {b.mul(rx, ry), b.mul(s.dx, ry), b.mul(rx, s.dy), b.mul(s.dx, s.dy)};
}

Value per_channel(Builder& b, Value w, int64_t ch) {
  std::vector<int64_t> shape = w.shape();
  shape.push_back(ch);
  return b.broadcast_in_dim(w, shape, {0, 1, 2});
}

Values grid_sampler_2d(Context& c, const Args& a) {
  ElementType t = opmath(a[0].tensor.dtype());
  Value input = c.b.transpose(c.b.convert(a[0].tensor, t), {0, 2, 3, 1});
  Value grid = c.b.convert(a[1].tensor, t);
  int64_t h = input.dim(1), w = input.dim(2), ch = input.dim(3);
  Sample s = sample(c.b, grid, h, w, a, 2);
  Value y;
  if (a[2].i == kNearest) {
    y = read(c.b, input, s.corners[0]);
  } else {
    std::vector<Value> ws = weights(c.b, s);
    for (int k = 0; k < 4; ++k) {
      Value v = c.b.mul(read(c.b, input, s.corners[k]), per_channel(c.b, ws[k], ch));
      y = k == 0 ? v : c.b.add(y, v);
    }
  }
  return {c.b.convert(c.b.transpose(y, {0, 3, 1, 2}), c.out().dtype)};
}

// The gradient by the grid: d out / d (ix, iy) times d (ix, iy) / d grid.
Value grid_grad(Builder& b, Value input, Value g, const Sample& s) {
  Value v[4];
  for (int k = 0; k < 4; ++k) v[k] = read(b, input, s.corners[k]);
  int64_t ch = input.dim(3);
  Value one = full_like(b, s.dx, 1);
  Value rx = per_channel(b, b.sub(one, s.dx), ch), ry = per_channel(b, b.sub(one, s.dy), ch);
  Value dx = per_channel(b, s.dx, ch), dy = per_channel(b, s.dy, ch);
  Value gx = b.add(b.mul(b.sub(v[1], v[0]), ry), b.mul(b.sub(v[3], v[2]), dy));
  Value gy = b.add(b.mul(b.sub(v[2], v[0]), rx), b.mul(b.sub(v[3], v[1]), dx));
  gx = b.mul(reduce_sum(b, b.mul(gx, g), {3}), s.x.grad);
  gy = b.mul(reduce_sum(b, b.mul(gy, g), {3}), s.y.grad);
  std::vector<int64_t> col = gx.shape();
  col.push_back(1);
  return b.concatenate({b.reshape(gx, col), b.reshape(gy, col)}, 3);
}

// grid_sampler_2d_backward(grad_output, input, grid, interpolation, padding,
// align_corners, output_mask) -> (grad_input if asked, grad_grid).
Values grid_sampler_2d_backward(Context& c, const Args& a) {
  ElementType t = opmath(a[1].tensor.dtype());
  Value g = c.b.transpose(c.b.convert(a[0].tensor, t), {0, 2, 3, 1});
  Value input = c.b.transpose(c.b.convert(a[1].tensor, t), {0, 2, 3, 1});
  Value grid = c.b.convert(a[2].tensor, t);
  int64_t h = input.dim(1), w = input.dim(2), ch = input.dim(3);
  Sample s = sample(c.b, grid, h, w, a, 3);
  bool nearest = a[3].i == kNearest;
  Values out;
  if (a[6].bools.at(0)) {
    Value acc = c.b.zeros(input.type());
    if (nearest) {
      acc = write(c.b, acc, g, s.corners[0]);
    } else {
      std::vector<Value> ws = weights(c.b, s);
      for (int k = 0; k < 4; ++k)
        acc = write(c.b, acc, c.b.mul(g, per_channel(c.b, ws[k], ch)), s.corners[k]);
    }
    out.push_back(c.b.convert(c.b.transpose(acc, {0, 3, 1, 2}), c.out(0).dtype));
  }
  Value gg = nearest ? c.b.zeros(grid.type()) : grid_grad(c.b, input, g, s);
  out.push_back(c.b.convert(gg, c.out(out.size()).dtype));
  return out;
}

}  // namespace

void register_misc_sampling(Registry& r) {
  r.add("aten::upsample_bicubic2d", upsample_bicubic2d);
  r.add("aten::upsample_bicubic2d_backward", upsample_bicubic2d_backward);
  r.add("aten::grid_sampler_2d", grid_sampler_2d);
  r.add("aten::grid_sampler_2d_backward", grid_sampler_2d_backward);
}

}  // namespace torch_tpu::lowering
