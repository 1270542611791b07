// Resampling outside the interpolate family of upsample.cc: bicubic and
// antialiased bilinear upsampling, forward and backward; grid sampling is in
// grid_sample.cc. Registered from register_misc (misc.cc).
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

// Taps of a separable resampling pass along one dim: tap k of every output
// position reads source row index[k][i] with weight weight[k][i] (bicubic has
// four taps; antialiased bilinear as many as its widest window).
struct Taps {
  std::vector<std::vector<int64_t>> index;
  std::vector<std::vector<double>> weight;
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
  Taps t{std::vector<std::vector<int64_t>>(4), std::vector<std::vector<double>>(4)};
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

Value weights_along(Builder& b, const Taps& taps, size_t k, Value like, int64_t dim) {
  return b.broadcast_in_dim(exact_constant(b, taps.weight[k], like.dtype()), like.shape(), {dim});
}

// One resampling pass along `dim`: Σ_k y[index[k]] · weight[k], the weights
// rounded to `w` first (CPU's generic kernel stores them in a 16-bit
// tensor's dtype; a no-op for wider `w`).
Value resample(Builder& b, Value y, int64_t dim, const Taps& taps, ElementType w) {
  Value sum;
  for (size_t k = 0; k < taps.index.size(); ++k) {
    Value v = take_static(b, y, dim, taps.index[k]);
    v = b.mul(v, round_like(b, weights_along(b, taps, k, v, dim), w));
    sum = k == 0 ? v : b.add(sum, v);
  }
  return sum;
}

// Its adjoint: each tap's weighted gradient added back to `in` source rows.
Value resample_adjoint(Builder& b, Value g, int64_t dim, const Taps& taps, int64_t in) {
  Value sum;
  for (size_t k = 0; k < taps.index.size(); ++k) {
    Value v = add_static(b, b.mul(g, weights_along(b, taps, k, g, dim)), dim, taps.index[k], in);
    sum = k == 0 ? v : b.add(sum, v);
  }
  return sum;
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
    y = resample(c.b, y, dim, taps_for(x.dim(dim), c.out().shape[dim], a[2].b, a[3 + i], t),
                 x.dtype());
    // CPU's uint8 kernel is separable and keeps each pass in uint8.
    if (i == 1 && !hlo::is_float(x.dtype())) y = c.b.convert(resampled_to(c.b, y, x.dtype()), t);
  }
  return {resampled_to(c.b, y, c.out().dtype)};
}

// upsample_bicubic2d_backward(grad_output, output_size, input_size,
// align_corners, scales_h, scales_w): each tap's weighted gradient added back.
Values upsample_bicubic2d_backward(Context& c, const Args& a) {
  Value g = a[0].tensor;
  ElementType t = opmath(g.dtype());
  Value y = c.b.convert(g, t);
  for (int64_t i = 0; i < 2; ++i) {
    int64_t dim = g.rank() - 2 + i, in = a[2].ints[dim];
    y = resample_adjoint(c.b, y, dim, taps_for(in, g.dim(dim), a[3].b, a[4 + i], t), in);
  }
  return {c.b.convert(y, c.out().dtype)};
}


// ---- antialiased bilinear ----------------------------------------------------
//
// _upsample_bilinear2d_aa: each output position averages the input under a
// triangle filter stretched by the downscale factor (PyTorch's separable
// antialias kernel, width first). Like bicubic, positions and weights are
// computed here in the kernel's C++ type and enter as exact constants.

// `count` taps per output position; weights are 0 past a window's end.
template <typename T>
Taps aa_taps(int64_t in, int64_t out, bool align_corners, const Arg& scale_arg) {
  T scale;
  if (align_corners) scale = out > 1 ? T(in - 1) / T(out - 1) : T(0);
  else if (!scale_arg.none() && scale_arg.d > 0) scale = T(1.0 / scale_arg.d);
  else scale = T(in) / T(out);
  T support = scale >= 1 ? scale : T(1);
  T invscale = scale >= 1 ? T(1) / scale : T(1);
  int64_t count = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  Taps t{std::vector<std::vector<int64_t>>(count), std::vector<std::vector<double>>(count)};
  for (int64_t i = 0; i < out; ++i) {
    T center = static_cast<T>(scale * (i + 0.5));
    int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    int64_t size = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in) - lo;
    size = std::clamp<int64_t>(size, 0, count);
    std::vector<T> w(count, T(0));
    T total = 0;
    for (int64_t j = 0; j < size; ++j) {
      T x = static_cast<T>((j + lo - center + 0.5) * invscale);
      x = x < 0 ? -x : x;
      w[j] = x < 1 ? T(1) - x : T(0);
      total += w[j];
    }
    for (int64_t j = 0; j < count; ++j) {
      if (total != 0 && j < size) w[j] /= total;
      t.index[j].push_back(std::min(lo + j, in - 1));
      t.weight[j].push_back(static_cast<double>(w[j]));
    }
  }
  return t;
}

Taps aa_taps_for(int64_t in, int64_t out, bool align_corners, const Arg& scale, ElementType t) {
  return t == ElementType::kF64 ? aa_taps<double>(in, out, align_corners, scale)
                                : aa_taps<float>(in, out, align_corners, scale);
}

// _upsample_bilinear2d_aa(self, output_size, align_corners, scales_h, scales_w).
Values upsample_bilinear2d_aa(Context& c, const Args& a) {
  Value x = a[0].tensor;
  ElementType t = opmath(x.dtype());
  Value y = c.b.convert(x, t);
  for (int64_t i = 1; i >= 0; --i) {  // width first, as the CPU kernel
    int64_t dim = x.rank() - 2 + i, in = x.dim(dim), out = c.out().shape[dim];
    if (in == out) continue;
    y = resample(c.b, y, dim, aa_taps_for(in, out, a[2].b, a[3 + i], t), t);
    if (i == 1 && !hlo::is_float(x.dtype())) y = c.b.convert(resampled_to(c.b, y, x.dtype()), t);
  }
  return {resampled_to(c.b, y, c.out().dtype)};
}

// _upsample_bilinear2d_aa_backward(grad_output, output_size, input_size,
// align_corners, scales_h, scales_w).
Values upsample_bilinear2d_aa_backward(Context& c, const Args& a) {
  Value g = a[0].tensor;
  ElementType t = opmath(g.dtype());
  Value y = c.b.convert(g, t);
  for (int64_t i = 0; i < 2; ++i) {
    int64_t dim = g.rank() - 2 + i, in = a[2].ints[dim];
    if (in == g.dim(dim)) continue;
    y = resample_adjoint(c.b, y, dim, aa_taps_for(in, g.dim(dim), a[3].b, a[4 + i], t), in);
  }
  return {c.b.convert(y, c.out().dtype)};
}

}  // namespace

void register_grid_sample(Registry& r);  // grid_sample.cc

void register_misc_sampling(Registry& r) {
  r.add("aten::upsample_bicubic2d", upsample_bicubic2d);
  r.add("aten::upsample_bicubic2d_backward", upsample_bicubic2d_backward);
  r.add("aten::_upsample_bilinear2d_aa", upsample_bilinear2d_aa);
  r.add("aten::_upsample_bilinear2d_aa_backward", upsample_bilinear2d_aa_backward);
  register_grid_sample(r);
}

}  // namespace torch_tpu::lowering
