// The unique family (_unique, _unique2, unique_dim, unique_consecutive,
// unique_dim_consecutive): every output's size is the number of distinct
// values, so, like nonzero in host_ops.cc, the input is read to the host (one
// sync), CPU's kernel computes the results there (its sorted/unsorted order,
// NaN handling and inverse/counts conventions exactly) and they are uploaded.
// None of these names may also be a lowering in the registry.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "op_list.h"
#include "tensor_io.h"

namespace torch_tpu::aten {

namespace {

using Pair = std::tuple<at::Tensor, at::Tensor>;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

at::Tensor up(const at::Tensor& host, const at::Tensor& like) { return host.to(like.device()); }

Pair upload(const Pair& r, const at::Tensor& like) {
  return {up(std::get<0>(r), like), up(std::get<1>(r), like)};
}

Triple upload(const Triple& r, const at::Tensor& like) {
  return {up(std::get<0>(r), like), up(std::get<1>(r), like), up(std::get<2>(r), like)};
}

void write_out(const at::Tensor& r, at::Tensor& out) {
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
}

Pair host_unique(const at::Tensor& self, bool sorted, bool inverse) {
  return upload(at::_unique(to_cpu(self, "aten::_unique"), sorted, inverse), self);
}

Triple host_unique2(const at::Tensor& self, bool sorted, bool inverse, bool counts) {
  return upload(at::_unique2(to_cpu(self, "aten::_unique2"), sorted, inverse, counts), self);
}

Triple host_unique_dim(const at::Tensor& self, int64_t dim, bool sorted, bool inverse,
                       bool counts) {
  return upload(at::unique_dim(to_cpu(self, "aten::unique_dim"), dim, sorted, inverse, counts), self);
}

Triple host_unique_consecutive(const at::Tensor& self, bool inverse, bool counts,
                          std::optional<int64_t> dim) {
  return upload(at::unique_consecutive(to_cpu(self, "aten::unique_consecutive"), inverse, counts, dim), self);
}

Triple host_unique_dim_consecutive(const at::Tensor& self, int64_t dim, bool inverse,
                                   bool counts) {
  return upload(at::unique_dim_consecutive(to_cpu(self, "aten::unique_dim_consecutive"), dim, inverse, counts), self);
}

// out= variants: the functional result written into (and resizing) the outs.
std::tuple<at::Tensor&, at::Tensor&> unique_out(const at::Tensor& self, bool sorted, bool inverse,
                                                at::Tensor& o0, at::Tensor& o1) {
  Pair r = host_unique(self, sorted, inverse);
  write_out(std::get<0>(r), o0);
  write_out(std::get<1>(r), o1);
  return {o0, o1};
}

using Outs3 = std::tuple<at::Tensor&, at::Tensor&, at::Tensor&>;

Outs3 write3(const Triple& r, at::Tensor& o0, at::Tensor& o1, at::Tensor& o2) {
  write_out(std::get<0>(r), o0);
  write_out(std::get<1>(r), o1);
  write_out(std::get<2>(r), o2);
  return {o0, o1, o2};
}

Outs3 unique2_out(const at::Tensor& self, bool sorted, bool inverse, bool counts, at::Tensor& o0,
                  at::Tensor& o1, at::Tensor& o2) {
  return write3(host_unique2(self, sorted, inverse, counts), o0, o1, o2);
}

Outs3 unique_dim_out(const at::Tensor& self, int64_t dim, bool sorted, bool inverse, bool counts,
                     at::Tensor& o0, at::Tensor& o1, at::Tensor& o2) {
  return write3(host_unique_dim(self, dim, sorted, inverse, counts), o0, o1, o2);
}

Outs3 unique_consecutive_out(const at::Tensor& self, bool inverse, bool counts,
                             std::optional<int64_t> dim, at::Tensor& o0, at::Tensor& o1,
                             at::Tensor& o2) {
  return write3(host_unique_consecutive(self, inverse, counts, dim), o0, o1, o2);
}

Outs3 unique_dim_consecutive_out(const at::Tensor& self, int64_t dim, bool inverse, bool counts,
                                 at::Tensor& o0, at::Tensor& o1, at::Tensor& o2) {
  return write3(host_unique_dim_consecutive(self, dim, inverse, counts), o0, o1, o2);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  KernelList k(m, "host-synced");
  k.impl("_unique", host_unique);
  k.impl("_unique.out", unique_out);
  k.impl("_unique2", host_unique2);
  k.impl("_unique2.out", unique2_out);
  k.impl("unique_dim", host_unique_dim);
  k.impl("unique_dim.out", unique_dim_out);
  k.impl("unique_consecutive", host_unique_consecutive);
  k.impl("unique_consecutive.out", unique_consecutive_out);
  k.impl("unique_dim_consecutive", host_unique_dim_consecutive);
  k.impl("unique_dim_consecutive.out", unique_dim_consecutive_out);
}

}  // namespace torch_tpu::aten
