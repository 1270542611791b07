// A user's StableHLO function called from a program (a custom kernel): its
// text made private to the program and renamed so that two kernels, or a
// kernel and the program, never share a symbol, and its entry function's
// signature read from the text so calls can be checked before any plugin
// sees them.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "types.h"

namespace torch_tpu::hlo {

struct Kernel {
  // Parses `text`: an MLIR module (as jax.export or a user writes it) or
  // bare `func.func` definitions, in StableHLO/CHLO ops, pretty or generic.
  // The entry is `@main`, else the only public function. Throws TypeError
  // naming what is wrong (no function, several candidates, a dynamic or
  // non-tensor parameter).
  static std::shared_ptr<const Kernel> parse(std::string_view text);

  std::string entry;                   // the renamed entry symbol, without '@'
  std::string functions;               // its func.func definitions, private, renamed
  std::vector<TensorType> parameters;  // the entry's signature
  std::vector<TensorType> results;
};
using KernelPtr = std::shared_ptr<const Kernel>;

// A tensor type spelled as MLIR prints it ("tensor<2x3xf32>", "tensor<i1>");
// throws TypeError for anything else (dynamic dims, encodings).
TensorType parse_tensor_type(std::string_view text);

}  // namespace torch_tpu::hlo
