// Output metadata of an ATen call, from PyTorch's own meta functions (so
// shapes, dtypes and argument errors are exactly PyTorch's). Results are
// cached by the call's argument metadata: many meta functions are Python, and
// a steady-state loop must not run Python per op.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <string>

#include <vector>

#include "../hlo/types.h"

namespace torch_tpu::aten {

struct TensorMeta {
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype = c10::kFloat;
};

struct OpMeta {
  std::vector<TensorMeta> fresh;      // non-aliasing returns, lists flattened
  std::vector<int64_t> return_lists;  // per non-aliasing return: list length, -1 a
                                      // tensor, -2 an undefined tensor, -3 an int
  std::vector<int64_t> ints;          // the int returns (sizes, as fused attention's)
  std::vector<TensorMeta> mutated;    // written arguments after the call, flattened
  std::vector<hlo::TensorType> types; // fresh then mutated, as lowerings see them
  // CPU's kernel restrides its out= tensors to `mutated`'s strides even at
  // their own sizes (max_unpool2d); otherwise such tensors keep theirs.
  bool restrides_outs = false;
};

// Whether `s` is an out= form (has out= arguments).
bool is_out_variant(const c10::FunctionSchema& s);

// Where CPU's output metadata differs from the meta function's (norms' saved
// statistics), `m` is changed to CPU's (cpu_meta_rules.cc).
void apply_cpu_rules(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args,
                     OpMeta& m);

// LAPACK's layout of matrices `sizes` (rank >= 2): each matrix column-major,
// the batch row-major (CPU's linalg results and their out= tensors).
c10::DimVector lapack_strides(c10::IntArrayRef sizes);

// Meta kernels for ops PyTorch gives none (conv_meta.cc, linalg_meta.cc,
// nn_extra_meta.cc, optimizer_meta.cc). They are private to the tpu kernels'
// meta step: never registered for PyTorch's Meta key, so importing torch_tpu
// leaves CPU and meta tensors as PyTorch has them. `op` is the full name,
// "aten::geqrf" or "aten::histogram.bin_ct".
void add_private_meta(const std::string& op, c10::KernelFunction kernel);
// Runs `op`'s meta kernel on `stack`: the private one, or PyTorch's.
void call_meta(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// `mutated_args` are the indices of arguments the op writes. For an in-place
// or out= variant, `functional` is its functional operator: an in-place
// variant's functional result must cast to the written tensor's dtype, or
// this raises as CPU does; an out= variant without a meta kernel takes its
// functional's results, resized into the out= tensors.
std::shared_ptr<const OpMeta> infer_meta(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                                         const std::vector<size_t>& mutated_args,
                                         const c10::OperatorHandle* functional = nullptr);

}  // namespace torch_tpu::aten
