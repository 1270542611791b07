// CPU's argument checks that PyTorch's meta functions leave to the CPU
// kernels: memory overlap between what an op writes and what it reads,
// dtypes a kernel is not built for, Python numbers out of a dtype's range,
// integer powers and divisions a CPU kernel refuses. A rule only detects the
// mistake; run_lowered then asks the CPU for its own words (raise_as_cpu),
// and the rule's message stands where the CPU cannot be asked.
#include "checks.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/MemoryOverlap.h>

#include <set>
#include <string>

namespace torch_tpu::aten {

namespace {

using Args = c10::ArrayRef<c10::IValue>;
using Mutated = c10::ArrayRef<at::Tensor>;

bool is_tpu_tensor(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// The operator's name without namespace, overload or in-place underscore.
std::string base_name(const c10::FunctionSchema& schema) {
  std::string name = schema.name().substr(schema.name().find("::") + 2);
  if (name.size() > 1 && name.back() == '_' && name.compare(name.size() - 2, 2, "__") != 0)
    name.pop_back();
  return name;
}

bool written(const c10::FunctionSchema& schema, size_t i) {
  const c10::Argument& a = schema.arguments()[i];
  return a.is_out() || (a.alias_info() != nullptr && a.alias_info()->isWrite());
}

// Each tensor the call reads (arguments it does not write).
template <typename F>
void for_each_input(const c10::FunctionSchema& schema, Args args, F&& f) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (written(schema, i)) continue;
    const c10::IValue& v = args[i];
    if (v.isTensor() && v.toTensor().defined()) f(v.toTensor());
    else if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList()) f(t);
  }
}

// ---- memory overlap ---------------------------------------------------------
// TensorIterator: no written element shared by two positions, and an input
// either the written tensor itself or disjoint from it.
void overlap_elementwise(const c10::FunctionSchema& schema, Args args, const OpMeta&,
                         Mutated mutated) {
  for (const at::Tensor& out : mutated) {
    at::assert_no_internal_overlap(out);
    for_each_input(schema, args, [&](const at::Tensor& in) { at::assert_no_partial_overlap(out, in); });
  }
}

// Ops that gather or scatter (and cat): inputs may not overlap the output at all.
void overlap_disjoint(const c10::FunctionSchema& schema, Args args, const OpMeta&, Mutated mutated) {
  for (const at::Tensor& out : mutated) {
    at::assert_no_internal_overlap(out);
    for_each_input(schema, args, [&](const at::Tensor& in) { at::assert_no_overlap(out, in); });
  }
}

// Fills write one value wherever a position points: CPU lets them write
// through expanded views (masked_fill_ and index_put_ warn that it is
// deprecated).
void overlap_fill(const c10::FunctionSchema& schema, Args args, const OpMeta&, Mutated mutated) {
  for (const at::Tensor& out : mutated)
    for_each_input(schema, args, [&](const at::Tensor& in) { at::assert_no_partial_overlap(out, in); });
}

const std::set<std::string>& disjoint_ops() {
  static const std::set<std::string> s{"index_add", "index_copy", "scatter", "scatter_add",
                                       "scatter_reduce", "cat", "gather", "index_select",
                                       "take", "put", "index_reduce"};
  return s;
}
const std::set<std::string>& fill_ops() {
  static const std::set<std::string> s{"fill", "zero", "masked_fill", "index_fill", "index_put",
                                       "_index_put_impl"};
  return s;
}

// ---- dtypes -----------------------------------------------------------------

c10::ScalarType result_dtype(const OpMeta& m) {
  return m.fresh.empty() ? m.mutated.at(0).dtype : m.fresh[0].dtype;
}

c10::ScalarType arg_dtype(Args args, size_t i) { return args.at(i).toTensor().scalar_type(); }

[[noreturn]] void not_implemented(const c10::FunctionSchema& schema, c10::ScalarType t) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "\"", base_name(schema), "\" not implemented for '",
                              c10::toString(t), "'");
}

void integral_only(const c10::FunctionSchema& s, Args, const OpMeta& m, Mutated) {
  if (!c10::isIntegralType(result_dtype(m), /*includeBool=*/true)) not_implemented(s, result_dtype(m));
}
void integral_not_bool(const c10::FunctionSchema& s, Args, const OpMeta& m, Mutated) {
  if (!c10::isIntegralType(result_dtype(m), /*includeBool=*/false)) not_implemented(s, result_dtype(m));
}
void floating_only(const c10::FunctionSchema& s, Args args, const OpMeta&, Mutated) {
  c10::ScalarType t = arg_dtype(args, 0);
  if (!c10::isFloatingType(t) && !c10::isComplexType(t)) not_implemented(s, t);
}
void not_bool(const c10::FunctionSchema& s, Args args, const OpMeta&, Mutated) {
  if (arg_dtype(args, 0) == at::kBool) not_implemented(s, at::kBool);
}

// Matrix products take operands of one dtype (no promotion).
void same_dtype_operands(const c10::FunctionSchema& s, Args args, const OpMeta&, Mutated) {
  std::optional<c10::ScalarType> first;
  for_each_input(s, args, [&](const at::Tensor& t) {
    if (t.dim() == 0 && !is_tpu_tensor(t)) return;
    if (!first) first = t.scalar_type();
    TORCH_CHECK(t.scalar_type() == *first, base_name(s),
                ": expected all operands to have the same dtype, but got ", *first, " and ",
                t.scalar_type());
  });
}

// index_add/index_copy: self and source of one dtype; index of an index type.
void index_dtypes(const c10::FunctionSchema& s, Args args, const OpMeta&, Mutated) {
  const auto& names = s.arguments();
  std::optional<c10::ScalarType> self, source;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].isTensor()) continue;
    const std::string& n = names[i].name();
    c10::ScalarType t = args[i].toTensor().scalar_type();
    if (n == "index") {
      TORCH_CHECK(t == at::kLong || t == at::kInt, base_name(s),
                  "(): Expected dtype int32 or int64 for index");
      TORCH_CHECK(args[i].toTensor().dim() <= 1, base_name(s), "(): Index is supposed to be a vector");
    }
    if (n == "self") self = t;
    if (n == "source") source = t;
  }
  TORCH_CHECK(!self || !source || *self == *source, base_name(s), "(): self (", *self,
              ") and source (", *source, ") must have the same scalar type");
}

void target_dtype(const c10::FunctionSchema& s, Args args, const OpMeta&, Mutated) {
  c10::ScalarType t = arg_dtype(args, 1);
  TORCH_CHECK(t == at::kLong || t == at::kByte, "expected target dtype to be Long or Byte, but got ", t);
}

// ---- Python numbers ---------------------------------------------------------

// A fill value must be representable in the filled dtype.
void fill_value_in_range(const c10::FunctionSchema& s, Args args, const OpMeta& m, Mutated) {
  c10::ScalarType t = result_dtype(m);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& n = s.arguments()[i].name();
    if ((n != "value" && n != "fill_value") || !args[i].isScalar()) continue;
    c10::Scalar v = args[i].toScalar();
    if (c10::isComplexType(t) || (v.isComplex() && !c10::isComplexType(t))) continue;
    AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, t, "fill",
                               [&] { (void)v.to<scalar_t>(); });
  }
}

// Integer tensors to a negative integer power (a Python number).
void integer_power(const c10::FunctionSchema&, Args args, const OpMeta& m, Mutated) {
  if (!c10::isIntegralType(result_dtype(m), true) || !args.at(1).isScalar()) return;
  c10::Scalar e = args[1].toScalar();
  TORCH_CHECK(!(e.isIntegral(false) && e.toLong() < 0),
              "Integers to negative integer powers are not allowed.");
}

// Integer division (floor, trunc, remainder) by a zero on the host: a
// Python number or a CPU scalar. A zero on the device is data.
void integer_division(const c10::FunctionSchema& s, Args args, const OpMeta& m, Mutated) {
  if (!c10::isIntegralType(result_dtype(m), true) || args.size() < 2) return;
  if (base_name(s) == "div" && (args.size() < 3 || !args[2].isString())) return;
  const c10::IValue& d = args[1];
  bool zero = false;
  if (d.isScalar()) zero = d.toScalar().toDouble() == 0;
  else if (d.isTensor() && d.toTensor().defined() && !is_tpu_tensor(d.toTensor()) &&
           d.toTensor().numel() == 1)
    zero = d.toTensor().item().toDouble() == 0;
  TORCH_CHECK(!zero, "ZeroDivisionError");
}

// Subtraction of bools (rsub's meta function lets it through).
void no_bool_subtraction(const c10::FunctionSchema& s, Args, const OpMeta& m, Mutated) {
  TORCH_CHECK(result_dtype(m) != at::kBool, "Subtraction, the `-` operator, with a bool tensor is ",
              "not supported. If you are trying to invert a mask, use the `~` or `logical_not()` ",
              "operator instead.");
}

void nonnegative_beta(const c10::FunctionSchema& s, Args args, const OpMeta&, Mutated) {
  for (size_t i = 0; i < args.size(); ++i)
    if (s.arguments()[i].name() == "beta" && args[i].isDouble())
      TORCH_CHECK(args[i].toDouble() >= 0, base_name(s), " does not support negative values for beta.");
}

void round_decimals(const c10::FunctionSchema& s, Args args, const OpMeta& m, Mutated mutated) {
  if (s.overload_name() == "decimals") floating_only(s, args, m, mutated);
}

// The fused optimizer steps: every non-empty list pairs with the parameters,
// tensor by tensor, in shape and device (CPU's fused kernels check the same).
void fused_step_lists(const c10::FunctionSchema& s, Args args, const OpMeta&, Mutated) {
  const auto& params = args[0].toTensorList();
  for (size_t i = 1; i < args.size(); ++i) {
    if (!args[i].isTensorList()) continue;
    const auto& list = args[i].toTensorList();
    const std::string& name = s.arguments()[i].name();
    if (list.empty() && (name == "max_exp_avg_sqs" || name == "momentum_buffer_list")) continue;
    TORCH_CHECK(list.size() == params.size(), base_name(s), ": ", name, " has ", list.size(),
                " tensors but there are ", params.size(), " parameters");
    if (name == "state_steps") continue;
    for (size_t k = 0; k < list.size(); ++k) {
      const at::Tensor& t = list.get(k);
      const at::Tensor& p = params.get(k);
      TORCH_CHECK(t.sizes() == p.sizes() && t.device() == p.device(), base_name(s), ": ", name,
                  "[", k, "] has shape ", t.sizes(), " on ", t.device(), " but parameter ", k,
                  " has shape ", p.sizes(), " on ", p.device());
    }
  }
}

struct Row {
  std::set<std::string> ops;
  Check check;
};

const std::vector<Row>& table() {
  static const std::vector<Row> t{
      {{"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "__and__", "__or__",
        "__xor__", "__lshift__", "__rshift__", "bitwise_left_shift", "bitwise_right_shift"},
       integral_only},
      {{"gcd", "lcm"}, integral_not_bool},
      {{"_softmax", "_log_softmax", "lerp"}, floating_only},
      {{"abs", "relu"}, not_bool},
      {{"rsub"}, no_bool_subtraction},
      {{"smooth_l1_loss", "smooth_l1_loss_backward"}, nonnegative_beta},
      {{"round"}, round_decimals},
      {{"mm", "bmm", "addmm", "mv", "addmv", "dot", "vdot", "baddbmm", "addbmm", "addr",
        "_addmm_activation"},
       same_dtype_operands},
      {{"index_add", "index_copy", "index_select"}, index_dtypes},
      {{"nll_loss_forward", "nll_loss2d_forward"}, target_dtype},
      {{"fill", "masked_fill", "index_fill", "full"}, fill_value_in_range},
      {{"pow"}, integer_power},
      {{"remainder", "fmod", "floor_divide", "div"}, integer_division},
      {{"_fused_adam", "_fused_adamw", "_fused_sgd", "_fused_adagrad"}, fused_step_lists},
  };
  return t;
}

}  // namespace

std::vector<Check> checks_for(const c10::FunctionSchema& schema) {
  std::string name = base_name(schema);
  std::vector<Check> checks;
  // fill_ with a tensor value checks like an elementwise op on CPU.
  bool fill = fill_ops().count(name) && !(name == "fill" && schema.overload_name() == "Tensor");
  if (fill) checks.push_back(overlap_fill);
  else if (disjoint_ops().count(name)) checks.push_back(overlap_disjoint);
  else checks.push_back(overlap_elementwise);
  for (const Row& row : table())
    if (row.ops.count(name)) checks.push_back(row.check);
  return checks;
}

}  // namespace torch_tpu::aten
