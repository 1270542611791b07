// A call's arguments as a lowering takes them: each ATen argument becomes a
// lowering::Arg; its tensors and host numbers enter through an ArgReader —
// bound into the recording now (eager), or captured as references of a
// deferred op (defer.cc).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include "../engine/engine.h"
#include "../lowering/registry.h"

namespace torch_tpu::aten {

// "aten::add.Tensor" for messages.
std::string full_name(const c10::OperatorName& n);

// What scanning a call's tensors found.
struct CallState {
  int device = -1;
  bool wide = false;  // a float64 tensor takes part: Python floats enter as f64
  bool math_bits = false;  // a tpu tensor is a lazy conjugate or negative view
};

// Checks that `v`'s tensors share one tpu device (CPU 0-dim tensors are host
// scalars) and notes it in `s`.
void scan(const c10::IValue& v, CallState& s, const c10::OperatorName& op);

// Where a call's tensors and host numbers go. Called in argument order: a
// list's None entries call none(), so a reader sees every position.
class ArgReader {
 public:
  virtual ~ArgReader() = default;
  virtual hlo::Value tensor(const at::Tensor& t) = 0;  // a tpu tensor
  virtual hlo::Value scalar(hlo::ElementType dtype, const engine::ScalarBits& bits) = 0;
  virtual void none() {}
};

lowering::Arg convert(ArgReader& r, const c10::Argument& schema_arg, const c10::IValue& v,
                      CallState& s);
// A float argument as a 0-d program input, typed as a Python number would be
// (a weak scalar; f64 only beside f64 tensors).
lowering::Arg float_input(ArgReader& r, double v, const CallState& s);

}  // namespace torch_tpu::aten
