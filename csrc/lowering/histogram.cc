// Histograms: histogram (bin count or edges) and the histogramdd pieces
// (_histogramdd_bin_edges, _histogramdd_from_bin_cts/_tensors). Points are
// the rows of self [..., D]; a point falls in bin i of a dim when
// edges[i] <= x < edges[i+1] (the last bin includes its right edge), and
// outside [first, last] edge it is not counted. Registered from
// register_indexing (through indexing_reduce.cc).
#include <cmath>

#include "helpers.h"

namespace torch_tpu::lowering {

namespace {

using hlo::Compare;
constexpr ElementType kI64 = ElementType::kI64;

// linspace(lo, hi, n) in lo's type, as PyTorch's kernel: from the start for
// the first half, from the end for the second.
Value linspace(Builder& b, Value lo, Value hi, int64_t n) {
  TensorType t{lo.dtype(), {n}};
  Value i = b.convert(b.iota(t, 0), lo.dtype());
  Value step = n > 1 ? b.div(b.sub(hi, lo), b.constant(lo.dtype(), static_cast<double>(n - 1)))
                     : b.constant(lo.dtype(), 0);
  Value step_n = b.broadcast_in_dim(step, {n}, {});
  Value from_start = b.add(b.broadcast_in_dim(lo, {n}, {}), b.mul(step_n, i));
  Value back = b.sub(splat_like(b, static_cast<double>(n - 1), i), i);
  Value from_end = b.sub(b.broadcast_in_dim(hi, {n}, {}), b.mul(step_n, back));
  return b.select(b.compare(Compare::kLT, i, splat_like(b, static_cast<double>(n / 2), i)),
                  from_start, from_end);
}

// self as points [N, D].
Value points(Builder& b, Value self, int64_t dims) {
  int64_t n = TensorType{self.dtype(), self.shape()}.numel() / std::max<int64_t>(dims, 1);
  return b.reshape(self, {n, dims});
}

Value column(Builder& b, Value pts, int64_t d) {
  int64_t n = pts.dim(0);
  return b.reshape(b.slice(pts, {0, d}, {n, d + 1}), {n});
}

// Edges of `bins` equal bins over range (a list of 2 D doubles) or the data's
// extent ([0, 1] without data), widened by 0.5 each way when empty.
std::vector<Value> even_edges(Builder& b, Value pts, const std::vector<int64_t>& bins,
                              const Arg& range) {
  std::vector<Value> out;
  ElementType t = pts.dtype(), wide = ElementType::kF64;
  for (size_t d = 0; d < bins.size(); ++d) {
    Value lo, hi;
    if (!range.none()) {
      lo = b.constant(wide, range.doubles.at(2 * d));
      hi = b.constant(wide, range.doubles.at(2 * d + 1));
    } else if (pts.dim(0) > 0) {
      Value col = column(b, pts, static_cast<int64_t>(d));
      lo = b.convert(reduce_min(b, col, {0}), wide);
      hi = b.convert(reduce_max(b, col, {0}), wide);
    } else {  // no data: [0, 1], as NumPy
      lo = b.constant(wide, 0);
      hi = b.constant(wide, 1);
    }
    Value same = b.compare(Compare::kEQ, lo, hi);
    lo = b.select(same, b.sub(lo, b.constant(wide, 0.5)), lo);
    hi = b.select(same, b.add(hi, b.constant(wide, 0.5)), hi);
    out.push_back(linspace(b, b.convert(lo, t), b.convert(hi, t), bins[d] + 1));
  }
  return out;
}

// hist [bins...] of the points over the edges, weighted, optionally a density.
Value count(Builder& b, Value pts, const std::vector<Value>& edges, const Arg& weight,
            bool density) {
  ElementType t = pts.dtype();
  int64_t n = pts.dim(0), total = 1;
  std::vector<int64_t> shape;
  for (const Value& e : edges) {
    shape.push_back(e.dim(0) - 1);
    total *= shape.back();
  }
  Value flat = b.zeros({kI64, {n}});
  Value valid = b.full({ElementType::kPred, {n}}, 1);
  int64_t stride = total;
  for (size_t d = 0; d < edges.size(); ++d) {
    int64_t m = edges[d].dim(0);
    stride /= std::max<int64_t>(shape[d], 1);
    Value x = column(b, pts, static_cast<int64_t>(d));
    Value at_or_past = b.compare(Compare::kLE, b.broadcast_in_dim(edges[d], {n, m}, {1}),
                                 b.broadcast_in_dim(x, {n, m}, {0}));
    Value pos = b.sub(reduce_sum(b, b.convert(at_or_past, kI64), {1}), splat(b, 1, kI64, {n}));
    pos = b.clamp(splat(b, 0, kI64, {n}), pos, splat(b, static_cast<double>(m - 2), kI64, {n}));
    Value first = b.broadcast_in_dim(b.slice(edges[d], {0}, {1}), {n}, {0});
    Value last = b.broadcast_in_dim(b.slice(edges[d], {m - 1}, {m}), {n}, {0});
    valid = b.and_(valid, b.and_(b.compare(Compare::kGE, x, first), b.compare(Compare::kLE, x, last)));
    flat = b.add(flat, b.mul(pos, splat(b, static_cast<double>(stride), kI64, {n})));
  }
  Value w = weight.none() ? splat(b, 1, t, {n}) : b.reshape(b.convert(weight.tensor, t), {n});
  w = b.select(valid, w, splat(b, 0, t, {n}));
  Value hist = b.zeros({t, {total}});
  if (n > 0 && total > 0) {
    hlo::ScatterDims s;
    s.inserted_window_dims = s.scatter_dims_to_operand_dims = {0};
    s.index_vector_dim = 1;
    hist = b.scatter(hist, b.reshape(flat, {n, 1}), w, s,
                     [](Builder& q, const Values& v) { return Values{q.add(v[0], v[1])}; });
  }
  hist = b.reshape(hist, shape);
  if (!density) return hist;
  std::vector<int64_t> all(shape.size());
  for (size_t d = 0; d < all.size(); ++d) all[d] = static_cast<int64_t>(d);
  hist = b.div(hist, b.broadcast_in_dim(reduce_sum(b, hist, all), shape, {}));
  for (size_t d = 0; d < edges.size(); ++d) {
    int64_t m = edges[d].dim(0);
    Value width = b.sub(b.slice(edges[d], {1}, {m}), b.slice(edges[d], {0}, {m - 1}));
    hist = b.div(hist, b.broadcast_in_dim(width, shape, {static_cast<int64_t>(d)}));
  }
  return hist;
}

int64_t point_dims(Value self) { return self.rank() == 0 ? 1 : self.dim(self.rank() - 1); }

// histogram.bins_tensor(self, bins, weight?, density) -> (hist, bin_edges).
Values histogram_bins(Context& c, const Args& a) {
  Value pts = points(c.b, a[0].tensor, 1);
  Value edges = c.b.convert(a[1].tensor, pts.dtype());
  return {count(c.b, pts, {edges}, a[2], a[3].b), edges};
}

// histogram.bin_ct(self, bins, range?, weight?, density) -> (hist, bin_edges).
Values histogram_ct(Context& c, const Args& a) {
  Value pts = points(c.b, a[0].tensor, 1);
  std::vector<Value> edges = even_edges(c.b, pts, {a[1].i}, a[2]);
  return {count(c.b, pts, edges, a[3], a[4].b), edges[0]};
}

// _histogramdd_bin_edges(self, bins, range?, weight?, density) -> edges[].
Values histogramdd_bin_edges(Context& c, const Args& a) {
  Value pts = points(c.b, a[0].tensor, point_dims(a[0].tensor));
  return even_edges(c.b, pts, a[1].ints, a[2]);
}

// _histogramdd_from_bin_cts(self, bins, range?, weight?, density).
Values histogramdd_from_bin_cts(Context& c, const Args& a) {
  Value pts = points(c.b, a[0].tensor, point_dims(a[0].tensor));
  return {count(c.b, pts, even_edges(c.b, pts, a[1].ints, a[2]), a[3], a[4].b)};
}

// _histogramdd_from_bin_tensors(self, bins[], weight?, density).
Values histogramdd_from_bin_tensors(Context& c, const Args& a) {
  Value pts = points(c.b, a[0].tensor, point_dims(a[0].tensor));
  std::vector<Value> edges;
  for (const Value& e : a[1].tensors) edges.push_back(c.b.convert(e, pts.dtype()));
  return {count(c.b, pts, edges, a[2], a[3].b)};
}

}  // namespace

void register_histogram(Registry& r) {
  r.add("aten::histogram.bins_tensor", histogram_bins);
  r.add("aten::histogram.bin_ct", histogram_ct);
  r.add("aten::_histogramdd_bin_edges", histogramdd_bin_edges);
  r.add("aten::_histogramdd_from_bin_cts", histogramdd_from_bin_cts);
  r.add("aten::_histogramdd_from_bin_tensors", histogramdd_from_bin_tensors);
}

}  // namespace torch_tpu::lowering
