// Loop partitions of small programs. XLA:CPU's ParallelTaskAssigner splits a
// loop fusion it judges costly into parts run on its thread pool
// (`outer_dimension_partitions`); for the arrays of a decode step or a small
// model's op (a 64x128 matrix-vector product was split in two) the hand-off
// and the wake-ups cost more than the part saves, and the thread that records
// the next ops competes for the same cores. A program whose parameters and
// results are all small compiles without the pass.
#pragma once

#include <cstdint>
#include <string>

#include "../../pjrt/compile_options.h"

namespace torch_tpu::engine::xla_cpu {

// The pass's name, for --xla_disable_hlo_passes.
inline constexpr const char* kPartitionPass = "cpu-parallel-task-assigner";

// A program is small when every parameter and result of its @main holds at
// most this many bytes. Measured on 2 cores (docs/design.md, XLA:CPU
// tuning): a tiny Llama's decode step (arrays up to 32 KiB) waited ~35 % less
// for its program without partitions; a single Strict convolution over
// 400 KiB, timed with the other core idle, may gain from its split, so the
// line stays below that.
inline constexpr int64_t kSmallProgramBytes = int64_t{256} << 10;

// Bytes of the largest parameter or result of `mlir`'s public @main; -1 when
// the signature cannot be read or has a dimension of unknown size.
int64_t largest_signature_bytes(const std::string& mlir);

// `overrides`, with the partitioning pass added to the passes the process
// disables (`disabled`: XLA_FLAGS' --xla_disable_hlo_passes, comma-separated)
// when `mlir` is small. A caller's own xla_disable_hlo_passes is kept as
// given.
pjrt::CompileOverrides unpartitioned_if_small(const std::string& mlir,
                                              const pjrt::CompileOverrides& overrides,
                                              const std::string& disabled);

}  // namespace torch_tpu::engine::xla_cpu
