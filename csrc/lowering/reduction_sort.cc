// Sorting and order statistics: sort, topk, kthvalue, median, nanmedian,
// mode. All start from one stable sort of (value, index) pairs in which NaN
// orders above every number, as in PyTorch.
#include <cmath>

#include "reduction.h"

namespace torch_tpu::lowering {

namespace {

struct Sorted {
  Value values, indices;
};

// Stable sort along `dim`; equal keys keep their original order.
Sorted sort_along(Builder& b, Value x, int64_t dim, bool descending) {
  Value key = orderable(b, x);
  Value idx = b.iota({ElementType::kI64, x.shape()}, dim);
  const bool is_float = hlo::is_float(key.dtype());
  Values r = b.sort({key, idx}, dim, /*stable=*/true, [=](Builder& b, const Values& v) {
    Value p = v[0], q = v[1];
    if (descending) std::swap(p, q);
    Value less = b.compare(hlo::Compare::kLT, p, q);
    if (is_float)  // a number sorts before NaN
      less = b.or_(less, b.and_(b.not_(is_nan(b, p)), is_nan(b, q)));
    return Values{less};
  });
  return {b.convert(r[0], x.dtype()), r[1]};
}

// sort (self, dim, descending) and sort.stable (self, stable?, dim, descending).
LoweringFn sort_fn(size_t dim) {
  return [=](Context& c, const Args& a) {
    Value x = at_least_1d(c.b, a[0].tensor);
    Sorted s = sort_along(c.b, x, wrap_dim(a[dim].i, x.rank()), a[dim + 1].b);
    return Values{to_output(c, s.values, 0), to_output(c, s.indices, 1)};
  };
}

// The first `k` along `dim`.
Value head(Builder& b, Value x, int64_t dim, int64_t k) {
  std::vector<int64_t> start(x.rank(), 0), limit = x.shape();
  limit[dim] = k;
  return b.slice(x, start, limit);
}

// topk (self, k, dim, largest, sorted): the k first of a stable sort, so
// ties keep their original order.
Values topk(Context& c, const Args& a) {
  Value x = at_least_1d(c.b, a[0].tensor);
  int64_t d = wrap_dim(a[2].i, x.rank());
  Sorted s = sort_along(c.b, x, d, a[3].b);
  return {to_output(c, head(c.b, s.values, d, a[1].i), 0),
          to_output(c, head(c.b, s.indices, d, a[1].i), 1)};
}

// Value and index at position `pos` (i64, reduced over `dim`) of the sorted x.
Values select_sorted(Context& c, const Sorted& s, Value pos, int64_t dim) {
  return {to_output(c, pick(c.b, s.values, pos, dim), 0),
          to_output(c, pick(c.b, s.indices, pos, dim), 1)};
}

// kthvalue (self, k, dim, keepdim).
Values kthvalue(Context& c, const Args& a) {
  Value x = at_least_1d(c.b, a[0].tensor);
  int64_t d = wrap_dim(a[2].i, x.rank());
  Sorted s = sort_along(c.b, x, d, false);
  std::vector<int64_t> rest = x.shape();
  rest.erase(rest.begin() + d);
  return select_sorted(c, s, splat(c.b, static_cast<double>(a[1].i - 1), ElementType::kI64, rest), d);
}

// Position of the median along `dim` of the ascending sort: the lower middle
// element; with NaNs present, the first NaN (median) or the middle of the
// numbers (nanmedian).
Value median_position(Builder& b, Value x, int64_t dim, bool ignore_nan) {
  Value nans = reduce_sum(b, b.convert(is_nan(b, x), ElementType::kI64), {dim});
  Value n = splat(b, static_cast<double>(x.dim(dim)), ElementType::kI64, nans.shape());
  Value numbers = b.sub(n, nans);
  Value one = splat_like(b, 1, n), two = splat_like(b, 2, n), zero = splat_like(b, 0, n);
  Value middle = b.div(b.max(b.sub(numbers, one), zero), two);
  if (ignore_nan) return middle;
  Value any_nan = b.compare(hlo::Compare::kGT, nans, zero);
  return b.select(any_nan, numbers, b.div(b.sub(n, one), two));
}

// median.dim / nanmedian.dim (self, dim, keepdim): (values, indices).
LoweringFn median_dim_fn(bool ignore_nan) {
  return [=](Context& c, const Args& a) {
    Value x = at_least_1d(c.b, a[0].tensor);
    int64_t d = wrap_dim(a[1].i, x.rank());
    require_nonempty(c, x, d);
    Sorted s = sort_along(c.b, x, d, false);
    return select_sorted(c, s, median_position(c.b, x, d, ignore_nan), d);
  };
}

// median / nanmedian over all elements; NaN for an empty tensor.
LoweringFn median_fn(bool ignore_nan) {
  return [=](Context& c, const Args& a) {
    Value x = c.b.reshape(a[0].tensor, {a[0].tensor.type().numel()});
    if (x.dim(0) == 0) return Values{c.b.full(c.out(), NAN)};
    Sorted s = sort_along(c.b, x, 0, false);
    return Values{to_output(c, pick(c.b, s.values, median_position(c.b, x, 0, ignore_nan), 0))};
  };
}

// For each position of sorted `v` along `dim`: how many equal values precede
// it in its run. Run starts are marked, then carried forward by a max-scan.
Value run_offsets(Builder& b, Value v, int64_t dim) {
  Value key = orderable(b, v);
  Value pos = b.iota({ElementType::kI64, v.shape()}, dim);
  std::vector<int64_t> low(v.rank(), 0), high(v.rank(), 0);
  low[dim] = 1;
  high[dim] = -1;
  Value prev = b.pad(key, b.constant(key.dtype(), 0), low, high);
  Value starts = b.or_(b.compare(hlo::Compare::kNE, key, prev),
                       b.compare(hlo::Compare::kEQ, pos, splat_like(b, 0, pos)));
  auto max = [](Builder& b, const Values& e, const Values& l) { return Values{b.max(e[0], l[0])}; };
  Value run_start = scan(b, {b.select(starts, pos, splat_like(b, 0, pos))}, dim,
                         {b.constant(ElementType::kI64, 0)}, max)[0];
  return b.sub(pos, run_start);
}

// mode (self, dim, keepdim): the most frequent value (the smallest among
// equally frequent ones) and the last index where it occurs, as on CPU.
Values mode(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = at_least_1d(b, a[0].tensor);
  int64_t d = wrap_dim(a[1].i, x.rank());
  require_nonempty(c, x, d);
  Value v = sort_along(b, x, d, false).values;
  Value offset = run_offsets(b, v, d);
  Value pos = b.iota({ElementType::kI64, x.shape()}, d);
  // The first position reaching the longest run ends the smallest such value.
  Value longest = broadcast_back(b, reduce_max(b, offset, {d}), x.shape(), {d});
  Value end = reduce_min(b, b.select(b.compare(hlo::Compare::kEQ, offset, longest), pos,
                                     splat_like(b, static_cast<double>(x.dim(d)), pos)),
                         {d});
  Value value = pick(b, v, end, d);
  Value at = b.compare(hlo::Compare::kEQ, x, broadcast_back(b, value, x.shape(), {d}));
  Value last = reduce_max(b, b.select(at, pos, splat_like(b, -1, pos)), {d});
  return {to_output(c, value, 0), to_output(c, last, 1)};
}

}  // namespace

void register_reduction_sort(Registry& r) {
  r.add("aten::sort", sort_fn(1));
  r.add("aten::sort.stable", sort_fn(2));
  r.add("aten::topk", topk);
  r.add("aten::kthvalue", kthvalue);
  r.add("aten::median", median_fn(false));
  r.add("aten::nanmedian", median_fn(true));
  r.add("aten::median.dim", median_dim_fn(false));
  r.add("aten::nanmedian.dim", median_dim_fn(true));
  r.add("aten::mode", mode);
}

}  // namespace torch_tpu::lowering
