// Output metadata where CPU, the reference, differs from PyTorch's meta
// functions (which follow CUDA): the saved statistics of batch, layer and
// group norm. On CPU they are in the input's dtype for a bf16/f16 input unless
// a parameter is f32 (mixed precision: then f32), and batch norm in eval mode
// saves empty [0] statistics instead of [C] (its out= kernel leaves them as
// given). One table row per operator, covering its out= variant.
// Also `_foreach_pow.Scalar`, whose meta function types each result as if
// the exponent were an int, where CPU promotes tensor and exponent
// (bool ** True is bool); the LAPACK-backed out= forms, which leave a
// resized out= matrix column-major on CPU; `cat.out`, which on CPU resizes
// its out= tensor to the inputs' common memory format; and
// `max_unpool2d.out`, which restrides its out= tensor to the input's
// memory format even at the right size.
#include <ATen/ATen.h>

#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meta.h"

namespace torch_tpu::aten {

namespace {

constexpr int kTraining = -1;  // always training
constexpr int kEval = -2;      // always eval

struct StatsRule {
  const char* name;
  const char* overload;
  std::vector<int> params;  // argument indices of weight, bias, running stats
  int training;             // argument index of the `training` flag, or kTraining/kEval
};

const std::vector<StatsRule>& rules() {
  static const std::vector<StatsRule> r{
      {"aten::native_batch_norm", "", {1, 2, 3, 4}, 5},
      {"aten::_native_batch_norm_legit", "", {1, 2, 3, 4}, 5},
      {"aten::_native_batch_norm_legit_functional", "", {1, 2, 3, 4}, 5},
      {"aten::_native_batch_norm_legit", "no_stats", {1, 2}, 3},
      {"aten::_native_batch_norm_legit_no_training", "", {1, 2, 3, 4}, kEval},
      {"aten::_batch_norm_no_update", "", {1, 2, 3, 4}, kEval},
      {"aten::_batch_norm_with_update", "", {1, 2, 3, 4}, kTraining},
      {"aten::_batch_norm_with_update_functional", "", {1, 2, 3, 4}, kTraining},
      {"aten::native_layer_norm", "", {2, 3}, kTraining},
      {"aten::native_group_norm", "", {1, 2}, kTraining},
  };
  return r;
}

// The rule of `s`, or of the functional `s` is the out= variant of.
const StatsRule* find_rule(const c10::FunctionSchema& s, bool out) {
  for (const StatsRule& r : rules())
    if (s.name() == r.name && s.overload_name() == (out ? "out" : r.overload) &&
        (!out || *r.overload == '\0'))
      return &r;
  return nullptr;
}

// CPU's dtype for the statistics: a 16-bit input's own dtype, or f32 when
// any parameter is f32; other inputs keep the meta function's dtype.
std::optional<c10::ScalarType> stats_dtype(const StatsRule& r, c10::ArrayRef<c10::IValue> args) {
  c10::ScalarType in = args.at(0).toTensor().scalar_type();
  if (in != at::kBFloat16 && in != at::kHalf) return std::nullopt;
  for (int i : r.params) {
    const c10::IValue& p = args.at(i);
    if (p.isTensor() && p.toTensor().defined() && p.toTensor().scalar_type() == at::kFloat)
      return at::kFloat;
  }
  return in;
}

bool eval_mode(const StatsRule& r, c10::ArrayRef<c10::IValue> args) {
  if (r.training == kTraining) return false;
  if (r.training == kEval) return true;
  return !args.at(r.training).toBool();
}

// LAPACK-backed ops whose out= kernels on CPU leave a resized matrix out=
// tensor in LAPACK's column-major layout (batched: each matrix's columns
// contiguous), where PyTorch's meta functions give row-major: the indices of
// those outputs among the out= tensors (pivots, eigenvalues, info stay).
const std::vector<size_t>* column_major_outs(const c10::FunctionSchema& s) {
  static const std::map<std::string, std::vector<size_t>> ops{
      {"aten::cholesky_inverse", {0}}, {"aten::_linalg_eigh", {1}},
      {"aten::linalg_householder_product", {0}}, {"aten::linalg_ldl_factor_ex", {0}},
      {"aten::linalg_ldl_solve", {0}}, {"aten::linalg_lstsq", {0}},
      {"aten::linalg_lu_factor_ex", {0}}, {"aten::linalg_lu_solve", {0}}, {"aten::lu_solve", {0}},
      {"aten::linalg_qr", {0, 1}}, {"aten::qr", {0, 1}}, {"aten::ormqr", {0}},
      {"aten::triangular_solve", {0, 1}}};
  auto it = ops.find(s.name());
  return it == ops.end() ? nullptr : &it->second;
}

// Those out= tensors, when this call resizes them (their sizes change), take
// the column-major layout.
void restride_resized_outs(const c10::FunctionSchema& s, c10::ArrayRef<c10::IValue> args,
                           const std::vector<size_t>& which, OpMeta& m) {
  std::vector<at::Tensor> given;
  for (size_t i = 0; i < args.size() && i < s.arguments().size(); ++i)
    if (s.arguments()[i].is_out() && args[i].isTensor()) given.push_back(args[i].toTensor());
  if (given.size() != m.mutated.size()) return;
  for (size_t i : which) {
    if (i >= given.size()) continue;
    TensorMeta& t = m.mutated[i];
    if (t.sizes.size() < 2 || given[i].sizes() == c10::IntArrayRef(t.sizes)) continue;
    c10::DimVector strides = lapack_strides(t.sizes);
    t.strides.assign(strides.begin(), strides.end());
  }
}

// cat.out on CPU: a resized out= tensor takes the memory format the inputs
// share (channels-last inputs, channels-last out), contiguous where they
// differ (an empty 1-D input, which cat skips, counts as contiguous);
// PyTorch's meta function always makes it contiguous.
void cat_out_layout(c10::ArrayRef<c10::IValue> args, OpMeta& m) {
  if (args.size() < 3 || !args[0].isTensorList() || !args[2].isTensor() ||
      m.mutated.size() != 1)
    return;
  TensorMeta& t = m.mutated[0];
  if (args[2].toTensor().sizes() == c10::IntArrayRef(t.sizes)) return;  // not resized
  std::optional<at::MemoryFormat> format;
  for (const at::Tensor& x : args[0].toTensorList().vec()) {
    at::MemoryFormat f = x.suggest_memory_format();
    if (format && *format != f) {
      format = at::MemoryFormat::Contiguous;
      break;
    }
    format = f;
  }
  if (!format || *format == at::MemoryFormat::Contiguous) return;
  at::Tensor like = at::empty(t.sizes, at::TensorOptions().device(at::kMeta).memory_format(*format));
  t.strides.assign(like.strides().begin(), like.strides().end());
}

// max_unpool2d.out on CPU restrides its out= tensor, whatever it was, to
// the input's suggested memory format (a `resize_` with that format).
void max_unpool2d_out_layout(c10::ArrayRef<c10::IValue> args, OpMeta& m) {
  if (args.empty() || !args[0].isTensor() || m.mutated.size() != 1) return;
  TensorMeta& t = m.mutated[0];
  at::MemoryFormat format = args[0].toTensor().suggest_memory_format();
  at::Tensor like = at::empty(t.sizes, at::TensorOptions().device(at::kMeta).memory_format(format));
  t.strides.assign(like.strides().begin(), like.strides().end());
  m.restrides_outs = true;
}

}  // namespace

void apply_cpu_rules(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args,
                     OpMeta& m) {
  if (schema.name() == "aten::_foreach_pow" && schema.overload_name() == "Scalar") {
    const c10::List<at::Tensor> tensors = args.at(0).toTensorList();
    for (size_t i = 0; i < m.fresh.size() && i < tensors.size(); ++i)
      m.fresh[i].dtype = at::result_type(tensors[i], args.at(1).toScalar());
    return;
  }
  const bool out = is_out_variant(schema);
  if (out && schema.name() == "aten::cat") {
    cat_out_layout(args, m);
    return;
  }
  if (out && schema.name() == "aten::max_unpool2d") {
    max_unpool2d_out_layout(args, m);
    return;
  }
  if (const std::vector<size_t>* which = out ? column_major_outs(schema) : nullptr) {
    restride_resized_outs(schema, args, *which, m);
    return;
  }
  const StatsRule* r = find_rule(schema, out);
  if (r == nullptr) return;
  if (out) {
    // CPU's out= kernel leaves eval mode's statistics as they were given
    // (PyTorch's meta resizes them to [C]); their dtype is the caller's.
    if (m.mutated.size() < 3 || !eval_mode(*r, args)) return;
    for (size_t i : {1, 2}) {
      const at::Tensor& given = args.at(args.size() - 3 + i).toTensor();
      m.mutated[i].sizes = given.sizes().vec();
      m.mutated[i].strides = given.strides().vec();
    }
    return;
  }
  if (m.fresh.size() < 3) return;
  std::optional<c10::ScalarType> dtype = stats_dtype(*r, args);
  bool eval = eval_mode(*r, args);
  for (size_t i : {1, 2}) {
    if (dtype) m.fresh[i].dtype = *dtype;
    if (eval) {
      m.fresh[i].sizes = {0};
      m.fresh[i].strides = {1};
    }
  }
}

}  // namespace torch_tpu::aten
