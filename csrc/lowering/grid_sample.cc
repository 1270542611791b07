// Grid sampling (F.grid_sample), forward and backward, over 2 or 3 spatial
// dims: grid_sampler_{2,3}d(input [N, C, S...], grid [N, O..., k],
// interpolation, padding, align_corners). Grid component i addresses spatial
// dim k-1-i (x is the last). A grid value in [-1, 1] maps to a source
// coordinate, which is padded (0 zeros, 1 border, 2 reflection) and read
// (0 bilinear, 1 nearest, 2 bicubic) from taps: integer positions with a
// weight and the weight's derivative. Taps outside the input read zero.
// Registered from register_misc_sampling (misc_sampling.cc).
#include "helpers.h"

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;
constexpr ElementType kI64 = ElementType::kI64;

enum Interp { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum Padding { kZeros = 0, kBorder = 1, kReflection = 2 };

// A source coordinate and its derivative by the grid coordinate.
struct Coord {
  Value v, grad;
};

Value full_like(Builder& b, Value like, double v) { return splat_like(b, v, like); }

// Arithmetic as CPU's kernels do it in the tensor's dtype `t`: c10::Half and
// Vectorized<Half> (BFloat16 alike) compute each op in f32 and round it to
// the 16-bit type, so here every op rounds (round_like); f32 is unchanged.
// Values are f32 for 16-bit tensors.
struct Num {
  Builder& b;
  ElementType t;
  Value r(Value v) const { return round_like(b, v, t); }
  Value add(Value x, Value y) const { return r(b.add(x, y)); }
  Value sub(Value x, Value y) const { return r(b.sub(x, y)); }
  Value mul(Value x, Value y) const { return r(b.mul(x, y)); }
  Value div(Value x, Value y) const { return r(b.div(x, y)); }
  Value k(Value like, double v) const { return r(full_like(b, like, v)); }
};

// clip_coordinates_set_grad: into [0, size-1]; the derivative is 0 outside.
Coord clip(const Num& n, Coord c, int64_t size) {
  Builder& b = n.b;
  Value lo = full_like(b, c.v, 0), hi = n.k(c.v, static_cast<double>(size - 1));
  Value inside = b.and_(b.compare(Compare::kGT, c.v, lo), b.compare(Compare::kLT, c.v, hi));
  Value v = b.select(b.compare(Compare::kLE, c.v, lo), lo, b.select(inside, c.v, hi));
  return {v, b.select(inside, c.grad, full_like(b, c.v, 0))};
}

// reflect_coordinates_set_grad over [twice_low/2, twice_high/2], as the
// scalar (3-d) kernel computes it: fmod, and flips = floor(d / span).
Coord reflect(const Num& n, Coord c, int64_t twice_low, int64_t twice_high) {
  Builder& b = n.b;
  if (twice_low == twice_high) return {full_like(b, c.v, 0), full_like(b, c.v, 0)};
  Value two = full_like(b, c.v, 2);
  Value lo = n.div(n.k(c.v, static_cast<double>(twice_low)), two);
  Value span = n.div(n.k(c.v, static_cast<double>(twice_high - twice_low)), two);
  Value d = n.sub(c.v, lo);
  Value neg = b.compare(Compare::kLT, d, full_like(b, d, 0));
  Value sign = b.select(neg, full_like(b, d, -1), full_like(b, d, 1));
  d = b.abs(d);
  Value extra = b.rem(d, span);
  Value flips = b.floor(n.div(d, span));
  Value even = b.compare(Compare::kEQ, b.rem(flips, two), full_like(b, d, 0));
  Value v = b.select(even, n.add(extra, lo), n.add(n.sub(span, extra), lo));
  return {v, b.mul(c.grad, b.select(even, sign, b.neg(sign)))};
}

// The vectorized (2-d) kernel's reflection: whole double flips taken off
// with trunc(|c - low| / twice_span), then one more flip where the rest
// lies past the span.
Coord reflect_vec(const Num& n, Coord c, int64_t size, bool align) {
  Builder& b = n.b;
  if (align && size <= 1) return {full_like(b, c.v, 0), full_like(b, c.v, 0)};
  Value twice = n.mul(n.k(c.v, static_cast<double>(align ? size - 1 : size)), full_like(b, c.v, 2));
  Value low = full_like(b, c.v, align ? 0 : -0.5);
  Value d = align ? c.v : n.sub(c.v, low);
  Value neg = b.compare(Compare::kLT, d, full_like(b, d, 0));
  d = b.abs(d);
  Value extra = n.sub(d, n.mul(b.floor(n.div(d, twice)), twice));
  Value back = n.sub(twice, extra);
  Value flip = b.compare(Compare::kGT, extra, back);
  Value v = b.select(flip, back, extra);
  if (!align) v = n.add(v, low);
  Value sign = b.select(b.xor_(flip, neg), full_like(b, d, -1), full_like(b, d, 1));
  return {v, b.mul(c.grad, sign)};
}

// grid_sampler_unnormalize_set_grad.
Coord unnormalize(const Num& n, Value g, int64_t size, bool align) {
  Builder& b = n.b;
  Value scale = n.div(n.k(g, static_cast<double>(align ? size - 1 : size)), full_like(b, g, 2));
  // Opaque, so no fused multiply-add, and reflection's "- low" does not
  // cancel the "- 0.5" (XLA folds (v - 0.5) + 0.5 to v; CPU rounds twice).
  Value v = unfused(b, n.mul(n.add(g, full_like(b, g, 1)), scale));
  if (!align) v = unfused(b, n.sub(v, full_like(b, g, 0.5)));
  return {v, scale};
}

// compute_coordinates_set_grad: the padding applied to a source coordinate;
// `k` spatial dims pick the kernel's reflection (vectorized for 2).
Coord pad_coord(const Num& n, Coord c, int64_t k, int64_t size, int64_t padding, bool align) {
  if (padding == kBorder) return clip(n, c, size);
  if (padding == kReflection) {
    if (k == 2) c = reflect_vec(n, c, size, align);
    else c = align ? reflect(n, c, 0, 2 * (size - 1)) : reflect(n, c, -1, 2 * size - 1);
    return clip(n, c, size);
  }
  return c;
}

// One spatial dim's taps: positions [N, O...] with weights and d weight / d coord.
struct Taps1 {
  std::vector<Value> index, weight, dweight;
  Value coord_grad;  // d coord / d grid
};

// Cubic convolution coefficients (A = -0.75) at distances t+1, t, 1-t, 2-t,
// and their derivatives by t, in the order CPU's kernel evaluates them.
void cubic(const Num& n, Value t, std::vector<Value>& w, std::vector<Value>& dw) {
  const double A = -0.75;
  auto k = [&](double v) { return full_like(n.b, t, v); };
  auto near = [&](Value x) {  // ((A+2)x - (A+3)) x^2 + 1
    return n.add(n.mul(n.mul(n.sub(n.mul(k(A + 2), x), k(A + 3)), x), x), k(1));
  };
  auto far = [&](Value x) {  // ((A x - 5A) x + 8A) x - 4A
    return n.sub(n.mul(n.add(n.mul(n.sub(n.mul(k(A), x), k(5 * A)), x), k(8 * A)), x), k(4 * A));
  };
  auto dnear = [&](Value x) {  // 3(A+2)x^2 - 2(A+3)x
    return n.mul(n.sub(n.mul(k(3 * (A + 2)), x), k(2 * (A + 3))), x);
  };
  auto dfar = [&](Value x) {  // 3A x^2 - 10A x + 8A
    return n.add(n.mul(n.sub(n.mul(k(3 * A), x), k(10 * A)), x), k(8 * A));
  };
  Value one = k(1), two = k(2);
  Value x0 = n.add(t, one), x2 = n.sub(one, t), x3 = n.sub(two, t);
  w = {far(x0), near(t), near(x2), far(x3)};
  dw = {dfar(x0), dnear(t), n.b.neg(dnear(x2)), n.b.neg(dfar(x3))};
}

Taps1 taps1(const Num& n, Value g, int64_t k, int64_t size, int64_t interp, int64_t padding,
            bool align) {
  Builder& b = n.b;
  Taps1 r;
  Coord c = unnormalize(n, g, size, align);
  if (interp == kBicubic) {
    r.coord_grad = c.grad;
    Value f = b.floor(c.v);
    cubic(n, n.sub(c.v, f), r.weight, r.dweight);
    for (int i = 0; i < 4; ++i) {
      Coord p = pad_coord(n, {b.add(f, full_like(b, f, i - 1)), c.grad}, k, size, padding, align);
      r.index.push_back(b.convert(p.v, kI64));
    }
    return r;
  }
  c = pad_coord(n, c, k, size, padding, align);
  r.coord_grad = c.grad;
  if (interp == kNearest) {
    r.index = {b.convert(b.unary("stablehlo.round_nearest_even", c.v), kI64)};
    r.weight = {full_like(b, c.v, 1)};
    r.dweight = {full_like(b, c.v, 0)};
    return r;
  }
  Value f = b.floor(c.v), t = n.sub(c.v, f);
  Value i0 = b.convert(f, kI64);
  r.index = {i0, b.add(i0, full_like(b, i0, 1))};
  // The low weight rounds as CPU's kernels round it: 1 - t in the vectorized
  // 2-d kernel, (floor + 1) - coord in the scalar 3-d one.
  r.weight = {k == 3 ? n.sub(b.add(f, full_like(b, f, 1)), c.v) : n.sub(full_like(b, t, 1), t), t};
  r.dweight = {full_like(b, t, -1), full_like(b, t, 1)};
  return r;
}

// A combined tap: where it reads and with what weights.
struct Tap {
  Value indices, valid;  // i64 [N, O..., 1+k] (n, s...) clamped; i1 [N, O...]
  Value weight;          // [N, O...]
  std::vector<Value> dweight;  // per spatial dim: d weight / d coord
  std::vector<size_t> at;      // per spatial dim: which of its taps
};

struct Sampling {
  std::vector<Taps1> dims;
  std::vector<Tap> taps;
  std::vector<Value> coord_grad;  // per spatial dim
};

// input [N, S..., C] (channels last), grid [N, O..., k].
Sampling sampling(const Num& n, Value input, Value grid, int64_t interp, int64_t padding,
                  bool align) {
  Builder& b = n.b;
  int64_t k = grid.dim(grid.rank() - 1);
  std::vector<int64_t> o(grid.shape().begin(), grid.shape().end() - 1);
  Sampling s;
  std::vector<Taps1>& dims = s.dims;
  for (int64_t d = 0; d < k; ++d) {
    std::vector<int64_t> lo(grid.rank(), 0), hi = grid.shape();
    lo.back() = k - 1 - d;
    hi.back() = k - d;
    Value g = b.reshape(b.slice(grid, lo, hi), o);
    dims.push_back(taps1(n, g, k, input.dim(1 + d), interp, padding, align));
    s.coord_grad.push_back(dims.back().coord_grad);
  }
  std::vector<int64_t> col = o;
  col.push_back(1);
  Value batch = b.reshape(b.iota({kI64, o}, 0), col);
  std::vector<size_t> at(k, 0);  // odometer over the taps of each dim, last fastest
  while (true) {
    Tap t;
    Values cols{batch};
    for (int64_t d = 0; d < k; ++d) {
      const Taps1& td = dims[d];
      Value i = td.index[at[d]];
      int64_t n = input.dim(1 + d);
      Value in = b.and_(b.compare(Compare::kGE, i, full_like(b, i, 0)),
                        b.compare(Compare::kLT, i, full_like(b, i, static_cast<double>(n))));
      t.valid = d == 0 ? in : b.and_(t.valid, in);
      cols.push_back(b.reshape(b.clamp(full_like(b, i, 0), i, full_like(b, i, static_cast<double>(n - 1))), col));
    }
    // x first, as CPU multiplies (wx * wy) * wz.
    for (int64_t d = k - 1; d >= 0; --d)
      t.weight = d == k - 1 ? dims[d].weight[at[d]] : n.mul(t.weight, dims[d].weight[at[d]]);
    t.at = at;
    for (int64_t d = 0; d < k; ++d) {
      Value dw = dims[d].dweight[at[d]];
      for (int64_t e = 0; e < k; ++e)
        if (e != d) dw = b.mul(dw, dims[e].weight[at[e]]);
      t.dweight.push_back(dw);
    }
    t.indices = b.concatenate(cols, static_cast<int64_t>(o.size()));
    s.taps.push_back(t);
    int64_t d = k - 1;
    while (d >= 0 && ++at[d] == dims[d].index.size()) at[d--] = 0;
    if (d < 0) break;
  }
  return s;
}

// [N, O...] to [N, O..., C].
Value per_channel(Builder& b, Value w, int64_t ch) {
  std::vector<int64_t> shape = w.shape(), dims;
  for (int64_t d = 0; d < w.rank(); ++d) dims.push_back(d);
  shape.push_back(ch);
  return b.broadcast_in_dim(w, shape, dims);
}

// input [N, S..., C] at the tap: [N, O..., C], zero where invalid.
Value read(Builder& b, Value input, const Tap& t) {
  int64_t r = t.valid.rank(), ch = input.dim(input.rank() - 1);
  std::vector<int64_t> shape = t.valid.shape(), sizes(input.rank(), 1);
  shape.push_back(ch);
  sizes.back() = ch;
  hlo::GatherDims d;
  d.offset_dims = {r};
  for (int64_t i = 0; i < input.rank() - 1; ++i) d.collapsed_slice_dims.push_back(i);
  d.start_index_map = d.collapsed_slice_dims;
  d.index_vector_dim = r;
  Value v = b.gather(input, t.indices, d, sizes, TensorType{input.dtype(), shape});
  return b.select(per_channel(b, t.valid, ch), v, full_like(b, v, 0));
}

// `acc` [N, S..., C] plus `update` [N, O..., C] at the tap (valid only).
Value write(Builder& b, Value acc, Value update, const Tap& t) {
  int64_t r = t.valid.rank();
  update = b.select(per_channel(b, t.valid, acc.dim(acc.rank() - 1)), update, full_like(b, update, 0));
  hlo::ScatterDims d;
  d.update_window_dims = {r};
  for (int64_t i = 0; i < acc.rank() - 1; ++i) d.inserted_window_dims.push_back(i);
  d.scatter_dims_to_operand_dims = d.inserted_window_dims;
  d.index_vector_dim = r;
  return b.scatter(acc, t.indices, update, d,
                   [](Builder& q, const Values& v) { return Values{q.add(v[0], v[1])}; });
}

// NC[S...] → N[S...]C and back.
std::vector<int64_t> to_last(int64_t rank) {
  std::vector<int64_t> p{0};
  for (int64_t d = 2; d < rank; ++d) p.push_back(d);
  p.push_back(1);
  return p;
}
std::vector<int64_t> to_second(int64_t rank) {
  std::vector<int64_t> p{0, rank - 1};
  for (int64_t d = 1; d < rank - 1; ++d) p.push_back(d);
  return p;
}

// Products summed in order, each product rounded (no fused multiply-add in
// f32; and in 16-bit types every step rounds).
Value dot_in_order(const Num& n, const Values& weights, const Values& values) {
  Value y;
  for (size_t i = 0; i < values.size(); ++i) {
    int64_t ch = values[i].dim(values[i].rank() - 1);
    Value v = unfused(n.b, n.mul(per_channel(n.b, weights[i], ch), values[i]));
    y = y.valid() ? n.add(y, v) : v;
  }
  return y;
}

// The forward as CPU's kernels sum it: bilinear and nearest over the taps in
// order with combined weights; bicubic (2-d) along x for each of the 4 rows,
// then along y.
Values grid_sampler(Context& c, const Args& a) {
  Value x = a[0].tensor;
  ElementType t = accumulation_type(x.dtype());
  if (c.out().numel() == 0) return {c.b.zeros(c.out())};
  Num n{c.b, x.dtype()};
  Value input = c.b.transpose(c.b.convert(x, t), to_last(x.rank()));
  Sampling s = sampling(n, input, c.b.convert(a[1].tensor, t), a[2].i, a[3].i, a[4].b);
  Value y;
  if (a[2].i == kBicubic) {
    Values rows;
    for (size_t j = 0; j < 4; ++j) {
      Values vals;
      for (size_t i = 0; i < 4; ++i) vals.push_back(read(c.b, input, s.taps[4 * j + i]));
      rows.push_back(dot_in_order(n, s.dims[1].weight, vals));
    }
    y = dot_in_order(n, s.dims[0].weight, rows);
  } else {
    Values weights, vals;
    for (const Tap& tap : s.taps) {
      weights.push_back(tap.weight);
      vals.push_back(read(c.b, input, tap));
    }
    y = dot_in_order(n, weights, vals);
  }
  return {c.b.convert(c.b.transpose(y, to_second(y.rank())), c.out().dtype)};
}

// The gradient by the grid: sum over taps and channels of g * value * d weight,
// times d coord / d grid; component i belongs to spatial dim k-1-i.
Value grid_grad(Builder& b, Value input, Value g, const Sampling& s) {
  int64_t k = static_cast<int64_t>(s.coord_grad.size()), ch = input.dim(input.rank() - 1);
  std::vector<Value> acc(k);
  for (const Tap& tap : s.taps) {
    Value gv = b.mul(read(b, input, tap), g);
    for (int64_t d = 0; d < k; ++d) {
      Value v = b.mul(gv, per_channel(b, tap.dweight[d], ch));
      acc[d] = acc[d].valid() ? b.add(acc[d], v) : v;
    }
  }
  Values parts;
  for (int64_t i = 0; i < k; ++i) {
    int64_t d = k - 1 - i;
    Value r = b.mul(reduce_sum(b, acc[d], {acc[d].rank() - 1}), s.coord_grad[d]);
    std::vector<int64_t> col = r.shape();
    col.push_back(1);
    parts.push_back(b.reshape(r, col));
  }
  return b.concatenate(parts, parts[0].rank() - 1);
}

// The 3-D bilinear gradient by the grid as CPU's scalar kernel sums it: one
// running sum per component over channels in order and, within a channel,
// over the 8 corners in order, each term (value * w_a * w_b) * g with the
// other two dims' weights x first. A tree sum over channels differs by a
// few ulps of the largest term, which cancellation can push past OpInfo's
// tolerance; a loop over channels reproduces CPU's sum.
Value grid_grad_3d(Builder& b, Value input, Value g, const Sampling& s) {
  const int64_t k = 3, nt = static_cast<int64_t>(s.taps.size());
  std::vector<int64_t> o = s.taps[0].valid.shape(), lead = o;
  lead.insert(lead.begin(), 1);
  auto stack = [&](Values xs) {  // [M, ...] from M values of one shape
    for (Value& x : xs) {
      std::vector<int64_t> shape = x.shape();
      shape.insert(shape.begin(), 1);
      x = b.reshape(x, shape);
    }
    return b.concatenate(xs, 0);
  };
  Values vals, valid, weights;
  for (const Tap& tap : s.taps) {
    vals.push_back(read(b, input, tap));
    valid.push_back(tap.valid);
  }
  for (const Taps1& d : s.dims) weights.insert(weights.end(), d.weight.begin(), d.weight.end());
  Value zero = splat(b, 0, g.dtype(), o);
  Values init{b.constant_int(kI64, 0), zero, zero, zero,
              stack(vals),     // [T, N, O..., C]
              g,               // [N, O..., C]
              stack(valid),    // [T, N, O...]
              stack(weights)};  // [2k, N, O...]: each dim's low and high weight
  std::vector<std::vector<size_t>> at;
  for (const Tap& tap : s.taps) at.push_back(tap.at);
  Values out = b.while_loop(
      init,
      [n = g.dim(g.rank() - 1)](Builder& w, const Values& st) {
        return Values{w.compare(Compare::kLT, st[0], w.constant_int(kI64, n))};
      },
      [k, nt, o, at](Builder& w, const Values& st) {
        // x at index `row` of its first dim (if >= 0) and channel `c` of its
        // last (if set), as [N, O...].
        auto pick = [&](Value x, int64_t row, Value c) {
          Values starts(x.rank(), w.constant_int(kI64, 0));
          std::vector<int64_t> sizes = x.shape();
          if (row >= 0) starts[0] = w.constant_int(kI64, row), sizes[0] = 1;
          if (c.valid()) starts.back() = c, sizes.back() = 1;
          return w.reshape(w.dynamic_slice(x, starts, sizes), o);
        };
        Value go = pick(st[5], -1, st[0]);
        Values acc{st[1], st[2], st[3]};
        for (int64_t t = 0; t < nt; ++t) {
          Value val = pick(st[4], t, st[0]), ok = pick(st[6], t, Value());
          for (int64_t d = 0; d < k; ++d) {
            Value term = val;
            for (int64_t e = k - 1; e >= 0; --e)
              if (e != d) term = w.mul(term, pick(st[7], 2 * e + static_cast<int64_t>(at[t][e]), Value()));
            term = unfused(w, w.mul(term, go));
            acc[d] = w.select(ok, at[t][d] ? w.add(acc[d], term) : w.sub(acc[d], term), acc[d]);
          }
        }
        return Values{w.add(st[0], w.constant_int(kI64, 1)), acc[0], acc[1], acc[2],
                      st[4], st[5], st[6], st[7]};
      });
  Values parts;
  for (int64_t i = 0; i < k; ++i) {
    int64_t d = k - 1 - i;
    parts.push_back(b.reshape(b.mul(s.coord_grad[d], out[1 + d]), [&] {
      std::vector<int64_t> col = o;
      col.push_back(1);
      return col;
    }()));
  }
  return b.concatenate(parts, static_cast<int64_t>(o.size()));
}

// grid_sampler_{2,3}d_backward(grad_output, input, grid, interpolation,
// padding, align_corners, output_mask) -> (grad_input if asked, grad_grid).
Values grid_sampler_backward(Context& c, const Args& a) {
  Value x = a[1].tensor;
  ElementType t = accumulation_type(x.dtype());
  Num n{c.b, x.dtype()};
  Value g = c.b.transpose(c.b.convert(a[0].tensor, t), to_last(x.rank()));
  Value input = c.b.transpose(c.b.convert(x, t), to_last(x.rank()));
  Value grid = c.b.convert(a[2].tensor, t);
  bool nearest = a[3].i == kNearest;
  Values out;
  if (TensorType{t, g.shape()}.numel() == 0 || TensorType{t, x.shape()}.numel() == 0) {
    for (const TensorType& o : c.outputs) out.push_back(c.b.zeros(o));
    return out;
  }
  Sampling s = sampling(n, input, grid, a[3].i, a[4].i, a[5].b);
  int64_t ch = input.dim(input.rank() - 1);
  if (a[6].bools.at(0)) {
    Value acc = c.b.zeros(input.type());
    for (const Tap& tap : s.taps) acc = write(c.b, acc, c.b.mul(g, per_channel(c.b, tap.weight, ch)), tap);
    out.push_back(c.b.convert(c.b.transpose(acc, to_second(acc.rank())), c.out(0).dtype));
  }
  Value gg = nearest                         ? c.b.zeros(grid.type())
             : s.dims.size() == 3 && !is_half(x.dtype()) ? grid_grad_3d(c.b, input, g, s)
                                                 : grid_grad(c.b, input, g, s);
  out.push_back(c.b.convert(gg, c.out(out.size()).dtype));
  return out;
}

}  // namespace

void register_grid_sample(Registry& r) {
  for (const char* op : {"aten::grid_sampler_2d", "aten::grid_sampler_3d"}) {
    r.add(op, grid_sampler);
    r.add(std::string(op) + "_backward", grid_sampler_backward);
  }
}

}  // namespace torch_tpu::lowering
