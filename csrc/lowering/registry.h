// The lowering registry: ATen operator name ("aten::add.Tensor") → a pure
// function that builds StableHLO for it. Knows nothing of torch or PJRT: the
// aten layer converts a call's arguments into `Args` and hands over the output
// types that PyTorch's own shape functions computed.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <source_location>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "../hlo/builder.h"
#include "../hlo/target.h"

namespace torch_tpu::lowering {

using hlo::Builder;
using hlo::ElementType;
using hlo::TensorType;
using hlo::Value;
using hlo::Values;

// One argument of an ATen call, converted.
struct Arg {
  enum Kind { kNone, kTensor, kTensorList, kInt, kDouble, kBool, kIntList,
              kDoubleList, kBoolList, kString, kDtype, kGenerator };
  Kind kind = kNone;
  Value tensor;              // kTensor; kGenerator: ui64[2] (seed, offset)
  Values tensors;            // kTensorList (an absent optional is invalid)
  bool scalar = false;       // kTensor from a Python number: weak for promotion
  int64_t i = 0;             // kInt
  double d = 0;              // kDouble
  bool b = false;            // kBool
  std::vector<int64_t> ints; // kIntList
  std::vector<double> doubles;
  std::vector<bool> bools;
  std::string s;             // kString
  ElementType dtype = ElementType::kF32;  // kDtype

  bool none() const { return kind == kNone; }
};
using Args = std::vector<Arg>;

// Matmul numerics for f32 operands (see ARCHITECTURE.md, Precision).
enum class Precision { kDefault, kHigh, kHighest, kFloat32 };

// A precision read when first used: most ops never ask, and asking torch for
// its matmul setting costs more than recording an elementwise op.
class LazyPrecision {
 public:
  LazyPrecision(Precision p = Precision::kDefault) : value_(p) {}  // NOLINT: implicit
  explicit LazyPrecision(Precision (*read)()) : read_(read) {}
  operator Precision() const {  // NOLINT: implicit
    if (read_) value_ = read_(), read_ = nullptr;
    used_ = true;
    return value_;
  }
  // Whether the lowering asked (a deferred op must then carry the value).
  bool used() const { return used_; }

 private:
  mutable Precision value_ = Precision::kDefault;
  mutable bool used_ = false;
  mutable Precision (*read_)() = nullptr;
};

struct Context {
  Builder& b;
  std::span<const TensorType> outputs;  // the result types PyTorch computed
  LazyPrecision precision;
  const std::string& op;            // "aten::add.Tensor", for messages
  const hlo::Target& target;        // the plugin's profile (engine-owned)

  const TensorType& out(size_t i = 0) const {
    if (i >= outputs.size()) throw std::out_of_range("lowering asked for a result PyTorch does not return");
    return outputs[i];
  }
};

using LoweringFn = std::function<Values(Context&, const Args&)>;

// Thrown by a lowering for an argument combination it does not support; the
// aten layer turns it into NotImplementedError (or the CPU fallback).
struct Unsupported : std::exception {
  explicit Unsupported(std::string m) : message(std::move(m)) {}
  const char* what() const noexcept override { return message.c_str(); }
  std::string message;
};

// Thrown for an argument error PyTorch's meta function does not catch (e.g.
// max() of an empty tensor); raised to Python as CPU raises it.
struct InvalidArgument : std::exception {
  explicit InvalidArgument(std::string m) : message(std::move(m)) {}
  const char* what() const noexcept override { return message.c_str(); }
  std::string message;
};

class Registry {
 public:
  static Registry& get();  // all families registered on first use
  // Registers `op`'s lowering. A name registered before is refused
  // (std::logic_error naming both places): one op, one place.
  void add(const std::string& op, LoweringFn fn,
           std::source_location where = std::source_location::current());
  const LoweringFn* find(const std::string& op) const;
  std::vector<std::string> ops() const;
  // The family of `op`'s lowering: the name of the file that registered it
  // ("elementwise", "linalg_qr"); empty for an unknown op.
  std::string family(const std::string& op) const;
  // Where `op` was registered ("lowering/elementwise.cc:371"); empty if unknown.
  std::string where(const std::string& op) const;
  // `op`'s lowering reads a missing `alpha` (and `beta`) as 1, so the aten
  // layer leaves a scale of 1 out (no scalar input, no multiply) as CPU
  // kernels skip it.
  void omit_unit_scales(const std::string& op) { unit_scales_.insert(op); }
  bool omits_unit_scales(const std::string& op) const { return unit_scales_.count(op) != 0; }
  // `op`'s float arguments `names` arrive as 0-d program inputs (kTensor,
  // weak scalars) instead of static values, so a changing value (a
  // scheduled learning rate) does not compile a new program.
  void float_inputs(const std::string& op, std::set<std::string> names) {
    float_inputs_[op] = std::move(names);
  }
  bool float_input(const std::string& op, const std::string& name) const {
    auto it = float_inputs_.find(op);
    return it != float_inputs_.end() && it->second.count(name) != 0;
  }
  // `op`'s Scalar `exponent` arrives as a static double (kDouble) when it is
  // one of the values CPU kernels compute without pow (exact_exponent), so
  // the lowering can do what they do (x * x for 2) and the call's signature
  // tells those values apart; other values stay program inputs.
  void static_exponent(const std::string& op) { static_exponents_.insert(op); }
  bool has_static_exponent(const std::string& op) const {
    return static_exponents_.count(op) != 0;
  }

 private:
  struct Entry {
    LoweringFn fn;
    std::string file;  // as the compiler named it
    unsigned line = 0;
  };
  std::map<std::string, Entry> fns_;
  std::set<std::string> unit_scales_;
  std::map<std::string, std::set<std::string>> float_inputs_;
  std::set<std::string> static_exponents_;
};

// Whether CPU PyTorch computes x ** `e` (a Scalar exponent) by multiplying:
// 2, 3, -1 and -2 (x*x, x*x*x, 1/x, 1/(x*x)). (It also special-cases 0.5
// and -0.5 with sqrt and rsqrt; those stay pow here.)
inline bool exact_exponent(double e) { return e == 2 || e == 3 || e == -1 || e == -2; }

// One registration function per op family (a file each).
void register_elementwise(Registry& r);
void register_reduction(Registry& r);
void register_linalg(Registry& r);
void register_shape(Registry& r);
void register_indexing(Registry& r);
void register_nn(Registry& r);
void register_random(Registry& r);
void register_factory(Registry& r);
void register_conv(Registry& r);
void register_misc(Registry& r);
void register_special(Registry& r);  // special functions, extra pointwise ops, _foreach_*
void register_optimizer(Registry& r);
void register_bounded_dims(Registry& r);  // tpu::_bounded_dim/_static_dim (bucketed compile)  // fused optimizer steps (_fused_adam(w), _sgd, _adagrad)

}  // namespace torch_tpu::lowering
