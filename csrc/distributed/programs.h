// The StableHLO programs of the device-native transport: one collective over
// the replicas 0..size-1 of a program compiled for `size` devices (replica
// i is group rank i; for a send/receive pair, replica 0 sends and replica 1
// receives). Inputs are flat arrays, concatenated in order; the result is
// split into the outputs' flat arrays.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../hlo/types.h"

namespace torch_tpu::distributed {

// kReduce: an all_reduce whose result only the root keeps. kGather: an
// all_gather (only the root keeps it; the others bring `size` outputs'
// worth of sizes). kScatter: every rank brings `size` equal inputs (the
// root its chunks, the others anything of that size) and keeps chunk `rank`
// of the root's, through one all_to_all. kPermute: a send/receive pair as
// one collective_permute (size 1: both ends on one device, a copy).
enum class Collective : int64_t {
  kAllReduce, kBroadcast, kAllGather, kReduceScatter, kAllToAll,
  kReduce, kGather, kScatter, kPermute
};

struct CollectiveSpec {
  Collective op = Collective::kAllReduce;
  hlo::ElementType dtype = hlo::ElementType::kF32;
  int64_t reduce = -1;  // c10d::ReduceOp::RedOpType (all_reduce, reduce_scatter, reduce)
  int64_t root = -1;    // broadcast, reduce, gather, scatter
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
