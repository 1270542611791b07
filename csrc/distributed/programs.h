// The StableHLO programs of the device-native transport: one collective over
// the replicas 0..size-1 of a program compiled for `size` devices (replica
// i is group rank i). Inputs are flat arrays, concatenated in order; the
// result is split into the outputs' flat arrays.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../hlo/types.h"

namespace torch_tpu::distributed {

enum class Collective : int64_t { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kAllToAll };

struct CollectiveSpec {
  Collective op = Collective::kAllReduce;
  hlo::ElementType dtype = hlo::ElementType::kF32;
  int64_t reduce = -1;  // c10d::ReduceOp::RedOpType (all_reduce, reduce_scatter)
  int64_t root = -1;    // broadcast
  int64_t size = 0;     // ranks
  std::vector<int64_t> in_numels, out_numels;

  bool operator==(const CollectiveSpec& o) const {
    return op == o.op && dtype == o.dtype && reduce == o.reduce && root == o.root &&
           size == o.size && in_numels == o.in_numels && out_numels == o.out_numels;
  }
  std::string str() const;  // for error messages
};

// Empty when `spec` has a native program; else why not (the collective then
// runs host-staged: complex broadcast, PREMUL_SUM, AVG of integers, ...).
std::string unsupported(const CollectiveSpec& spec);
// Empty when the sizes fit the collective (outputs sum to the inputs, times
// or divided by `size` as it gathers or scatters); else what is wrong.
std::string bad_sizes(const CollectiveSpec& spec);

// The module (MLIR text) for `spec`; call only when unsupported() and
// bad_sizes() are empty.
std::string collective_program(const CollectiveSpec& spec);

}  // namespace torch_tpu::distributed
