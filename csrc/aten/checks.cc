// CPU's argument checks that PyTorch's meta functions leave to the CPU
// kernels: memory overlap between what an op writes and what it reads,
// dtypes a kernel is not built for, Python numbers out of a dtype's range,
// integer powers and divisions a CPU kernel refuses, shapes and bounds
// (index_add's source, bucketize's boundaries, histogramdd's bins,
// as_strided_scatter's view). A rule only detects the
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
                                       "take", "put", "index_reduce", "kthvalue"};
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

// The argument named `name` (an undefined IValue when absent).
const c10::IValue& named(const c10::FunctionSchema& s, Args args, const char* name) {
  static const c10::IValue none;
  for (size_t i = 0; i < args.size() && i < s.arguments().size(); ++i)
    if (s.arguments()[i].name() == name) return args[i];
  return none;
}

// index_add: source shaped as self but along `dim` (PyTorch's meta function
// leaves this to the kernel).
void index_source_shape(const c10::FunctionSchema& s, Args args, const OpMeta&, Mutated) {
  const c10::IValue& self = named(s, args, "self");
  const c10::IValue& source = named(s, args, "source");
  const c10::IValue& dim = named(s, args, "dim");
  if (!self.isTensor() || !source.isTensor() || !dim.isInt()) return;
  std::vector<int64_t> a = self.toTensor().sizes().vec(), b = source.toTensor().sizes().vec();
  int64_t d = at::maybe_wrap_dim(dim.toInt(), std::max<int64_t>(self.toTensor().dim(), 1));
  if (!a.empty()) a.erase(a.begin() + d);
  if (!b.empty() && d < static_cast<int64_t>(b.size())) b.erase(b.begin() + d);
  TORCH_CHECK(a == b, "source tensor shape must match self tensor shape, excluding the specified "
              "dimension. Got self.shape = ", self.toTensor().sizes(), " source.shape = ",
              source.toTensor().sizes());
}

void target_dtype(const c10::FunctionSchema& s, Args args, const OpMeta&, Mutated) {
  c10::ScalarType t = arg_dtype(args, 1);
  TORCH_CHECK(t == at::kLong || t == at::kByte, "expected target dtype to be Long or Byte, but got ", t);
}

// masked_scatter takes a bool mask only (masked_fill still takes uint8).
void bool_mask(const c10::FunctionSchema& s, Args args, const OpMeta&, Mutated) {
  const c10::IValue& mask = named(s, args, "mask");
  if (mask.isTensor())
    TORCH_CHECK(mask.toTensor().scalar_type() == at::kBool, "masked_scatter_ only supports boolean ",
                "masks, but got mask with dtype ", mask.toTensor().scalar_type());
}

// complex(real, imag): both parts of one dtype (no promotion), and an out=
// tensor of the matching complex dtype.
void complex_parts(const c10::FunctionSchema&, Args args, const OpMeta&, Mutated mutated) {
  c10::ScalarType re = arg_dtype(args, 0), im = arg_dtype(args, 1);
  TORCH_CHECK(re == im, "Expected object of scalar type ", re, " but got scalar type ", im,
              " for second argument");
  for (const at::Tensor& out : mutated)
    TORCH_CHECK(!c10::isFloatingType(re) || out.scalar_type() == c10::toComplexType(re),
                "Expected object of scalar type ", c10::toComplexType(re), " but got scalar type ",
                out.scalar_type(), " for argument 'out'");
}

// aminmax's out= tensors have the input's dtype exactly.
void outputs_keep_dtype(const c10::FunctionSchema&, Args args, const OpMeta&, Mutated mutated) {
  c10::ScalarType t = arg_dtype(args, 0);
  for (const at::Tensor& out : mutated)
    TORCH_CHECK(out.scalar_type() == t, "Expected out tensor to have dtype ", t, ", but got ",
                out.scalar_type(), " instead");
}

// multinomial: floating-point probabilities, a Long out= tensor (their values
// are checked on the device, lowering/random.cc).
void multinomial_dtypes(const c10::FunctionSchema&, Args args, const OpMeta&, Mutated mutated) {
  c10::ScalarType t = arg_dtype(args, 0);
  TORCH_CHECK(c10::isFloatingType(t), "multinomial only supports floating-point dtypes for input, got: ", t);
  for (const at::Tensor& out : mutated)
    TORCH_CHECK(out.scalar_type() == at::kLong, "multinomial expects Long tensor out, got: ",
                out.scalar_type());
}

// bucketize(Tensor, boundaries): a 1-D boundaries tensor.
void vector_boundaries(const c10::FunctionSchema& s, Args args, const OpMeta&, Mutated) {
  const c10::IValue& b = named(s, args, "boundaries");
  if (b.isTensor())
    TORCH_CHECK(b.toTensor().dim() == 1, "boundaries tensor must be 1 dimension, but got dim(",
                b.toTensor().dim(), ")");
}

// histogramdd: one bin count (or edge tensor) per innermost input dimension.
void histogramdd_bins(const c10::FunctionSchema& s, Args args, const OpMeta&, Mutated) {
  const c10::IValue& bins = named(s, args, "bins");
  int64_t n = bins.isIntList() ? static_cast<int64_t>(bins.toIntList().size())
              : bins.isTensorList() ? static_cast<int64_t>(bins.toTensorList().size()) : -1;
  const at::Tensor& self = args.at(0).toTensor();
  if (n >= 0 && self.dim() > 0)
    TORCH_CHECK(n == self.size(-1), "histogramdd: The size of bins must be equal to the innermost ",
                "dimension of the input.");
}

// as_strided_scatter writes a view of self's clone: the view must lie in it.
void strided_view_in_bounds(const c10::FunctionSchema& s, Args args, const OpMeta&, Mutated) {
  const at::Tensor& self = args.at(0).toTensor();
  const c10::IValue& size = named(s, args, "size");
  const c10::IValue& stride = named(s, args, "stride");
  const c10::IValue& offset = named(s, args, "storage_offset");
  if (!size.isIntList() || !stride.isIntList()) return;
  std::vector<int64_t> sz = size.toIntVector(), st = stride.toIntVector();
  int64_t end = offset.isInt() ? offset.toInt() : 0;
  bool empty = false;
  for (size_t i = 0; i < sz.size() && i < st.size(); ++i) {
    empty = empty || sz[i] == 0;
    end += (sz[i] - 1) * st[i];
  }
  TORCH_CHECK(empty || end < self.numel(), "as_strided_scatter: a view of sizes ", c10::IntArrayRef(sz),
              ", strides ", c10::IntArrayRef(st), " and storage offset ", offset.isInt() ? offset.toInt() : 0,
              " is out of bounds for a storage of ", self.numel(), " elements");
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
      {{"index_add"}, index_source_shape},
      {{"masked_scatter"}, bool_mask},
      {{"complex"}, complex_parts},
      {{"aminmax"}, outputs_keep_dtype},
      {{"multinomial"}, multinomial_dtypes},
      {{"bucketize"}, vector_boundaries},
      {{"_histogramdd_bin_edges", "_histogramdd_from_bin_cts"}, histogramdd_bins},
      {{"as_strided_scatter"}, strided_view_in_bounds},
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
