// Reductions: sums, means, products, extrema and their indices, any/all,
// variance, norms, logsumexp, hash_tensor and the softmax family. Each has
// one shape: convert to a compute type, reduce over normalized dims, then
// reshape and convert to the output PyTorch computed (the reshape covers
// keepdim).
#include "reduction.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace torch_tpu::lowering {

// ---- shared rules (declared in reduction.h) ---------------------------------

std::vector<int64_t> reduction_dims(const Arg& dim, int64_t rank, bool empty_is_all) {
  std::vector<int64_t> dims;
  if (dim.kind == Arg::kInt) dims = {dim.i};
  else if (dim.kind == Arg::kIntList) dims = dim.ints;
  bool all = dim.none() || (dims.empty() && empty_is_all);
  if (rank == 0) return {};
  if (all) {
    dims.resize(rank);
    std::iota(dims.begin(), dims.end(), 0);
    return dims;
  }
  dims = wrap_dims(dims, rank);
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

Value nan_max(Builder& b, Value p, Value q) {
  if (!hlo::is_float(p.dtype())) return b.max(p, q);
  return b.select(b.or_(b.compare(hlo::Compare::kGT, p, q), is_nan(b, p)), p, q);
}

Value nan_min(Builder& b, Value p, Value q) {
  if (!hlo::is_float(p.dtype())) return b.min(p, q);
  return b.select(b.or_(b.compare(hlo::Compare::kLT, p, q), is_nan(b, p)), p, q);
}

Value reduce_extreme(Builder& b, Value x, const std::vector<int64_t>& dims, bool max) {
  if (!hlo::is_float(x.dtype())) return max ? reduce_max(b, x, dims) : reduce_min(b, x, dims);
  if (dims.empty()) return x;
  Value init = b.constant(x.dtype(), max ? -INFINITY : INFINITY);
  return b.reduce({x}, {init}, dims, [max](Builder& b, const Values& v) {
    return Values{max ? nan_max(b, v[0], v[1]) : nan_min(b, v[0], v[1])};
  })[0];
}

void require_nonempty(const Context& c, Value x, int64_t dim) {
  if (x.dim(dim) != 0) return;
  std::string name = c.op.substr(c.op.find("::") + 2);
  throw InvalidArgument(name.substr(0, name.find('.')) + "(): Expected reduction dim " +
                    std::to_string(dim) + " to have non-zero size");
}

Value broadcast_back(Builder& b, Value r, const std::vector<int64_t>& shape,
                     const std::vector<int64_t>& dims) {
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i)
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) kept.push_back(i);
  return b.broadcast_in_dim(r, shape, kept);
}

Value to_output(Context& c, Value r, size_t i) {
  return c.b.convert(c.b.reshape(r, c.out(i).shape), c.out(i).dtype);
}

Value is_nan(Builder& b, Value x) {
  if (!hlo::is_float(x.dtype())) return splat(b, 0, ElementType::kPred, x.shape());
  return b.compare(hlo::Compare::kNE, x, x);
}

Value at_least_1d(Builder& b, Value x) { return x.rank() == 0 ? b.reshape(x, {1}) : x; }

Value orderable(Builder& b, Value x) {
  return x.dtype() == ElementType::kPred ? b.convert(x, ElementType::kI32) : x;
}

Value pick(Builder& b, Value x, Value pos, int64_t dim) {
  Value idx = b.iota({ElementType::kI64, x.shape()}, dim);
  Value hit = b.compare(hlo::Compare::kEQ, idx, broadcast_back(b, pos, x.shape(), {dim}));
  // One hit per row: the max over {x[pos], lowest...} is x[pos], NaN included.
  Value filler = splat(b, lowest(x.dtype()), x.dtype(), x.shape());
  return reduce_extreme(b, b.select(hit, x, filler), {dim}, true);
}

namespace {

constexpr size_t kNoDim = ~size_t{0};

const Arg& arg_at(const Args& a, size_t i) {
  static const Arg none;
  return i < a.size() ? a[i] : none;
}

int64_t count(Value x, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.dim(d);
  return n;
}

Value reduce_with(Builder& b, Value x, const std::vector<int64_t>& dims, double init,
                  Value (Builder::*op)(Value, Value)) {
  if (dims.empty()) return x;
  return b.reduce({x}, {b.constant(x.dtype(), init)}, dims, [op](Builder& b, const Values& v) {
    return Values{(b.*op)(v[0], v[1])};
  })[0];
}

Value truthy(Builder& b, Value x) {
  if (x.dtype() == ElementType::kPred) return x;
  return b.compare(hlo::Compare::kNE, x, splat_like(b, 0, x));
}

// The input cast to the output dtype (PyTorch applies `dtype=` first), then
// widened to its accumulation type (16-bit floats sum in f32, like CPU).
Value accumulated(Context& c, Value x) {
  ElementType out = c.out().dtype;
  return c.b.convert(c.b.convert(x, out), accumulation_type(out));
}

// ---- sums and products --------------------------------------------------------

LoweringFn sum_fn(size_t dim, bool skip_nan) {
  return [=](Context& c, const Args& a) {
    Value x = accumulated(c, a[0].tensor);
    if (skip_nan) x = c.b.select(is_nan(c.b, x), splat_like(c.b, 0, x), x);
    return Values{to_output(c, reduce_sum(c.b, x, reduction_dims(arg_at(a, dim), x.rank())))};
  };
}

LoweringFn mean_fn(size_t dim) {
  return [=](Context& c, const Args& a) {
    Value x = accumulated(c, a[0].tensor);
    auto dims = reduction_dims(arg_at(a, dim), x.rank());
    Value s = reduce_sum(c.b, x, dims);
    // CPU rounds the sum to the output type before dividing.
    s = c.b.convert(c.b.convert(s, c.out().dtype), s.dtype());
    return Values{to_output(c, c.b.div(s, splat_like(c.b, count(x, dims), s)))};
  };
}

LoweringFn prod_fn(size_t dim) {
  return [=](Context& c, const Args& a) {
    Value x = accumulated(c, a[0].tensor);
    auto dims = reduction_dims(arg_at(a, dim), x.rank());
    if (x.dtype() == ElementType::kPred) return Values{to_output(c, reduce_with(c.b, x, dims, 1, &Builder::and_))};
    return Values{to_output(c, reduce_with(c.b, x, dims, 1, &Builder::mul))};
  };
}

LoweringFn count_nonzero_fn(size_t dim) {
  return [=](Context& c, const Args& a) {
    Value x = c.b.convert(truthy(c.b, a[0].tensor), ElementType::kI64);
    return Values{to_output(c, reduce_sum(c.b, x, reduction_dims(arg_at(a, dim), x.rank())))};
  };
}

// any / all. `any.dims` with an empty list reduces nothing.
LoweringFn logical_fn(size_t dim, bool empty_is_all, bool all) {
  return [=](Context& c, const Args& a) {
    Value x = truthy(c.b, a[0].tensor);
    auto dims = reduction_dims(arg_at(a, dim), x.rank(), empty_is_all);
    Value r = all ? reduce_with(c.b, x, dims, 1, &Builder::and_) : reduce_sum(c.b, x, dims);
    return Values{to_output(c, r)};
  };
}

// ---- extrema --------------------------------------------------------------------

// The first index along `dim` where x equals its extreme `m`; NaN matches NaN,
// so a NaN extreme reports the first NaN, as on CPU.
Value index_of(Builder& b, Value x, Value m, int64_t dim) {
  Value mb = broadcast_back(b, m, x.shape(), {dim});
  Value hit = b.compare(hlo::Compare::kEQ, x, mb);
  if (hlo::is_float(x.dtype())) hit = b.or_(hit, b.and_(is_nan(b, x), is_nan(b, mb)));
  Value idx = b.iota({ElementType::kI64, x.shape()}, dim);
  Value miss = splat(b, static_cast<double>(x.dim(dim)), ElementType::kI64, x.shape());
  return reduce_min(b, b.select(hit, idx, miss), {dim});
}

// amax/amin and the full max()/min().
LoweringFn extreme_fn(size_t dim, bool max) {
  return [=](Context& c, const Args& a) {
    Value x = a[0].tensor;
    if (x.type().numel() == 0 && dim == kNoDim)
      throw InvalidArgument(std::string(max ? "max" : "min") +
                        "(): Expected reduction dim to be specified for input.numel() == 0");
    return Values{to_output(c, reduce_extreme(c.b, x, reduction_dims(arg_at(a, dim), x.rank()), max))};
  };
}

// max.dim / min.dim: (values, indices).
LoweringFn extreme_with_index_fn(bool max) {
  return [=](Context& c, const Args& a) {
    Value x = at_least_1d(c.b, a[0].tensor);
    int64_t d = wrap_dim(a[1].i, x.rank());
    require_nonempty(c, x, d);
    Value m = reduce_extreme(c.b, x, {d}, max);
    return Values{to_output(c, m, 0), to_output(c, index_of(c.b, x, m, d), 1)};
  };
}

// argmax/argmin; no dim means the index into the flattened tensor.
LoweringFn arg_extreme_fn(bool max) {
  return [=](Context& c, const Args& a) {
    Value x = at_least_1d(c.b, a[0].tensor);
    int64_t d = 0;
    if (a[1].none()) x = c.b.reshape(x, {x.type().numel()});
    else d = wrap_dim(a[1].i, x.rank());
    return Values{to_output(c, index_of(c.b, x, reduce_extreme(c.b, x, {d}, max), d))};
  };
}

// aminmax: (min, max).
LoweringFn aminmax_fn(size_t dim) {
  return [=](Context& c, const Args& a) {
    Value x = a[0].tensor;
    auto dims = reduction_dims(arg_at(a, dim), x.rank());
    return Values{to_output(c, reduce_extreme(c.b, x, dims, false), 0),
                  to_output(c, reduce_extreme(c.b, x, dims, true), 1)};
  };
}

// ---- moments, logsumexp, norms ---------------------------------------------------

struct Moments {
  Value var, mean;
};

// Two-pass variance with divisor max(N - correction, 0) (correction defaults
// to 1), and the mean.
Moments moments(Builder& b, Value x, const std::vector<int64_t>& dims, const Arg& correction) {
  ElementType t = x.dtype();
  int64_t n = count(x, dims);
  Value sum = reduce_sum(b, x, dims);
  Value mean = b.div(sum, splat_like(b, static_cast<double>(n), sum));
  Value d = b.sub(x, broadcast_back(b, mean, x.shape(), dims));
  Value ss = reduce_sum(b, b.mul(d, d), dims);
  Value corr = correction.none() ? b.constant(t, 1) : b.convert(correction.tensor, t);
  Value denom = b.max(b.sub(b.constant(t, static_cast<double>(n)), corr), b.constant(t, 0));
  return {b.div(ss, b.broadcast_to(denom, ss.shape())), mean};
}

// var/std(.correction) and var_mean/std_mean: (self, dim?, correction?, keepdim).
// A complex tensor's variance is its real part's plus its imaginary part's
// (CPU's), a real number; its mean is complex.
LoweringFn moments_fn(bool stddev, bool with_mean) {
  return [=](Context& c, const Args& a) {
    Value in = a[0].tensor;
    if (!hlo::is_float(in.dtype()) && !hlo::is_complex(in.dtype()))  // PyTorch's meta lets this through
      throw InvalidArgument("std and var only support floating point and complex dtypes");
    auto dims = reduction_dims(a[1], in.rank());
    Moments m;
    if (hlo::is_complex(in.dtype())) {
      Moments r = moments(c.b, real_part(c.b, in), dims, a[2]);
      Moments i = moments(c.b, imag_part(c.b, in), dims, a[2]);
      m.var = c.b.add(r.var, i.var);
      m.mean = make_complex(c.b, r.mean, i.mean, TensorType{in.dtype(), r.mean.shape()});
    } else {
      m = moments(c.b, c.b.convert(in, accumulation_type(c.out().dtype)), dims, a[2]);
    }
    Values r{to_output(c, stddev ? c.b.sqrt(m.var) : m.var, 0)};
    if (with_mean) r.push_back(to_output(c, m.mean, 1));
    return r;
  };
}

// log(sum(exp(x))) shifted by the largest element (of the real parts, for
// complex x, as CPU does).
Values logsumexp(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = b.convert(a[0].tensor, accumulation_type(c.out().dtype));
  bool complex = hlo::is_complex(x.dtype());
  auto dims = reduction_dims(a[1], x.rank());
  Value m = reduce_extreme(b, complex ? real_part(b, x) : x, dims, true);
  // An infinite max would turn x - m into NaN; shift by 0 instead.
  Value inf = b.compare(hlo::Compare::kEQ, b.abs(m), splat_like(b, INFINITY, m));
  m = b.select(inf, splat_like(b, 0, m), m);
  if (complex) m = make_complex(b, m, splat_like(b, 0, m), TensorType{x.dtype(), m.shape()});
  Value s = reduce_sum(b, b.exp(b.sub(x, broadcast_back(b, m, x.shape(), dims))), dims);
  return {to_output(c, b.add(b.log(s), m))};
}

// ‖x‖_ord over dims: max/min |x| for ±inf, the count of nonzeros for 0, else
// (Σ|x|^ord)^(1/ord). `ord` is a program input, so each case is built and the
// right one selected at run time.
Value vector_norm(Builder& b, Value x, Value ord, const std::vector<int64_t>& dims) {
  Value a = b.abs(x);
  auto is = [&b](Value o, double v) { return b.compare(hlo::Compare::kEQ, o, splat_like(b, v, o)); };
  Value o = b.broadcast_to(b.convert(ord, a.dtype()), a.shape());
  Value nonzero = b.convert(b.compare(hlo::Compare::kNE, a, splat_like(b, 0, a)), a.dtype());
  Value terms = b.select(is(o, 0), nonzero,
                         b.select(is(o, 1), a, b.select(is(o, 2), b.mul(a, a), b.pow(a, o))));
  Value s = reduce_sum(b, terms, dims);
  Value os = b.broadcast_to(b.convert(ord, a.dtype()), s.shape());
  Value root = b.select(b.or_(is(os, 0), is(os, 1)), s,
                        b.select(is(os, 2), b.sqrt(s), b.pow(s, b.div(splat_like(b, 1, os), os))));
  return b.select(is(os, INFINITY), reduce_extreme(b, a, dims, true),
                  b.select(is(os, -INFINITY), reduce_extreme(b, a, dims, false), root));
}

// linalg_vector_norm and the norm overloads: ord/p at `ord` (absent: 2),
// dims at `dim`.
LoweringFn norm_fn(size_t ord, size_t dim) {
  return [=](Context& c, const Args& a) {
    Value in = a[0].tensor;  // a complex tensor's norm is its moduli's
    Value x = accumulated(c, hlo::is_complex(in.dtype()) ? c.b.abs(in) : in);
    Value p = arg_at(a, ord).none() ? c.b.constant(x.dtype(), 2) : a[ord].tensor;
    return Values{to_output(c, vector_norm(c.b, x, p, reduction_dims(arg_at(a, dim), x.rank())))};
  };
}

// ---- softmax -----------------------------------------------------------------

// _softmax / _log_softmax (self, dim, half_to_float), in f32 for 16-bit
// floats; _safe_softmax (self, dim, dtype) when `safe`.
LoweringFn softmax_fn(bool log, bool safe = false) {
  return [=](Context& c, const Args& a) {
    Builder& b = c.b;
    Value x = at_least_1d(b, b.convert(a[0].tensor, accumulation_type(c.out().dtype)));
    int64_t d = wrap_dim(a[1].i, x.rank());
    // A plain max reduce (XLA's maximum propagates NaN, and a NaN anywhere in
    // a row makes the whole row NaN anyway) vectorizes; the select-based
    // NaN-checking body of reduce_extreme ran as a scalar loop on XLA:CPU.
    Value m = reduce_max(b, x, {d});
    // _safe_softmax: a row of only -inf (a fully masked attention row) gives
    // 0s, not NaNs. Shifting such a row by 0 instead of its max -inf makes its
    // sum exactly 0, which no other row has (its max term is 1; a NaN, which
    // the max may skip on XLA:CPU, makes it NaN): no second pass over x.
    if (safe) m = b.select(b.compare(hlo::Compare::kEQ, m, splat_like(b, lowest(m.dtype()), m)),
                           splat_like(b, 0, m), m);
    Value z = b.sub(x, broadcast_back(b, m, x.shape(), {d}));
    Value s = reduce_sum(b, b.exp(z), {d});
    if (log) return Values{to_output(c, b.sub(z, broadcast_back(b, b.log(s), x.shape(), {d})))};
    Value inv = broadcast_back(b, b.div(splat_like(b, 1, s), s), x.shape(), {d});
    Value y = b.mul(b.exp(z), inv);
    if (safe) {
      Value masked = b.compare(hlo::Compare::kEQ, s, splat_like(b, 0, s));
      y = b.select(broadcast_back(b, masked, x.shape(), {d}), splat_like(b, 0, y), y);
    }
    return Values{to_output(c, y)};
  };
}

// _softmax_backward_data / _log_softmax_backward_data
// (grad_output, output, dim, input_dtype).
LoweringFn softmax_backward_fn(bool log) {
  return [=](Context& c, const Args& a) {
    Builder& b = c.b;
    ElementType t = promote_types(accumulation_type(a[0].tensor.dtype()),
                                  accumulation_type(c.out().dtype));
    Value g = at_least_1d(b, b.convert(a[0].tensor, t));
    Value y = at_least_1d(b, b.convert(a[1].tensor, t));
    int64_t d = wrap_dim(a[2].i, g.rank());
    auto total = [&](Value v) { return broadcast_back(b, reduce_sum(b, v, {d}), v.shape(), {d}); };
    Value r = log ? b.sub(g, b.mul(b.exp(y), total(g))) : b.mul(y, b.sub(g, total(b.mul(g, y))));
    return Values{to_output(c, r)};
  };
}

// The 64-bit pattern CPU hashes: floats widened to f64, integers and bools
// to i64 (sign-extended), then reinterpreted as u64.
Value as_u64(Builder& b, Value x) {
  TensorType u64{ElementType::kU64, x.shape()};
  if (x.dtype() == ElementType::kU64) return x;
  if (hlo::is_float(x.dtype()))
    return b.bitcast_convert(b.convert(x, ElementType::kF64), u64);
  if (x.dtype() == ElementType::kPred || x.dtype() == ElementType::kU8 ||
      x.dtype() == ElementType::kU16 || x.dtype() == ElementType::kU32)
    return b.convert(x, ElementType::kU64);
  return b.bitcast_convert(b.convert(x, ElementType::kI64), u64);
}

// hash_tensor(self, dim, keepdim, mode): xor of the elements' u64 patterns
// over `dim` (all dims when empty); mode 0 is the only mode.
Values hash_tensor(Context& c, const Args& a) {
  if (a[3].i != 0) throw Unsupported(c.op + " mode " + std::to_string(a[3].i));
  Value x = a[0].tensor;
  if (hlo::is_complex(x.dtype())) throw Unsupported(c.op + " of a complex tensor");
  std::vector<int64_t> dims = a[1].ints;
  if (dims.empty()) {
    for (int64_t d = 0; d < x.rank(); ++d) dims.push_back(d);
  }
  dims = wrap_dims(dims, x.rank());
  if (x.rank() == 0) dims.clear();
  Value u = as_u64(c.b, x);
  Value zero = c.b.constant(ElementType::kU64, 0);
  Value h = c.b.reduce({u}, {zero}, dims, [](Builder& w, const Values& s) {
    return Values{w.xor_(s[0], s[1])};
  })[0];
  return {c.b.reshape(h, c.out().shape)};
}

}  // namespace

void register_reduction(Registry& r) {
  r.add("aten::sum.dim_IntList", sum_fn(1, false));
  r.add("aten::sum", sum_fn(kNoDim, false));
  r.add("aten::nansum", sum_fn(1, true));
  r.add("aten::mean.dim", mean_fn(1));
  r.add("aten::mean", mean_fn(kNoDim));
  r.add("aten::prod.dim_int", prod_fn(1));
  r.add("aten::prod", prod_fn(kNoDim));
  r.add("aten::count_nonzero.dim_IntList", count_nonzero_fn(1));
  r.add("aten::count_nonzero", count_nonzero_fn(1));

  r.add("aten::any", logical_fn(kNoDim, true, false));
  r.add("aten::any.dim", logical_fn(1, true, false));
  r.add("aten::any.dims", logical_fn(1, false, false));
  r.add("aten::all", logical_fn(kNoDim, true, true));
  r.add("aten::all.dim", logical_fn(1, true, true));
  r.add("aten::all.dims", logical_fn(1, false, true));

  r.add("aten::amax", extreme_fn(1, true));
  r.add("aten::amin", extreme_fn(1, false));
  r.add("aten::max", extreme_fn(kNoDim, true));
  r.add("aten::min", extreme_fn(kNoDim, false));
  r.add("aten::max.dim", extreme_with_index_fn(true));
  r.add("aten::min.dim", extreme_with_index_fn(false));
  r.add("aten::argmax", arg_extreme_fn(true));
  r.add("aten::argmin", arg_extreme_fn(false));
  r.add("aten::aminmax", aminmax_fn(1));

  r.add("aten::var.correction", moments_fn(false, false));
  r.add("aten::std.correction", moments_fn(true, false));
  r.add("aten::var_mean.correction", moments_fn(false, true));
  r.add("aten::std_mean.correction", moments_fn(true, true));
  r.add("aten::logsumexp", logsumexp);
  r.add("aten::hash_tensor", hash_tensor);

  r.add("aten::linalg_vector_norm", norm_fn(1, 2));
  r.add("aten::norm.Scalar", norm_fn(1, kNoDim));
  r.add("aten::norm.ScalarOpt_dtype", norm_fn(1, kNoDim));
  r.add("aten::norm.ScalarOpt_dim", norm_fn(1, 2));
  r.add("aten::norm.ScalarOpt_dim_dtype", norm_fn(1, 2));

  r.add("aten::_softmax", softmax_fn(false));
  r.add("aten::_log_softmax", softmax_fn(true));
  r.add("aten::_safe_softmax", softmax_fn(false, true));  // SDPA's math path
  r.add("aten::_softmax_backward_data", softmax_backward_fn(false));
  r.add("aten::_log_softmax_backward_data", softmax_backward_fn(true));

  register_reduction_scan(r);
  register_reduction_sort(r);
}

}  // namespace torch_tpu::lowering
