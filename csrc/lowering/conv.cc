// Convolution, forward and backward, for 1d/2d/3d, strided, padded, dilated,
// grouped and transposed. PyTorch's composite `aten::convolution` checks the
// arguments and hands every device convolution to the backend hook
// `convolution_overrideable` (and its backward to
// `convolution_backward_overrideable`). All three backward products are
// convolutions themselves:
//   grad_input of a convolution   = transposed convolution of grad_output
//   grad_input of a transposed one = plain convolution of grad_output
//   grad_weight                    = input ⋆ grad_output, with the batch as the
//                                    contracted dimension.
// Where the target runs some of these forms slowly (XLA:CPU) they are written
// another way: depthwise ones as sums over kernel taps, grouped ones per
// group, 3-D ones per depth tap, weight gradients as one dot per tap.
#include "conv_family.h"

#include <optional>

#include "precision.h"

namespace torch_tpu::lowering {

std::vector<int64_t> expand(const std::vector<int64_t>& v, size_t n) {
  if (v.size() == 1 && n > 1) return std::vector<int64_t>(n, v[0]);
  return v;
}

Value crop(Builder& b, Value x, const std::vector<int64_t>& shape) {
  return b.slice(x, std::vector<int64_t>(x.rank(), 0), shape);
}

std::vector<int64_t> tail(const std::vector<int64_t>& shape, size_t first) {
  return {shape.begin() + static_cast<std::ptrdiff_t>(first), shape.end()};
}

Value take(Builder& b, Value x, int64_t dim, Value index) {
  int64_t m = index.dim(0);
  hlo::GatherDims d;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (i != dim) d.offset_dims.push_back(i);
  d.collapsed_slice_dims = d.start_index_map = {dim};
  d.index_vector_dim = 1;
  std::vector<int64_t> sizes = x.shape(), shape = x.shape();
  sizes[dim] = 1;
  shape[dim] = m;
  return b.gather(x, b.reshape(index, {m, 1}), d, sizes, TensorType{x.dtype(), shape});
}

namespace {

// A kernel's taps: the product of its spatial sizes (`w_shape` from dim 2).
int64_t kernel_taps(const std::vector<int64_t>& w_shape) {
  int64_t taps = 1;
  for (size_t i = 2; i < w_shape.size(); ++i) taps *= w_shape[i];
  return taps;
}

using hlo::ConvDims;
using hlo::ConvOptions;
using Padding = std::vector<std::pair<int64_t, int64_t>>;

// The attributes of convolution_overrideable (and its backward), which share
// argument positions 3..8.
struct ConvParams {
  std::vector<int64_t> stride, padding, dilation, output_padding;
  bool transposed = false;
  int64_t groups = 1;
};

ConvParams conv_params(const Args& a, size_t spatial) {
  return {expand(a[3].ints, spatial), expand(a[4].ints, spatial), expand(a[5].ints, spatial),
          expand(a[7].ints, spatial), a[6].b, a[8].i};
}

std::vector<int64_t> spatial_dims(int64_t n) {
  std::vector<int64_t> dims(n);
  for (int64_t i = 0; i < n; ++i) dims[i] = i + 2;
  return dims;
}

// Batch, feature, spatial... in all three operands (PyTorch's NC* layout).
ConvDims nc_dims(int64_t spatial) {
  ConvDims d;
  d.input_spatial = d.kernel_spatial = d.output_spatial = spatial_dims(spatial);
  return d;
}

// Whether `d` is PyTorch's NC* layout in all three operands.
bool standard_layout(const ConvDims& d) {
  return d.input_batch == 0 && d.input_feature == 1 && d.kernel_output_feature == 0 &&
         d.kernel_input_feature == 1 && d.output_batch == 0 && d.output_feature == 1;
}

Padding symmetric(const std::vector<int64_t>& p) {
  Padding out;
  for (int64_t v : p) out.emplace_back(v, v);
  return out;
}

int64_t option(const std::vector<int64_t>& v, size_t i) { return v.empty() ? 1 : v[i]; }

// stablehlo.convolution of operands already in their compute type, with a
// result of `acc` (the operands' dtype when unset).
Value conv_raw(Context& c, Value x, Value w, const ConvDims& d, const ConvOptions& o,
               std::optional<ElementType> acc = std::nullopt);

// Grouped convolutions with at most this many groups run as one dense
// convolution per group where the target says so (groups_as_dense_convs).
constexpr int64_t kMaxSplitGroups = 16;

// Whether grouped convolutions run as one dense convolution per group: on
// XLA:CPU a grouped stablehlo.convolution becomes a dense one over a
// block-diagonal kernel (groups times the work) outside its fast
// convolution kernel; per-group dense convolutions take that kernel with no
// extra work (benchmarks/conv.py: grouped2d_g4).
bool groups_as_dense_convs(const hlo::Target& t) { return t.xla_cpu; }

// `v` cut into `parts` equal slices along `dim`.
Values split(Builder& b, Value v, int64_t dim, int64_t parts) {
  Values out;
  int64_t size = v.dim(dim) / parts;
  for (int64_t g = 0; g < parts; ++g) {
    std::vector<int64_t> start(v.rank(), 0), limit = v.shape();
    start[dim] = g * size;
    limit[dim] = (g + 1) * size;
    out.push_back(b.slice(v, start, limit));
  }
  return out;
}

// A feature- or batch-grouped convolution as per-group dense ones whose
// results are concatenated along the output features.
Value conv_per_group(Context& c, Value x, Value w, const ConvDims& d, const ConvOptions& o,
                     std::optional<ElementType> acc) {
  bool by_feature = o.feature_group_count > 1;
  int64_t groups = by_feature ? o.feature_group_count : o.batch_group_count;
  Values xs = split(c.b, x, by_feature ? d.input_feature : d.input_batch, groups);
  Values ws = split(c.b, w, d.kernel_output_feature, groups);
  ConvOptions dense = o;
  dense.feature_group_count = dense.batch_group_count = 1;
  Values ys;
  for (int64_t g = 0; g < groups; ++g) ys.push_back(conv_raw(c, xs[g], ws[g], d, dense, acc));
  return c.b.concatenate(ys, d.output_feature);
}

// Whether 3-D convolutions run as 2-D ones, one per depth tap: XLA:CPU's
// fast convolution kernel takes 1-D and 2-D ones; a 3x3x3 convolution on
// 2x16x16x16x16 took 26 ms as one 3-D convolution, 4 ms as three 2-D ones
// (CPU eager: 2.4 ms).
bool depth_taps_as_2d(const hlo::Target& t) { return t.xla_cpu; }

// The layouts folded: NC* (a forward or input-gradient convolution), and
// conv_weight_grad's, whose batch is dim 1 and feature dim 0 (x's channels
// and batch), next to depth, so it folds without a transpose.
bool depth_foldable(const ConvDims& d) {
  std::vector<int64_t> spatial = spatial_dims(3);
  if (d.input_spatial != spatial || d.kernel_spatial != spatial || d.output_spatial != spatial)
    return false;
  if (standard_layout(d)) return true;
  return d.input_batch == 1 && d.input_feature == 0 && d.kernel_input_feature == 0 &&
         d.kernel_output_feature == 1 && d.output_batch == 1 && d.output_feature == 0;
}

bool by_depth_taps(const Context& c, Value x, Value w, const ConvDims& d, const ConvOptions& o) {
  if (!depth_taps_as_2d(c.target) || x.rank() != 5 || !depth_foldable(d) ||
      o.feature_group_count != 1 || o.batch_group_count != 1 || w.dim(2) == 0)
    return false;
  for (const auto& [lo, hi] : o.padding)
    if (lo < 0 || hi < 0) return false;
  return true;
}

// y = sum over depth taps t of the 2-D convolution of the input's depth
// slices at t (folded into the batch) with the kernel's slice t; the batch
// is dim 0 (moved next to depth) or dim 1 (already next to it).
Value conv_by_depth_taps(Context& c, Value x, Value w, const ConvDims& d, const ConvOptions& o,
                         std::optional<ElementType> acc) {
  Builder& b = c.b;
  int64_t stride = option(o.window_strides, 0), dil = option(o.rhs_dilation, 0);
  std::vector<int64_t> low(5, 0), high(5, 0), interior(5, 0);
  if (!o.padding.empty()) low[2] = o.padding[0].first, high[2] = o.padding[0].second;
  interior[2] = option(o.lhs_dilation, 0) - 1;
  Value xp = b.pad(x, b.zeros(TensorType{x.dtype(), {}}), low, high, interior);
  int64_t window = (w.dim(2) - 1) * dil + 1;
  int64_t depth = xp.dim(2) < window ? 0 : (xp.dim(2) - window) / stride + 1;
  auto rest = [](const std::vector<int64_t>& v) {
    return v.empty() ? v : std::vector<int64_t>(v.begin() + 1, v.end());
  };
  ConvOptions o2 = o;
  o2.window_strides = rest(o.window_strides);
  o2.lhs_dilation = rest(o.lhs_dilation);
  o2.rhs_dilation = rest(o.rhs_dilation);
  if (!o.padding.empty()) o2.padding.assign(o.padding.begin() + 1, o.padding.end());
  ConvDims d2 = d;
  d2.input_spatial = d2.kernel_spatial = d2.output_spatial = spatial_dims(2);
  bool batch_first = d.input_batch == 0;
  Value sum;
  for (int64_t t = 0; t < w.dim(2); ++t) {
    std::vector<int64_t> start{0, 0, t * dil, 0, 0}, limit = xp.shape(), strides{1, 1, stride, 1, 1};
    limit[2] = depth == 0 ? t * dil : t * dil + (depth - 1) * stride + 1;
    Value s = b.slice(xp, start, limit, strides);
    if (batch_first) {  // (N, C, D', H, W) -> (N*D', C, H, W)
      s = b.reshape(b.transpose(s, {0, 2, 1, 3, 4}), {x.dim(0) * depth, x.dim(1), x.dim(3), x.dim(4)});
    } else {  // (F, B, D', H, W) -> (F, B*D', H, W)
      s = b.reshape(s, {x.dim(0), x.dim(1) * depth, x.dim(3), x.dim(4)});
    }
    std::vector<int64_t> ws{0, 0, t, 0, 0}, wl = w.shape();
    wl[2] = t + 1;
    Value k = b.reshape(b.slice(w, ws, wl), {w.dim(0), w.dim(1), w.dim(3), w.dim(4)});
    Value y = conv_raw(c, s, k, d2, o2, acc);
    y = batch_first ? b.reshape(y, {x.dim(0), depth, y.dim(1), y.dim(2), y.dim(3)})   // (N, D', O, ..)
                    : b.reshape(y, {y.dim(0), x.dim(1), depth, y.dim(2), y.dim(3)});  // (O, B, D', ..)
    sum = t == 0 ? y : b.add(sum, y);
  }
  return batch_first ? b.transpose(sum, {0, 2, 1, 3, 4}) : sum;
}

Value conv_raw(Context& c, Value x, Value w, const ConvDims& d, const ConvOptions& o,
               std::optional<ElementType> acc) {
  int64_t groups = std::max(o.feature_group_count, o.batch_group_count);
  if (groups > 1 && groups <= kMaxSplitGroups && groups_as_dense_convs(c.target))
    return conv_per_group(c, x, w, d, o, acc);
  if (by_depth_taps(c, x, w, d, o)) return conv_by_depth_taps(c, x, w, d, o, acc);
  size_t n = d.input_spatial.size();
  std::vector<int64_t> shape(n + 2);
  shape[d.output_batch] = x.dim(d.input_batch) / o.batch_group_count;
  shape[d.output_feature] = w.dim(d.kernel_output_feature);
  for (size_t i = 0; i < n; ++i) {
    int64_t in = x.dim(d.input_spatial[i]);
    int64_t dilated = in == 0 ? 0 : (in - 1) * option(o.lhs_dilation, i) + 1;
    if (!o.padding.empty()) dilated += o.padding[i].first + o.padding[i].second;
    int64_t window = (w.dim(d.kernel_spatial[i]) - 1) * option(o.rhs_dilation, i) + 1;
    shape[d.output_spatial[i]] =
        dilated < window ? 0 : (dilated - window) / option(o.window_strides, i) + 1;
  }
  return c.b.convolution(x, w, TensorType{acc.value_or(x.dtype()), shape}, d, o);
}

// Whether a depthwise convolution (one input channel per group) is lowered
// as a sum over its kernel taps. XLA:CPU runs a grouped stablehlo.convolution
// as a dense one over a block-diagonal kernel (groups times the work, none of
// it in its fast convolution kernel): a 7x7 depthwise convolution on
// 2x16x56x56 took 57 ms against CPU eager's 0.7 ms. A tap sum is one fused
// elementwise loop (benchmarks/conv.py). Other plugins have depthwise kernels.
bool depthwise_as_taps(const hlo::Target& t) { return t.xla_cpu; }

// Kernels with more taps than this stay convolutions (a loop of that many
// slices is no longer one cheap fusion).
constexpr int64_t kMaxTaps = 128;

bool is_depthwise(Value x, Value w, const ConvDims& d, const ConvOptions& o) {
  if (!standard_layout(d) || o.batch_group_count != 1 || o.feature_group_count < 2 ||
      o.feature_group_count != x.dim(1) || w.dim(1) != 1)
    return false;
  int64_t taps = kernel_taps(w.shape());
  return taps > 0 && taps <= kMaxTaps;
}

// y[n, c*m + j, p] = sum over taps t of x'[n, c, p*stride + t*dilation]
// * w[c*m + j, 0, t], x' being x dilated and padded as the options say; the
// operands already in their compute type (products exact in `acc`).
Value depthwise_taps(Context& c, Value x, Value w, const ConvOptions& o, ElementType acc) {
  Builder& b = c.b;
  size_t n = x.rank() - 2;
  int64_t channels = x.dim(1), out_channels = w.dim(0), mult = out_channels / channels;
  x = b.convert(x, acc);
  w = b.convert(w, acc);
  std::vector<int64_t> low(n + 2, 0), high(n + 2, 0), interior(n + 2, 0);
  for (size_t i = 0; i < n; ++i) {
    if (!o.padding.empty()) low[i + 2] = o.padding[i].first, high[i + 2] = o.padding[i].second;
    interior[i + 2] = option(o.lhs_dilation, i) - 1;
  }
  Value padded = b.pad(x, b.zeros(TensorType{acc, {}}), low, high, interior);
  std::vector<int64_t> out{x.dim(0), out_channels};
  for (size_t i = 0; i < n; ++i) {
    int64_t window = (w.dim(i + 2) - 1) * option(o.rhs_dilation, i) + 1;
    int64_t span = padded.dim(i + 2);
    out.push_back(span < window ? 0 : (span - window) / option(o.window_strides, i) + 1);
  }
  std::vector<int64_t> k = tail(w.shape(), 2), strides(n + 2, 1);
  for (size_t i = 0; i < n; ++i) strides[i + 2] = option(o.window_strides, i);
  int64_t taps = kernel_taps(w.shape());
  Value sum;
  for (int64_t tap = 0; tap < taps; ++tap) {
    std::vector<int64_t> start(n + 2, 0), limit = padded.shape(), wstart(n + 2, 0), wlimit = w.shape();
    limit[1] = channels;
    for (int64_t i = static_cast<int64_t>(n) - 1, t = tap; i >= 0; t /= k[i], --i) {
      int64_t at = (t % k[i]) * option(o.rhs_dilation, i);
      start[i + 2] = at;
      limit[i + 2] = out[i + 2] == 0 ? at : at + (out[i + 2] - 1) * strides[i + 2] + 1;
      wstart[i + 2] = t % k[i];
      wlimit[i + 2] = t % k[i] + 1;
    }
    Value xs = b.slice(padded, start, limit, strides);  // (N, C, *out)
    if (mult > 1) {  // output channel c*m + j reads input channel c
      std::vector<int64_t> wide{out[0], channels, mult}, dims{0, 1};
      for (size_t i = 0; i < n; ++i) wide.push_back(out[i + 2]), dims.push_back(i + 3);
      xs = b.reshape(b.broadcast_in_dim(xs, wide, dims), out);
    }
    Value tap_w = b.reshape(b.slice(w, wstart, wlimit), {out_channels});
    Value term = b.mul(xs, b.broadcast_in_dim(tap_w, out, {1}));
    sum = tap == 0 ? term : b.add(sum, term);
  }
  return sum;
}

// stablehlo.convolution at the context's matmul precision (the bf16 split
// schemes of precision.h). 16-bit operands are convolved as they are into an
// f32 result, as precise_dot does: their products are exact in f32, so the
// only rounding is the caller's one conversion back (CPU's numerics). Going
// through an f32 split instead would round f16 operands to bf16 at DEFAULT.
Value conv(Context& c, Value lhs, Value rhs, const ConvDims& d, const ConvOptions& o) {
  ElementType t = accumulation_type(lhs.dtype());
  if (depthwise_as_taps(c.target) && is_depthwise(lhs, rhs, d, o)) {
    if (t != lhs.dtype()) return depthwise_taps(c, lhs, rhs, o, t);
    return precise(c.b, c.precision, lhs, rhs,
                   [&](Value a, Value k) { return depthwise_taps(c, a, k, o, a.dtype()); });
  }
  if (t != lhs.dtype()) return conv_raw(c, lhs, rhs, d, o, t);
  return precise(c.b, c.precision, lhs, rhs, [&](Value a, Value k) { return conv_raw(c, a, k, d, o); });
}

// y[N, O, *] = x[N, C, *] ⋆ w[O, C/g, *].
Value conv_forward(Context& c, Value x, Value w, const ConvParams& p) {
  ConvOptions o;
  o.window_strides = p.stride;
  o.rhs_dilation = p.dilation;
  o.padding = symmetric(p.padding);
  o.feature_group_count = p.groups;
  return conv(c, x, w, nc_dims(x.rank() - 2), o);
}

// PyTorch's transposed weight w[C, O/g, *] as a plain one, [O, C/g, *],
// mirrored in space.
Value untranspose_weight(Builder& b, Value w, int64_t groups) {
  std::vector<int64_t> k = tail(w.shape(), 2), split{groups, w.dim(0) / groups, w.dim(1)};
  split.insert(split.end(), k.begin(), k.end());
  std::vector<int64_t> perm{0, 2, 1}, merged{groups * w.dim(1), w.dim(0) / groups};
  for (size_t i = 0; i < k.size(); ++i) perm.push_back(static_cast<int64_t>(i) + 3);
  merged.insert(merged.end(), k.begin(), k.end());
  Value plain = b.reshape(b.transpose(b.reshape(w, split), perm), merged);
  return b.reverse(plain, spatial_dims(static_cast<int64_t>(k.size())));
}

// The transpose of conv_forward in its input: x[N, C, *], w[C, O/g, *].
// Written as a stride-1 convolution over x dilated by the stride; padding
// below zero becomes a crop of the result.
Value conv_transposed(Context& c, Value x, Value w, const ConvParams& p) {
  size_t n = x.rank() - 2;
  ConvOptions o;
  o.lhs_dilation = p.stride;
  o.rhs_dilation = p.dilation;
  o.feature_group_count = p.groups;
  std::vector<int64_t> start(n + 2, 0), cut(n, 0);
  for (size_t i = 0; i < n; ++i) {
    int64_t reach = p.dilation[i] * (w.dim(i + 2) - 1);
    int64_t lo = reach - p.padding[i], hi = lo + p.output_padding[i];
    o.padding.emplace_back(std::max<int64_t>(lo, 0), std::max<int64_t>(hi, 0));
    start[i + 2] = std::max<int64_t>(-lo, 0);
    cut[i] = std::max<int64_t>(-hi, 0);
  }
  Value y = conv(c, x, untranspose_weight(c.b, w, p.groups), nc_dims(n), o);
  std::vector<int64_t> limit = y.shape();
  for (size_t i = 0; i < n; ++i) limit[i + 2] -= cut[i];
  return c.b.slice(y, start, limit);
}

// Whether CPU computes this 16-bit transposed convolution with its slow
// kernel rather than oneDNN: where oneDNN takes no such type on this host
// (f16 on most CPUs), and wherever an output_padding reaches its stride.
bool cpu_col2im(const Context& c, const ConvParams& p, ElementType t) {
  if (!p.transposed || !is_half(t)) return false;
  if (!c.target.cpu_onednn_half_conv(t)) return true;
  for (size_t i = 0; i < p.stride.size(); ++i)
    if (p.output_padding[i] >= p.stride[i]) return true;
  return false;
}

// A 16-bit transposed convolution as CPU's slow kernel computes it
// (slow_conv_transpose): each kernel tap's products are summed over input
// channels and rounded to the dtype (a gemm into columns), then added into
// the output tap after tap in kernel order, each addition rounding (col2im).
// A tap's contribution is the transposed convolution with the other taps
// zeroed; its sums are exact f32 like the gemm's.
Value conv_transposed_col2im(Context& c, Value x, Value w, const ConvParams& p) {
  Builder& b = c.b;
  auto r = [&](Value v) { return round_like(b, v, x.dtype()); };
  std::vector<int64_t> k = tail(w.shape(), 2);
  int64_t taps = kernel_taps(w.shape());
  if (taps == 0) return conv_transposed(c, x, w, p);
  Value zero = b.zeros(w.type()), acc;
  for (int64_t tap = 0; tap < taps; ++tap) {
    Value only = b.broadcast_in_dim(b.constant_int(ElementType::kPred, 1), w.shape(), {});
    for (int64_t i = static_cast<int64_t>(k.size()) - 1, t = tap; i >= 0; t /= k[i], --i) {
      Value at = b.iota(TensorType{ElementType::kI64, w.shape()}, i + 2);
      Value hit = b.compare(hlo::Compare::kEQ, at, splat_like(b, static_cast<double>(t % k[i]), at));
      only = b.and_(only, hit);
    }
    Value y = r(conv_transposed(c, x, b.select(only, w, zero), p));
    acc = tap == 0 ? y : r(b.add(acc, y));
  }
  return acc;
}

// d/dw of conv_forward(x, w) against output gradient gy[N, O, *]: the batch
// is contracted, input channels play the batch; groups split that batch.
Value conv_weight_grad(Context& c, Value x, Value gy, const std::vector<int64_t>& w_shape,
                       const ConvParams& p) {
  ConvDims d = nc_dims(x.rank() - 2);
  d.input_batch = d.kernel_output_feature = d.output_batch = 1;
  d.input_feature = d.kernel_input_feature = d.output_feature = 0;
  ConvOptions o;
  o.window_strides = p.dilation;
  o.rhs_dilation = p.stride;
  o.padding = symmetric(p.padding);
  o.batch_group_count = p.groups;
  // Rows the forward's last window never reached make the result too long.
  return crop(c.b, conv(c, x, gy, d, o), w_shape);
}

// What kernel tap `tap` (row-major over the kernel's spatial sizes `k`) of a
// forward convolution reads of its padded input: the strided slice whose
// positions pair with gy's, (N, C, *gy spatial).
Value tap_slice(Builder& b, Value padded, Value gy, const std::vector<int64_t>& k,
                const ConvParams& p, int64_t tap) {
  int64_t n = static_cast<int64_t>(k.size());
  std::vector<int64_t> start(n + 2, 0), limit = padded.shape(), strides(n + 2, 1);
  for (int64_t i = n - 1, t = tap; i >= 0; t /= k[i], --i) {
    int64_t at = (t % k[i]) * p.dilation[i], m = gy.dim(i + 2);
    start[i + 2] = at;
    limit[i + 2] = m == 0 ? at : at + (m - 1) * p.stride[i] + 1;
    strides[i + 2] = p.stride[i];
  }
  return b.slice(padded, start, limit, strides);
}

// conv_weight_grad of a depthwise forward convolution, tap by tap (see
// depthwise_as_taps): dw[c*m + j, 0, t] = sum over n, p of
// x'[n, c, p*stride + t*dilation] * gy[n, c*m + j, p], x' being x padded.
Value depthwise_weight_grad_taps(Context& c, Value x, Value gy,
                                 const std::vector<int64_t>& w_shape, const ConvParams& p) {
  Builder& b = c.b;
  size_t n = x.rank() - 2;
  int64_t channels = x.dim(1), out_channels = w_shape[0], mult = out_channels / channels;
  std::vector<int64_t> k = tail(w_shape, 2), low(n + 2, 0), reduce{0};
  for (size_t i = 0; i < n; ++i) {
    low[i + 2] = p.padding[i];
    reduce.push_back(static_cast<int64_t>(i) + 2);
  }
  int64_t taps = kernel_taps(w_shape);
  auto grad = [&](Value xa, Value ga) {
    Value padded = b.pad(xa, b.zeros(TensorType{xa.dtype(), {}}), low, low);
    Values columns;
    for (int64_t tap = 0; tap < taps; ++tap) {
      Value xs = tap_slice(b, padded, ga, k, p, tap);  // (N, C, *gy spatial)
      if (mult > 1) {
        std::vector<int64_t> wide{ga.dim(0), channels, mult}, dims{0, 1};
        for (size_t i = 0; i < n; ++i) wide.push_back(ga.dim(i + 2)), dims.push_back(i + 3);
        xs = b.reshape(b.broadcast_in_dim(xs, wide, dims), ga.shape());
      }
      columns.push_back(b.reshape(reduce_sum(b, b.mul(xs, ga), reduce), {out_channels, 1}));
    }
    return b.reshape(taps == 1 ? columns[0] : b.concatenate(columns, 1), w_shape);
  };
  ElementType t = accumulation_type(x.dtype());
  if (t != x.dtype()) return grad(b.convert(x, t), b.convert(gy, t));
  return precise(b, c.precision, x, gy, grad);
}

// conv_weight_grad as one dot per kernel tap: dw[g*Og + o, c, t] = sum over
// n, p of gy[n, g*Og + o, p] * x'[n, g*Cg + c, p*stride + t*dilation], x'
// being x padded; each tap's strided slice of x' is contracted with gy over
// the batch and the output positions (the groups a batch dimension of the
// dot). XLA:CPU runs the convolution form of a weight gradient, whose window
// is the whole output, outside its fast convolution kernel.
Value weight_grad_taps(Context& c, Value x, Value gy, const std::vector<int64_t>& w_shape,
                       const ConvParams& p) {
  Builder& b = c.b;
  size_t n = x.rank() - 2;
  int64_t batch = x.dim(0), groups = p.groups, in_group = x.dim(1) / groups,
          out_group = gy.dim(1) / groups, positions = 1;
  std::vector<int64_t> k = tail(w_shape, 2), low(n + 2, 0);
  for (size_t i = 0; i < n; ++i) {
    low[i + 2] = p.padding[i];
    positions *= gy.dim(i + 2);
  }
  int64_t taps = kernel_taps(w_shape);
  Value padded = b.pad(x, b.zeros(TensorType{x.dtype(), {}}), low, low);
  Value g = b.reshape(gy, {batch, groups, out_group, positions});
  DotDims dims{{1}, {1}, {0, 3}, {0, 3}};
  Values columns;
  for (int64_t tap = 0; tap < taps; ++tap) {
    Value xs = b.reshape(tap_slice(b, padded, gy, k, p, tap), {batch, groups, in_group, positions});
    Value col = precise_dot(c, g, xs, dims, /*keep_f32=*/true);  // (G, Og, Cg)
    columns.push_back(b.reshape(col, {groups, out_group, in_group, 1}));
  }
  Value dw = taps == 1 ? columns[0] : b.concatenate(columns, 3);
  return b.reshape(dw, w_shape);
}

// Kernels with more taps than this keep the convolution form of the weight
// gradient (a program of that many dots compiles slowly).
constexpr int64_t kMaxWeightGradTaps = 64;

// Whether a weight gradient runs as weight_grad_taps: on XLA:CPU, for 2-D and
// 3-D kernels, whose convolution form its convolution kernel runs slowly
// (benchmarks/conv.py, fwd+bwd against CPU eager: dense2d_7x7 2.7x -> 2.0x,
// dense3d_3 2.9x -> 2.0x, strided, grouped and dilated 2-D faster too; the
// weight gradient alone of dense2d_7x7 6.2 ms -> 3.9 ms, CPU 0.45 ms). 1-D
// ones keep the convolution, which was as fast or faster (dense1d_k3).
bool weight_grad_by_taps(const Context& c, const std::vector<int64_t>& w_shape) {
  int64_t taps = kernel_taps(w_shape);
  return c.target.xla_cpu && w_shape.size() >= 4 && taps > 0 && taps <= kMaxWeightGradTaps;
}

bool depthwise_weight_grad(const Context& c, Value x, const std::vector<int64_t>& w_shape,
                           const ConvParams& p) {
  int64_t taps = kernel_taps(w_shape);
  return depthwise_as_taps(c.target) && !p.transposed && p.groups > 1 &&
         p.groups == x.dim(1) && w_shape[1] == 1 && taps > 0 && taps <= kMaxTaps;
}

Value add_bias(Builder& b, Value y, Value bias) {
  return b.add(y, b.broadcast_in_dim(b.convert(bias, y.dtype()), y.shape(), {1}));
}

Values convolution(Context& c, const Args& a) {
  Value x = a[0].tensor, w = a[1].tensor;
  ConvParams p = conv_params(a, x.rank() - 2);
  Value y = cpu_col2im(c, p, x.dtype()) ? conv_transposed_col2im(c, x, w, p)
            : p.transposed ? conv_transposed(c, x, w, p) : conv_forward(c, x, w, p);
  if (!a[2].none()) y = add_bias(c.b, y, a[2].tensor);
  return {c.b.convert(y, c.out().dtype)};
}

// The output_padding that makes a transposed convolution of gy recover the
// input extent of the forward convolution.
std::vector<int64_t> recovering_padding(Value x, Value w, Value gy, const ConvParams& p) {
  std::vector<int64_t> out;
  for (int64_t i = 2; i < x.rank(); ++i) {
    size_t s = i - 2;
    int64_t reached = (gy.dim(i) - 1) * p.stride[s] - 2 * p.padding[s] +
                      p.dilation[s] * (w.dim(i) - 1) + 1;
    out.push_back(x.dim(i) - reached);
  }
  return out;
}

Value bias_grad(Builder& b, Value gy) {
  std::vector<int64_t> dims{0};
  for (int64_t i = 2; i < gy.rank(); ++i) dims.push_back(i);
  return reduce_sum(b, b.convert(gy, accumulation_type(gy.dtype())), dims);
}

// (grad_input, grad_weight, grad_bias); the ones output_mask leaves out are
// zeros (the meta kernel gives every output a shape, see aten/conv_meta.cc).
Values convolution_backward(Context& c, const Args& a) {
  Value gy = a[0].tensor, x = a[1].tensor, w = a[2].tensor;
  ConvParams p = conv_params(a, x.rank() - 2);
  const std::vector<bool>& mask = a[9].bools;
  Values grads(3);
  if (mask[0]) {
    ConvParams back = p;
    back.output_padding = recovering_padding(x, w, gy, p);
    // A transposed convolution's output_padding rows reach no input: crop.
    grads[0] = p.transposed ? crop(c.b, conv_forward(c, gy, w, p), x.shape())
                            : conv_transposed(c, gy, w, back);
  }
  if (mask[1])
    grads[1] = depthwise_weight_grad(c, x, w.shape(), p)
                   ? depthwise_weight_grad_taps(c, x, gy, w.shape(), p)
               : weight_grad_by_taps(c, w.shape())
                   ? (p.transposed ? weight_grad_taps(c, gy, x, w.shape(), p)
                                   : weight_grad_taps(c, x, gy, w.shape(), p))
               : p.transposed ? conv_weight_grad(c, gy, x, w.shape(), p)
                            : conv_weight_grad(c, x, gy, w.shape(), p);
  if (mask[2]) grads[2] = bias_grad(c.b, gy);
  for (size_t i = 0; i < 3; ++i)
    grads[i] = grads[i].valid() ? c.b.convert(grads[i], c.out(i).dtype) : c.b.zeros(c.out(i));
  return grads;
}

}  // namespace

void register_conv(Registry& r) {
  r.add("aten::convolution_overrideable", convolution);
  r.add("aten::convolution_backward_overrideable", convolution_backward);
  register_pool(r);
  register_upsample(r);
}

}  // namespace torch_tpu::lowering
