// Builder methods for the cross-replica collectives (all_reduce, all_gather,
// reduce_scatter, all_to_all, collective_permute, replica_id).
#include "builder.h"

#include <string>

namespace torch_tpu::hlo {

namespace {

// dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>; every group must be as long.
std::string groups_attr(const char* op, const Builder::ReplicaGroups& groups) {
  if (groups.empty() || groups[0].empty()) throw TypeError(std::string(op) + ": no replica groups");
  std::string out = "dense<[";
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].size() != groups[0].size())
      throw TypeError(std::string(op) + ": replica groups differ in size");
    out += g ? ", [" : "[";
    for (size_t i = 0; i < groups[g].size(); ++i)
      out += (i ? ", " : "") + std::to_string(groups[g][i]);
    out += "]";
  }
  return out + "]> : tensor<" + std::to_string(groups.size()) + "x" +
         std::to_string(groups[0].size()) + "xi64>";
}

void check_dim(const char* op, const Value& x, int64_t dim) {
  if (dim < 0 || dim >= x.rank())
    throw TypeError(std::string(op) + ": dimension " + std::to_string(dim) + " out of range for " +
                    x.type().str());
}

}  // namespace

Value Builder::all_reduce(Value x, const ReplicaGroups& groups, const RegionFn& combine) {
  std::string attrs = "{replica_groups = " + groups_attr("all_reduce", groups) + "}";
  TensorType scalar{x.dtype(), {}};
  int r = region({scalar, scalar}, combine);
  return emit("stablehlo.all_reduce", {x}, {x.type()}, std::move(attrs), {r})[0];
}

Value Builder::all_gather(Value x, int64_t dim, const ReplicaGroups& groups) {
  check_dim("all_gather", x, dim);
  std::string attrs = "{all_gather_dim = " + std::to_string(dim) +
                      " : i64, replica_groups = " + groups_attr("all_gather", groups) + "}";
  TensorType t = x.type();
  t.shape[dim] *= static_cast<int64_t>(groups[0].size());
  return emit("stablehlo.all_gather", {x}, {t}, std::move(attrs))[0];
}

Value Builder::reduce_scatter(Value x, int64_t dim, const ReplicaGroups& groups,
                              const RegionFn& combine) {
  check_dim("reduce_scatter", x, dim);
  std::string attrs = "{replica_groups = " + groups_attr("reduce_scatter", groups) +
                      ", scatter_dimension = " + std::to_string(dim) + " : i64}";
  TensorType t = x.type();
  int64_t n = static_cast<int64_t>(groups[0].size());
  if (t.shape[dim] % n != 0)
    throw TypeError("reduce_scatter: dimension of " + x.type().str() + " not divisible by " +
                    std::to_string(n));
  t.shape[dim] /= n;
  TensorType scalar{x.dtype(), {}};
  int r = region({scalar, scalar}, combine);
  return emit("stablehlo.reduce_scatter", {x}, {t}, std::move(attrs), {r})[0];
}

Value Builder::all_to_all(Value x, int64_t split_dim, int64_t concat_dim,
                          const ReplicaGroups& groups) {
  check_dim("all_to_all", x, split_dim);
  check_dim("all_to_all", x, concat_dim);
  int64_t n = static_cast<int64_t>(groups.empty() ? 0 : groups[0].size());
  std::string attrs = "{concat_dimension = " + std::to_string(concat_dim) +
                      " : i64, replica_groups = " + groups_attr("all_to_all", groups) +
                      ", split_count = " + std::to_string(n) +
                      " : i64, split_dimension = " + std::to_string(split_dim) + " : i64}";
  TensorType t = x.type();
  if (t.shape[split_dim] % n != 0)
    throw TypeError("all_to_all: dimension of " + x.type().str() + " not divisible by " +
                    std::to_string(n));
  t.shape[split_dim] /= n;
  t.shape[concat_dim] *= n;
  return emit("stablehlo.all_to_all", {x}, {t}, std::move(attrs))[0];
}

Value Builder::collective_permute(Value x,
                                  const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  if (pairs.empty()) throw TypeError("collective_permute: no source-target pairs");
  std::string attr = "dense<[";
  for (size_t i = 0; i < pairs.size(); ++i)
    attr += (i ? ", [" : "[") + std::to_string(pairs[i].first) + ", " +
            std::to_string(pairs[i].second) + "]";
  attr += "]> : tensor<" + std::to_string(pairs.size()) + "x2xi64>";
  return emit("stablehlo.collective_permute", {x}, {x.type()},
              "{source_target_pairs = " + attr + "}")[0];
}

Value Builder::replica_id() {
  return emit("stablehlo.replica_id", {}, {TensorType{ElementType::kU32, {}}}, "")[0];
}

}  // namespace torch_tpu::hlo
