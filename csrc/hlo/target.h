// The target profile: what lowering and compiling need to know about the
// plugin that runs the programs, in one description. The engine builds it
// once from its PJRT client and configuration (engine/target.h) and owns it;
// lowerings read it from their context (`c.target`), never from globals or
// the environment. Plain data here, so that the lowering layer, which knows
// only the builder, can see it.
#pragma once

#include <string>
#include <utility>

#include "types.h"

namespace torch_tpu::hlo {

// Whether CPU PyTorch on this host runs a 16-bit transposed convolution of
// type `t` through oneDNN (f32 sums, one rounding) rather than its slow
// col2im kernel (aten/cpu_numerics.cc asks PyTorch).
using HalfConvQuery = bool (*)(ElementType t);

struct Target {
  // The PJRT platform name ("cpu", "cuda", "tpu"): the one thing a plugin is
  // recognised by.
  std::string platform;
  std::string device_kind;  // device 0's kind, for messages
  bool xla_cpu = false;     // platform "cpu": XLA:CPU's workarounds apply

  // XLA:CPU workarounds (engine/xla_cpu/README.md):
  // f32 dots take their bf16 split terms (lowering/precision.h) as bf16
  // operands with an f32 result, which XLA:CPU runs on its bf16 gemm. On by
  // default on XLA:CPU; TORCH_TPU_BF16_DOTS=0/1 decides elsewhere too.
  bool bf16_split_dots = false;
  // Dots with bf16 operands and an f32 result are marked per group, so the
  // compile can put back in f32 those XLA:CPU's generic dot kernel would get
  // (it rejects them): on XLA:CPU, or wherever split dots are bf16.
  bool checked_bf16_dots = false;
  // A program's results keep the shape of the value a storage's flat array
  // was reshaped from. XLA:CPU iterates a loop fusion over its result's
  // shape, and a flat result (the reshape fused into it) computes every
  // element's coordinates with divisions, which LLVM does not vectorize: a
  // 7x7 depthwise convolution ran 5x slower, a bias add 1.6x. A buffer's
  // bytes do not depend on its dimensions there (row-major; parameters are
  // checked by size), so the engine keeps treating it as flat.
  bool shaped_results = false;
  // A buffer's device memory is host memory, dense row-major: a small host
  // read waits for the buffer and copies its bytes on the reading thread
  // (engine/transfers.cc). XLA:CPU's own copy (PJRT_Buffer_ToHostBuffer) is a
  // task on its thread pool, one more thread hand-off: `x.cpu()` of a ready
  // 128-float tensor took 43 us, now 3.
  bool host_memory_buffers = false;
  // A program whose parameters and results are all small compiles without
  // XLA:CPU's loop partitions (engine/xla_cpu/partitions.h): for small
  // arrays the thread hand-offs cost more than the parts save.
  bool unpartitioned_small_programs = false;

  // CPU numerics quirks: the host's CPU PyTorch kernels whose rounding the
  // lowerings reproduce. Unset (no torch, as in the C++ tests): the common
  // x86 case, bf16 through oneDNN and f16 not.
  HalfConvQuery cpu_half_conv_query = nullptr;
  bool cpu_onednn_half_conv(ElementType t) const {
    return cpu_half_conv_query ? cpu_half_conv_query(t) : t == ElementType::kBF16;
  }

  // The profile of the plugin whose platform name is `platform`;
  // `bf16_dots` is TORCH_TPU_BF16_DOTS as the engine read it (-1: unset,
  // the platform's default).
  static Target for_platform(std::string platform, std::string device_kind = "",
                             int bf16_dots = -1) {
    Target t;
    t.xla_cpu = platform == "cpu";
    t.platform = std::move(platform);
    t.device_kind = std::move(device_kind);
    t.bf16_split_dots = bf16_dots >= 0 ? bf16_dots == 1 : t.xla_cpu;
    t.checked_bf16_dots = t.xla_cpu || t.bf16_split_dots;
    t.shaped_results = t.xla_cpu;
    t.host_memory_buffers = t.xla_cpu;
    t.unpartitioned_small_programs = t.xla_cpu;
    return t;
  }
};

}  // namespace torch_tpu::hlo
