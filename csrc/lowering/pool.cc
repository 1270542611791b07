// Pooling, forward and backward: max (with indices), average, adaptive and
// fractional, for any number of spatial dims (the 1d forms reach the backend
// as 2d).
// Fixed windows are reduce_windows; adaptive windows, whose sizes vary, are
// gathers (max) or 0/1 matrices (average). Max indices are flat positions in
// the input's spatial dims, the first maximum winning as on CPU, so every max
// backward is one scatter-add through the indices.
#include <cstdint>

#include "conv_family.h"
#include "indexing.h"

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;
using Padding = std::vector<std::pair<int64_t, int64_t>>;

// A pooling window over all dims of the input: the leading (batch, channel)
// dims get a window of one.
struct Window {
  std::vector<int64_t> kernel, stride, dilation;
  Padding padding;
};

// Spatial dims are the last `n`; `out` is the pooled shape PyTorch computed
// (ceil_mode included), reached by padding the high side as far as needed.
Window pool_window(Value x, const std::vector<int64_t>& out, size_t n, const Args& a,
                   size_t kernel_arg, int64_t dilation_arg) {
  std::vector<int64_t> k = expand(a[kernel_arg].ints, n);
  std::vector<int64_t> s = a[kernel_arg + 1].ints.empty() ? k : expand(a[kernel_arg + 1].ints, n);
  std::vector<int64_t> p = expand(a[kernel_arg + 2].ints, n);
  std::vector<int64_t> d = dilation_arg < 0 ? std::vector<int64_t>(n, 1)
                                            : expand(a[dilation_arg].ints, n);
  size_t lead = x.rank() - n;
  Window w{std::vector<int64_t>(lead, 1), std::vector<int64_t>(lead, 1),
           std::vector<int64_t>(lead, 1), Padding(lead, {0, 0})};
  for (size_t i = 0; i < n; ++i) {
    int64_t reach = (out[lead + i] - 1) * s[i] + d[i] * (k[i] - 1) + 1;
    w.kernel.push_back(k[i]);
    w.stride.push_back(s[i]);
    w.dilation.push_back(d[i]);
    w.padding.emplace_back(p[i], std::max<int64_t>(0, reach - x.dim(lead + i) - p[i]));
  }
  return w;
}

// Max of (value, index) pairs: NaN above everything (the last NaN wins, as in
// CPU's `val > max || isnan(val)` scan), ties to the smaller index.
Values argmax_body(Builder& b, const Values& v) {
  Value av = v[0], ai = v[1], bv = v[2], bi = v[3];
  Value a_nan = b.compare(Compare::kNE, av, av), b_nan = b.compare(Compare::kNE, bv, bv);
  Value a_num = b.not_(a_nan);
  Value later = b.compare(Compare::kGT, bi, ai);
  Value better = b.or_(b.compare(Compare::kGT, bv, av),
                       b.and_(b.compare(Compare::kEQ, bv, av), b.not_(later)));
  Value pick_b = b.select(b_nan, b.or_(a_num, later), b.and_(a_num, better));
  return {b.select(pick_b, bv, av), b.select(pick_b, bi, ai)};
}

Values argmax_inits(Builder& b, ElementType t) {
  return {b.constant(t, lowest(t)), b.constant_int(ElementType::kI64, INT64_MAX)};
}

// The flat spatial position of every element of a tensor of `shape`.
Value flat_positions(Builder& b, const std::vector<int64_t>& shape, size_t n) {
  std::vector<int64_t> spatial = tail(shape, shape.size() - n);
  int64_t count = 1;
  for (int64_t s : spatial) count *= s;
  Value flat = b.reshape(b.iota(TensorType{ElementType::kI64, {count}}, 0), spatial);
  std::vector<int64_t> dims;
  for (size_t i = 0; i < n; ++i) dims.push_back(static_cast<int64_t>(shape.size() - n + i));
  return b.broadcast_in_dim(flat, shape, dims);
}

// max_pool{2,3}d_with_indices(self, kernel, stride, padding, dilation, ceil).
LoweringFn max_pool(size_t n) {
  return [n](Context& c, const Args& a) {
    Value x = a[0].tensor;
    Window w = pool_window(x, c.out(0).shape, n, a, 1, 4);
    Value pos = flat_positions(c.b, x.shape(), n);
    return c.b.reduce_window({x, pos}, argmax_inits(c.b, x.dtype()), w.kernel, w.stride, {},
                             w.dilation, w.padding, argmax_body);
  };
}

// grad_input[flat index] += grad_output, over the spatial dims of `input`.
Value scatter_by_index(Builder& b, Value grad, Value indices, const TensorType& input, size_t n) {
  size_t lead = input.rank() - n;
  int64_t batch = 1, from = 1, to = 1;
  for (size_t i = 0; i < lead; ++i) batch *= input.shape[i];
  for (size_t i = lead; i < input.shape.size(); ++i) to *= input.shape[i];
  for (size_t i = lead; i < static_cast<size_t>(grad.rank()); ++i) from *= grad.dim(i);
  ElementType acc = accumulation_type(input.dtype);
  Value updates = b.reshape(b.convert(grad, acc), {batch, from});
  Value rows = b.iota(TensorType{ElementType::kI64, {batch, from, 1}}, 0);
  Value where = b.concatenate({rows, b.reshape(indices, {batch, from, 1})}, 2);
  hlo::ScatterDims d;
  d.inserted_window_dims = {0, 1};
  d.scatter_dims_to_operand_dims = {0, 1};
  d.index_vector_dim = 2;
  Value zeros = b.zeros(TensorType{acc, {batch, to}});
  Value sum = b.scatter(zeros, where, updates, d,
                        [](Builder& r, const Values& v) { return Values{r.add(v[0], v[1])}; });
  return b.convert(b.reshape(sum, input.shape), input.dtype);
}

// max_pool*_with_indices_backward(grad, self, ..., indices) and
// adaptive_max_pool*_backward(grad, self, indices).
LoweringFn max_pool_backward(size_t n, size_t indices_arg) {
  return [n, indices_arg](Context& c, const Args& a) {
    return Values{scatter_by_index(c.b, a[0].tensor, a[indices_arg].tensor, c.out(), n)};
  };
}

Value window_sum(Builder& b, Value x, const Window& w, const std::vector<int64_t>& base = {}) {
  return b.reduce_window({x}, {b.constant(x.dtype(), 0)}, w.kernel, w.stride, base, {},
                         w.padding, [](Builder& r, const Values& v) {
                           return Values{r.add(v[0], v[1])};
                         })[0];
}

// What each average is divided by: divisor_override, or the window's
// elements inside the input (count_include_pad: inside input and padding).
Value avg_divisor(Builder& b, Value x, const Window& w, ElementType t, size_t n,
                  bool include_pad, const Arg& divisor) {
  if (!divisor.none()) return b.constant(t, static_cast<double>(divisor.i));
  size_t lead = x.rank() - n;
  Window spatial{tail(w.kernel, lead), tail(w.stride, lead), {}, Padding(w.padding.begin() + lead, w.padding.end())};
  Value ones = b.full(TensorType{t, tail(x.shape(), lead)}, 1);
  if (include_pad) {
    std::vector<int64_t> lo, hi;
    for (auto& [l, h] : spatial.padding) {
      lo.push_back(l);
      hi.push_back(std::min(l, h));
      h -= hi.back();
      l = 0;
    }
    ones = b.pad(ones, b.constant(t, 1), lo, hi);
  }
  return window_sum(b, ones, spatial);
}

Value divide_spatial(Builder& b, Value x, Value divisor) {
  std::vector<int64_t> dims;
  for (int64_t i = x.rank() - divisor.rank(); i < x.rank(); ++i) dims.push_back(i);
  return b.div(x, b.broadcast_in_dim(divisor, x.shape(), dims));
}

// avg_pool{2,3}d(self, kernel, stride, padding, ceil, count_include_pad, divisor).
LoweringFn avg_pool(size_t n) {
  return [n](Context& c, const Args& a) {
    Value x = a[0].tensor;
    ElementType t = accumulation_type(x.dtype());
    Window w = pool_window(x, c.out().shape, n, a, 1, -1);
    Value sum = window_sum(c.b, c.b.convert(x, t), w);
    Value divisor = avg_divisor(c.b, x, w, t, n, a[5].b, a[6]);
    return Values{c.b.convert(divide_spatial(c.b, sum, divisor), c.out().dtype)};
  };
}

// avg_pool*_backward(grad, self, kernel, stride, padding, ceil, include_pad,
// divisor): every input position gathers the scaled gradients of the windows
// covering it, a unit-stride window sum over the stride-dilated gradient.
LoweringFn avg_pool_backward(size_t n) {
  return [n](Context& c, const Args& a) {
    Value g = a[0].tensor, x = a[1].tensor;
    ElementType t = accumulation_type(x.dtype());
    Window w = pool_window(x, g.shape(), n, a, 2, -1);
    g = divide_spatial(c.b, c.b.convert(g, t), avg_divisor(c.b, x, w, t, n, a[6].b, a[7]));
    Window back{w.kernel, std::vector<int64_t>(x.rank(), 1), {}, {}};
    std::vector<int64_t> start(x.rank(), 0), limit = x.shape();
    for (int64_t i = 0; i < x.rank(); ++i) {
      int64_t p = w.padding[i].first, covered = (g.dim(i) - 1) * w.stride[i] + 1;
      back.padding.emplace_back(w.kernel[i] - 1, std::max<int64_t>(0, p + x.dim(i) - covered));
      start[i] = p;
      limit[i] += p;
    }
    Value spread = window_sum(c.b, g, back, w.stride);
    return Values{c.b.convert(c.b.slice(spread, start, limit), c.out().dtype)};
  };
}

// ---- adaptive windows: [floor(i*in/out), ceil((i+1)*in/out)) -------------

struct Adaptive {
  std::vector<int64_t> start, end;
  int64_t longest = 0;
};

Adaptive adaptive(int64_t in, int64_t out) {
  Adaptive w;
  for (int64_t i = 0; i < out; ++i) {
    w.start.push_back(i * in / out);
    w.end.push_back(((i + 1) * in + out - 1) / out);
    w.longest = std::max(w.longest, w.end.back() - w.start.back());
  }
  return w;
}

// m[o, i] = 1 where input i lies in window o, in dtype t.
Value window_matrix(Builder& b, const Adaptive& w, int64_t in, ElementType t) {
  int64_t out = static_cast<int64_t>(w.start.size());
  std::vector<int64_t> shape{out, in};
  Value i = b.iota(TensorType{ElementType::kI64, shape}, 1);
  Value lo = b.broadcast_in_dim(b.constant_i64_vector(w.start), shape, {0});
  Value hi = b.broadcast_in_dim(b.constant_i64_vector(w.end), shape, {0});
  Value inside = b.and_(b.compare(Compare::kGE, i, lo), b.compare(Compare::kLT, i, hi));
  return b.convert(inside, t);
}

// x with dim `dim` contracted against m[new, old], the new extent in place.
Value apply_along(Builder& b, Value x, int64_t dim, Value m) {
  Value y = b.dot_general(x, m, {}, {}, {dim}, {1}, x.dtype(), "HIGHEST");
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < x.rank() - 1; ++i) {
    if (i == dim) perm.push_back(x.rank() - 1);
    perm.push_back(i);
  }
  if (dim == x.rank() - 1) perm.push_back(dim);
  return b.transpose(y, perm);
}

// The number of inputs in each adaptive window, over the spatial dims.
Value window_counts(Builder& b, const std::vector<Adaptive>& ws, ElementType t) {
  std::vector<int64_t> shape;
  for (const Adaptive& w : ws) shape.push_back(static_cast<int64_t>(w.start.size()));
  Value counts = b.full(TensorType{t, shape}, 1);
  for (size_t i = 0; i < ws.size(); ++i) {
    Value len = b.sub(b.constant_i64_vector(ws[i].end), b.constant_i64_vector(ws[i].start));
    counts = b.mul(counts, b.broadcast_in_dim(b.convert(len, t), shape, {static_cast<int64_t>(i)}));
  }
  return counts;
}

// Positions read for window slot t of window o: start + t, repeated at the
// window's last input where the window is shorter than the longest.
std::vector<int64_t> window_reads(const Adaptive& w) {
  std::vector<int64_t> reads;
  for (size_t o = 0; o < w.start.size(); ++o)
    for (int64_t t = 0; t < w.longest; ++t) reads.push_back(std::min(w.start[o] + t, w.end[o] - 1));
  return reads;
}

// CPU's 3-d adaptive average for 16-bit floats (AdaptiveAveragePooling3d.cpp)
// computes in the tensor's own type: each window summed in order (depth,
// then height, then width), every partial sum rounded, then divided by kd,
// kh and kw in turn, each quotient rounded. The windows are read once as
// zero-padded blocks [lead..., out, longest, ...] (as adaptive max pooling
// reads them); a loop then adds slot after slot.
Value in_order_average(Builder& b, Value x, const std::vector<Adaptive>& ws, ElementType t) {
  const ElementType f32 = ElementType::kF32, i64 = ElementType::kI64;
  size_t n = ws.size(), lead = x.rank() - n;
  Value blocks = b.convert(x, f32);
  std::vector<int64_t> shape(x.shape().begin(), x.shape().begin() + static_cast<std::ptrdiff_t>(lead));
  std::vector<int64_t> out = shape;
  for (size_t i = n; i-- > 0;) {
    const Adaptive& w = ws[i];
    blocks = take(b, blocks, static_cast<int64_t>(lead + i), b.constant_i64_vector(window_reads(w)));
    shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(lead),
                 {static_cast<int64_t>(w.start.size()), w.longest});
  }
  blocks = b.reshape(blocks, shape);
  int64_t slots = 1;
  for (size_t i = 0; i < n; ++i) {  // slots past a window's end read zero
    const Adaptive& w = ws[i];
    int64_t outs = static_cast<int64_t>(w.start.size());
    out.push_back(outs);
    slots *= w.longest;
    Value len = b.sub(b.constant_i64_vector(w.end), b.constant_i64_vector(w.start));
    Value inside = b.compare(Compare::kLT, b.iota(TensorType{i64, {outs, w.longest}}, 1),
                             b.broadcast_in_dim(len, {outs, w.longest}, {0}));
    int64_t d = static_cast<int64_t>(lead + 2 * i);
    inside = b.broadcast_in_dim(inside, shape, {d, d + 1});
    blocks = b.select(inside, blocks, splat_like(b, 0, blocks));
  }
  Values done = b.while_loop(
      {b.constant_int(i64, 0), b.zeros(TensorType{f32, out}), blocks},
      [slots](Builder& w, const Values& st) {
        return Values{w.compare(Compare::kLT, st[0], w.constant_int(ElementType::kI64, slots))};
      },
      [&ws, n, lead, t, out](Builder& w, const Values& st) {
        Value blk = st[2];
        Values starts(blk.rank(), w.constant_int(ElementType::kI64, 0));
        std::vector<int64_t> sizes = blk.shape();
        int64_t stride = 1;
        for (size_t i = n; i-- > 0;) {  // width fastest
          int64_t d = static_cast<int64_t>(lead + 2 * i + 1);
          starts[d] = w.rem(w.div(st[0], w.constant_int(ElementType::kI64, stride)),
                            w.constant_int(ElementType::kI64, ws[i].longest));
          sizes[d] = 1;
          stride *= ws[i].longest;
        }
        Value v = w.reshape(w.dynamic_slice(blk, starts, sizes), out);
        return Values{w.add(st[0], w.constant_int(ElementType::kI64, 1)),
                      round_like(w, w.add(st[1], v), t), blk};
      });
  Value y = done[1];
  for (size_t i = 0; i < n; ++i) {
    Value len = b.sub(b.constant_i64_vector(ws[i].end), b.constant_i64_vector(ws[i].start));
    y = round_like(b, b.div(y, b.broadcast_in_dim(b.convert(len, f32), y.shape(),
                                                  {static_cast<int64_t>(lead + i)})), t);
  }
  return y;
}

// Averages over adaptive windows from `x` (spatial extents `from`) to `to`;
// `backward` spreads each output gradient back over its window instead.
Value adaptive_average(Builder& b, Value x, const std::vector<int64_t>& in,
                       const std::vector<int64_t>& out, bool backward) {
  size_t n = in.size(), lead = x.rank() - n;
  ElementType t = accumulation_type(x.dtype());
  std::vector<Adaptive> ws;
  for (size_t i = 0; i < n; ++i) ws.push_back(adaptive(in[i], out[i]));
  if (!backward && n == 3 && is_half(x.dtype())) return in_order_average(b, x, ws, x.dtype());
  Value y = b.convert(x, t);
  if (backward) y = divide_spatial(b, y, window_counts(b, ws, t));
  for (size_t i = 0; i < n; ++i) {
    Value m = window_matrix(b, ws[i], in[i], t);
    y = apply_along(b, y, static_cast<int64_t>(lead + i), backward ? b.transpose(m, {1, 0}) : m);
  }
  if (backward) return y;
  // CPU divides each window's sum by its extents one at a time (sum / kd /
  // kh / kw), each quotient rounded: not by their product.
  for (size_t i = 0; i < n; ++i) {
    Value len = b.sub(b.constant_i64_vector(ws[i].end), b.constant_i64_vector(ws[i].start));
    y = b.div(y, b.broadcast_in_dim(b.convert(len, t), y.shape(), {static_cast<int64_t>(lead + i)}));
  }
  return y;
}

// _adaptive_avg_pool{2,3}d(self, output_size).
LoweringFn adaptive_avg_pool(size_t n) {
  return [n](Context& c, const Args& a) {
    Value x = a[0].tensor;
    Value y = adaptive_average(c.b, x, tail(x.shape(), x.rank() - n),
                               tail(c.out().shape, x.rank() - n), false);
    return Values{c.b.convert(y, c.out().dtype)};
  };
}

// _adaptive_avg_pool{2,3}d_backward(grad, self).
LoweringFn adaptive_avg_pool_backward(size_t n) {
  return [n](Context& c, const Args& a) {
    Value g = a[0].tensor, x = a[1].tensor;
    Value y = adaptive_average(c.b, g, tail(x.shape(), x.rank() - n),
                               tail(g.shape(), g.rank() - n), true);
    return Values{c.b.convert(y, c.out().dtype)};
  };
}

// adaptive_max_pool{2,3}d(self, output_size) -> (values, indices): every
// window read as a padded block [out..., longest...] and reduced.
LoweringFn adaptive_max_pool(size_t n) {
  return [n](Context& c, const Args& a) {
    Value x = a[0].tensor;
    size_t lead = x.rank() - n;
    Value pos = flat_positions(c.b, x.shape(), n);
    std::vector<int64_t> blocks = tail(x.shape(), 0), reduced;
    blocks.resize(lead);
    for (size_t i = n; i-- > 0;) {
      int64_t dim = static_cast<int64_t>(lead + i);
      Adaptive w = adaptive(x.dim(dim), c.out(0).shape[dim]);
      Value reads = c.b.constant_i64_vector(window_reads(w));
      x = take(c.b, x, dim, reads);
      pos = take(c.b, pos, dim, reads);
      blocks.insert(blocks.begin() + static_cast<std::ptrdiff_t>(lead),
                    {static_cast<int64_t>(w.start.size()), w.longest});
    }
    x = c.b.reshape(x, blocks);
    pos = c.b.reshape(pos, blocks);
    for (size_t i = 0; i < n; ++i) reduced.push_back(static_cast<int64_t>(lead + 2 * i + 1));
    Values v = c.b.reduce({x, pos}, argmax_inits(c.b, x.dtype()), reduced, argmax_body);
    return Values{v[0], v[1]};
  };
}

// fractional_max_pool{2,3}d(self, kernel_size, output_size, random_samples)
// -> (values, indices). Each plane's windows start where CPU's do, from one
// random number u per plane and spatial dim (samples [N, C, n]: 2-d takes W
// from u[0] and H from u[1], 3-d T, H, W from u[0], u[1], u[2]): start[o] =
// trunc((o + u) * alpha) - trunc(u * alpha), alpha = (in - k) / (out - 1), in
// the samples' type, and the last window at in - k. The windows are gathered
// as [N, C, out..., k...] and reduced as max_pool's (the first maximum wins,
// NaN above all); indices are flat positions in the plane.
LoweringFn fractional_max_pool(size_t n) {
  return [n](Context& c, const Args& a) {
    Builder& b = c.b;
    const ElementType i64 = ElementType::kI64;
    Value x = a[0].tensor, u = a[3].tensor;
    const bool batched = x.rank() == static_cast<int64_t>(n) + 2;
    if (!batched) {
      std::vector<int64_t> one{1};
      one.insert(one.end(), x.shape().begin(), x.shape().end());
      x = b.reshape(x, one);
    }
    std::vector<int64_t> k = expand(a[1].ints, n), out = expand(a[2].ints, n);
    std::vector<int64_t> in = tail(x.shape(), 2);
    const int64_t planes_n = x.dim(0), channels = x.dim(1);
    std::vector<int64_t> shape{planes_n, channels};
    shape.insert(shape.end(), out.begin(), out.end());
    shape.insert(shape.end(), k.begin(), k.end());
    const std::vector<int64_t> sample_of = n == 2 ? std::vector<int64_t>{1, 0}
                                                  : std::vector<int64_t>{0, 1, 2};
    ElementType t = u.dtype();
    Value pos = b.zeros(TensorType{i64, shape});
    int64_t stride = 1;
    for (size_t i = n; i-- > 0;) {
      const int64_t o = out[i], last = in[i] - k[i];
      TensorType starts_t{i64, {planes_n, channels, o}};
      Value starts = b.full(starts_t, static_cast<double>(last));
      if (o > 1) {
        int64_t s = sample_of[i];
        Value ui = b.reshape(b.slice(u, {0, 0, s}, {planes_n, channels, s + 1}, {1, 1, 1}),
                             {planes_n, channels});
        Value ub = b.broadcast_in_dim(ui, starts_t.shape, {0, 1});
        Value alpha = b.div(b.full(TensorType{t, starts_t.shape}, static_cast<double>(last)),
                            b.full(TensorType{t, starts_t.shape}, static_cast<double>(o - 1)));
        Value idx = b.iota(starts_t, 2);
        Value from = b.sub(b.convert(b.mul(b.add(b.convert(idx, t), ub), alpha), i64),
                           b.convert(b.mul(ub, alpha), i64));
        Value is_last = b.compare(Compare::kEQ, idx, b.full(starts_t, static_cast<double>(o - 1)));
        starts = b.select(is_last, starts, from);
      }
      Value at = b.add(b.broadcast_in_dim(starts, shape, {0, 1, static_cast<int64_t>(2 + i)}),
                       b.iota(TensorType{i64, shape}, static_cast<int64_t>(2 + n + i)));
      pos = b.add(pos, b.mul(at, b.full(TensorType{i64, shape}, static_cast<double>(stride))));
      stride *= in[i];
    }
    Value flat = b.reshape(x, {planes_n, channels, stride});
    Values where{b.iota(TensorType{i64, shape}, 0), b.iota(TensorType{i64, shape}, 1), pos};
    Value values = index_gather(b, flat, where, TensorType{x.dtype(), shape});
    std::vector<int64_t> taps;
    for (size_t i = 0; i < n; ++i) taps.push_back(static_cast<int64_t>(2 + n + i));
    Values v = b.reduce({values, pos}, argmax_inits(b, x.dtype()), taps, argmax_body);
    if (!batched) {
      for (Value& r : v) r = b.reshape(r, tail(r.shape(), 1));
    }
    return v;
  };
}

}  // namespace

void register_pool(Registry& r) {
  for (size_t n : {2, 3}) {
    std::string d = std::to_string(n) + "d";
    r.add("aten::max_pool" + d + "_with_indices", max_pool(n));
    r.add("aten::max_pool" + d + "_with_indices_backward", max_pool_backward(n, 7));
    r.add("aten::avg_pool" + d, avg_pool(n));
    r.add("aten::avg_pool" + d + "_backward", avg_pool_backward(n));
    r.add("aten::_adaptive_avg_pool" + d, adaptive_avg_pool(n));
    r.add("aten::_adaptive_avg_pool" + d + "_backward", adaptive_avg_pool_backward(n));
    r.add("aten::adaptive_max_pool" + d, adaptive_max_pool(n));
    r.add("aten::adaptive_max_pool" + d + "_backward", max_pool_backward(n, 2));
    r.add("aten::fractional_max_pool" + d, fractional_max_pool(n));
    r.add("aten::fractional_max_pool" + d + "_backward", max_pool_backward(n, 4));
  }
}

}  // namespace torch_tpu::lowering
