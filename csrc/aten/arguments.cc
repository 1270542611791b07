#include "arguments.h"

#include <c10/core/TensorImpl.h>

#include "device.h"
#include "generator.h"
#include "step_capture.h"
#include "tensor_io.h"

namespace torch_tpu::aten {

using lowering::Arg;

std::string full_name(const c10::OperatorName& n) {
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

namespace {

void note_tensor(const at::Tensor& t, CallState& s, const c10::OperatorName& op) {
  if (!t.defined()) return;
  if (t.scalar_type() == at::kDouble) s.wide = true;
  if (t.device().type() == c10::DeviceType::PrivateUse1) {
    int d = t.device().index();
    TORCH_CHECK(s.device < 0 || s.device == d,
                "Expected all tensors to be on the same device, but found at least two "
                "devices, tpu:", s.device, " and tpu:", d, "! (in ", full_name(op), ")");
    s.device = d;
    s.math_bits |= t.is_conj() || t.is_neg();
  } else {
    TORCH_CHECK(t.dim() == 0 && t.device().is_cpu(),
                "Expected all tensors to be on the same device, but found at least two "
                "devices, tpu and ", t.device(), "! (in ", full_name(op),
                "; move it with .to('tpu'))");
  }
}

}  // namespace

void scan(const c10::IValue& v, CallState& s, const c10::OperatorName& op) {
  if (v.isTensor()) {
    note_tensor(v.toTensor(), s, op);
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) note_tensor(t, s, op);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef())
      if (e.isTensor()) note_tensor(e.toTensor(), s, op);
  } else if (v.isDevice() && s.device < 0 && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
    s.device = v.toDevice().has_index() ? v.toDevice().index() : current_device();
  }
}

// The value of a CPU 0-dim tensor. Python numbers arrive as such tensors
// (f64, i64, bool); reading them directly skips a dispatch through item().
namespace {

c10::Scalar cpu_scalar(const at::Tensor& t) {
  if (t.is_conj() || t.is_neg()) return t.item();  // its value, not its storage
  switch (t.scalar_type()) {
    case at::kDouble: return *t.const_data_ptr<double>();
    case at::kFloat: return *t.const_data_ptr<float>();
    case at::kLong: return *t.const_data_ptr<int64_t>();
    case at::kInt: return *t.const_data_ptr<int32_t>();
    case at::kBool: return *t.const_data_ptr<bool>();
    default: return t.item();
  }
}

Arg tensor_arg(ArgReader& r, const at::Tensor& t) {
  Arg a;
  if (!t.defined()) return a;
  a.kind = Arg::kTensor;
  if (t.device().type() == c10::DeviceType::PrivateUse1) {
    a.tensor = r.tensor(t);
  } else {  // a CPU 0-dim tensor: a host scalar
    hlo::ElementType dtype = to_hlo(t.scalar_type());
    a.tensor = r.scalar(dtype, scalar_bits(cpu_scalar(t), dtype));
    a.scalar = t.unsafeGetTensorImpl()->is_wrapped_number();
  }
  return a;
}

// A Python number in the dtype it enters the program in.
hlo::Value number(ArgReader& r, const c10::Scalar& s, bool wide) {
  hlo::ElementType dtype = scalar_dtype(s, wide);
  return r.scalar(dtype, scalar_bits(s, dtype));
}

// A generator's (seed, offset) as the op's 0-d u64 inputs; inside a step
// capture, the step's generator inputs (step_capture.h).
Arg generator_arg(ArgReader& r, const at::Generator& gen) {
  auto* g = gen.get<TpuGenerator>();
  TORCH_CHECK(g != nullptr, "expected a tpu generator");
  Arg a;
  a.kind = Arg::kGenerator;
  uint64_t seed = g->current_seed(), offset = g->get_offset();
  hlo::Value seed_value, offset_value;
  if (captured_generator_inputs(gen, seed, offset, &seed_value, &offset_value)) {
    a.tensors = {seed_value, offset_value};
  } else {
    a.tensors = {r.scalar(hlo::ElementType::kU64, seed), r.scalar(hlo::ElementType::kU64, offset)};
  }
  a.i = static_cast<int64_t>(offset);
  return a;
}

}  // namespace

Arg float_input(ArgReader& r, double v, const CallState& s) {
  Arg a;
  a.kind = Arg::kTensor;
  a.scalar = true;
  a.tensor = number(r, c10::Scalar(v), s.wide);
  return a;
}

Arg convert(ArgReader& r, const c10::Argument& schema_arg, const c10::IValue& v, CallState& s) {
  Arg a;
  c10::TypePtr type = schema_arg.real_type();
  if (auto opt = type->cast<c10::OptionalType>()) type = opt->getElementType();
  c10::TypeKind kind = type->kind();
  if (v.isNone()) {
    if (kind == c10::TypeKind::GeneratorType) {
      // The device's default generator.
      return generator_arg(r, default_generator(s.device));
    }
    return a;
  }
  switch (kind) {
    case c10::TypeKind::TensorType:
      return tensor_arg(r, v.toTensor());
    case c10::TypeKind::NumberType:  // Scalar
      a.kind = Arg::kTensor;
      a.scalar = true;
      a.tensor = number(r, v.toScalar(), s.wide);
      return a;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      a.kind = Arg::kInt;
      a.i = v.toInt();
      return a;
    case c10::TypeKind::FloatType:
      a.kind = Arg::kDouble;
      a.d = v.toDouble();
      return a;
    case c10::TypeKind::BoolType:
      a.kind = Arg::kBool;
      a.b = v.toBool();
      return a;
    case c10::TypeKind::StringType:
      a.kind = Arg::kString;
      a.s = v.toStringRef();
      return a;
    case c10::TypeKind::ScalarTypeType:
      a.kind = Arg::kDtype;
      a.dtype = to_hlo(static_cast<c10::ScalarType>(v.toInt()));
      return a;
    case c10::TypeKind::GeneratorType: {
      return generator_arg(r, v.toGenerator());
    }
    case c10::TypeKind::ListType: {
      auto elem = type->castRaw<c10::ListType>()->getElementType();
      if (auto o = elem->cast<c10::OptionalType>()) elem = o->getElementType();
      switch (elem->kind()) {
        case c10::TypeKind::TensorType:
          a.kind = Arg::kTensorList;
          for (const c10::IValue& t : v.toListRef()) {
            if (t.isNone() || !t.toTensor().defined()) {
              r.none();
              a.tensors.emplace_back();
            } else {
              a.tensors.push_back(tensor_arg(r, t.toTensor()).tensor);
            }
          }
          return a;
        case c10::TypeKind::IntType:
        case c10::TypeKind::SymIntType:
          a.kind = Arg::kIntList;
          for (const c10::IValue& x : v.toListRef()) a.ints.push_back(x.toInt());
          return a;
        case c10::TypeKind::FloatType:
          a.kind = Arg::kDoubleList;
          for (const c10::IValue& x : v.toListRef()) a.doubles.push_back(x.toDouble());
          return a;
        case c10::TypeKind::BoolType:
          a.kind = Arg::kBoolList;
          for (const c10::IValue& x : v.toListRef()) a.bools.push_back(x.toBool());
          return a;
        case c10::TypeKind::NumberType:
          a.kind = Arg::kTensorList;
          for (const c10::IValue& x : v.toListRef())
            a.tensors.push_back(number(r, x.toScalar(), s.wide));
          return a;
        default:
          break;
      }
      break;
    }
    default:
      break;  // Layout, Device, MemoryFormat: no effect on values
  }
  return a;
}

}  // namespace torch_tpu::aten
