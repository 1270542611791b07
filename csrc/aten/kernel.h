// The lowered-op kernel shared by the boxed and unboxed entry points
// (dispatch.cc, unboxed.cc): how an operator is served and one call of it.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/SmallVector.h>

#include <memory>
#include <string>
#include <vector>

#include "../lowering/registry.h"
#include "arguments.h"
#include "checks.h"
#include "meta.h"

namespace torch_tpu::aten {

// How one operator is served.
struct Plan {
  const lowering::LoweringFn* fn = nullptr;
  std::string lowering;                 // the registry entry used
  std::vector<size_t> inputs;           // argument indices passed to the lowering
  std::vector<size_t> mutated;          // arguments written (alias sets with '!')
  std::vector<size_t> generators;       // Generator? arguments
  bool implicit_generator = false;      // draws from the default generator unasked
  std::vector<int> unit_scales;         // `alpha`/`beta` arguments left out when 1
  std::vector<size_t> float_inputs;     // float arguments passed as program inputs
  std::vector<size_t> static_exponents; // Scalar exponents passed as static values when exact
  std::vector<Check> checks;            // CPU's checks the meta function leaves out
  // A derived variant's functional operator: an in-place result's dtype must
  // cast to the written tensor's (PyTorch's in-place result-type rule); an
  // out= variant without a meta kernel takes its meta (meta.h).
  std::optional<c10::OperatorHandle> functional;
  // The lowering has asked for the matmul precision (set when it first does,
  // under the engine lock): deferred calls then capture it.
  mutable bool reads_precision = false;
};

// Whether tpu registers its own autograd kernel for the CompositeImplicit
// operator `name` ("aten::linear", linear_ops.cc), so its backend kernel is
// the lowering rather than PyTorch's decomposition.
bool has_tpu_autograd(const std::string& name);

// Whether argument `i` is an `alpha`/`beta` of exactly 1 that the lowering
// leaves out (Plan::unit_scales).
bool omits(const Plan& plan, c10::ArrayRef<c10::IValue> args, size_t i);

// Input `i` of a call as its lowering receives it: left out (omits), a float
// as a program input (Plan::float_inputs), an exponent CPU computes without
// pow as a static double (Plan::static_exponents), or as `convert` makes it.
lowering::Arg input_arg(const Plan& plan, ArgReader& r, const c10::FunctionSchema& schema,
                        c10::ArrayRef<c10::IValue> args, size_t i, CallState& state);

// Runs `plan`'s lowering on `args` (tensor inputs already nodes) in the
// engine's current builder and checks its results against the call's meta
// types. A lowering that cannot handle the arguments raises
// NotImplementedError naming `op`; an invalid argument propagates (the
// caller raises it as the CPU would). `op` null: a deferred call, which
// lowered before with the same signature, so any failure is internal.
hlo::Values lower_call(engine::Engine& e, const Plan& plan, const OpMeta& meta,
                       lowering::LazyPrecision precision, const lowering::Args& args,
                       const c10::OperatorName* op);

// One call's outcome: the output metadata and the fresh (non-aliasing)
// result tensors in order. Written arguments have been updated in place.
struct Ran {
  std::shared_ptr<const OpMeta> meta;
  c10::SmallVector<at::Tensor, 2> results;
};

// Checks, records (Fused Eager) or runs (Strict/Debug) `op` on `args`.
Ran run_lowered(const c10::OperatorHandle& op, const Plan& plan, c10::ArrayRef<c10::IValue> args);

}  // namespace torch_tpu::aten
