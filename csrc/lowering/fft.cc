// Discrete Fourier transforms: _fft_r2c, _fft_c2r and _fft_c2c over any
// dims. stablehlo.fft transforms the innermost (at most three) dims, so the
// requested dims are moved last, transformed in groups of up to three, and
// moved back. PyTorch's transforms are unnormalized and scaled afterwards by
// `normalization` (0: none, 1: 1/sqrt(n), 2: 1/n); XLA's inverse transforms
// divide by n themselves, which is undone.
#include <algorithm>
#include <cmath>

#include "helpers.h"

namespace torch_tpu::lowering {

namespace {

int64_t product(const std::vector<int64_t>& shape, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= shape[d];
  return n;
}

Value scaled(Builder& b, Value x, double factor) {
  if (factor == 1) return x;
  return b.mul(x, splat_like(b, factor, x));
}

// stablehlo.fft of `type` over the innermost lengths.size() dims of x, with
// `dims` of x moved there first (and back after).
Value fft_along(Builder& b, Value x, const std::vector<int64_t>& dims, const std::string& type,
                const std::vector<int64_t>& lengths, ElementType out_dtype) {
  std::vector<int64_t> perm, inverse(x.rank());
  for (int64_t i = 0; i < x.rank(); ++i)
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) perm.push_back(i);
  perm.insert(perm.end(), dims.begin(), dims.end());
  for (int64_t i = 0; i < x.rank(); ++i) inverse[perm[i]] = i;
  Value t = b.transpose(x, perm);
  std::vector<int64_t> shape = t.shape();
  size_t k = lengths.size();
  shape.back() = type == "RFFT" ? lengths[k - 1] / 2 + 1 : lengths[k - 1];
  std::string attrs = "{fft_length = " + Builder::i64_array(lengths) +
                      ", fft_type = #stablehlo<fft_type " + type + ">}";
  Value y = b.op("stablehlo.fft", {t}, {TensorType{out_dtype, shape}}, attrs)[0];
  return b.transpose(y, inverse);
}

// Unnormalized complex transform over `dims` (forward: e^{-i}), in groups of
// at most three dims.
Value c2c(Builder& b, Value x, const std::vector<int64_t>& dims, bool forward) {
  for (size_t start = 0; start < dims.size(); start += 3) {
    size_t end = std::min(start + 3, dims.size());
    std::vector<int64_t> group(dims.begin() + static_cast<std::ptrdiff_t>(start),
                               dims.begin() + static_cast<std::ptrdiff_t>(end));
    std::vector<int64_t> lengths;
    for (int64_t d : group) lengths.push_back(x.dim(d));
    x = fft_along(b, x, group, forward ? "FFT" : "IFFT", lengths, x.dtype());
    if (!forward) x = scaled(b, x, static_cast<double>(product(x.shape(), group)));
  }
  return x;
}

double norm_factor(int64_t mode, int64_t n) {
  if (mode == 1) return 1 / std::sqrt(static_cast<double>(n));
  if (mode == 2) return 1 / static_cast<double>(n);
  return 1;
}

// _fft_r2c(self, dim, normalization, onesided): a real transform of the last
// listed dim (halved when onesided), then complex transforms of the rest.
Values fft_r2c(Context& c, const Args& a) {
  Value x = a[0].tensor;
  std::vector<int64_t> dims = wrap_dims(a[1].ints, x.rank());
  double f = norm_factor(a[2].i, product(x.shape(), dims));
  ElementType ct = c.out().dtype;
  if (!a[3].b) return {scaled(c.b, c2c(c.b, c.b.convert(x, ct), dims, true), f)};
  int64_t last = dims.back();
  Value y = fft_along(c.b, x, {last}, "RFFT", {x.dim(last)}, ct);
  dims.pop_back();
  return {scaled(c.b, c2c(c.b, y, dims, true), f)};
}

// _fft_c2r(self, dim, normalization, last_dim_size): complex inverse
// transforms of all but the last listed dim, then a real inverse transform
// of the last to last_dim_size points.
Values fft_c2r(Context& c, const Args& a) {
  Value x = a[0].tensor;
  std::vector<int64_t> dims = wrap_dims(a[1].ints, x.rank());
  int64_t last = dims.back(), n = a[3].i, half = n / 2 + 1;
  double f = norm_factor(a[2].i, product(c.out().shape, dims));
  dims.pop_back();
  x = c2c(c.b, x, dims, false);
  if (x.dim(last) != half) {  // keep exactly the n/2+1 entries IRFFT reads
    std::vector<int64_t> lo(x.rank(), 0), hi = x.shape(), none(x.rank(), 0), grow(x.rank(), 0);
    hi[last] = std::min(half, x.dim(last));
    x = c.b.slice(x, lo, hi);
    grow[last] = half - x.dim(last);
    x = c.b.pad(x, c.b.constant(x.dtype(), 0), none, grow);
  }
  Value y = fft_along(c.b, x, {last}, "IRFFT", {n}, c.out().dtype);
  return {scaled(c.b, y, f * static_cast<double>(n))};
}

// _fft_c2c(self, dim, normalization, forward).
Values fft_c2c(Context& c, const Args& a) {
  Value x = a[0].tensor;
  std::vector<int64_t> dims = wrap_dims(a[1].ints, x.rank());
  double f = norm_factor(a[2].i, product(x.shape(), dims));
  return {scaled(c.b, c2c(c.b, x, dims, a[3].b), f)};
}

}  // namespace

void register_fft(Registry& r) {
  r.add("aten::_fft_r2c", fft_r2c);
  r.add("aten::_fft_c2r", fft_c2r);
  r.add("aten::_fft_c2c", fft_c2c);
}

}  // namespace torch_tpu::lowering
