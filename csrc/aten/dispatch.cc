#include "dispatch.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <mutex>
#include <set>
#include <unordered_map>

#include "../lowering/registry.h"
#include "device.h"
#include "generator.h"
#include "kernel.h"
#include "meta.h"
#include "precision.h"
#include "site.h"
#include "storage.h"
#include "tensor_io.h"
#include "unboxed.h"

namespace torch_tpu::aten {

namespace {

using lowering::Arg;
using lowering::Args;

bool g_log_ops = false;

// A scale of exactly 1 (True for bools): x + 1*y is x + y in every dtype.
bool is_unit(const c10::IValue& v) {
  return (v.isInt() && v.toInt() == 1) || (v.isDouble() && v.toDouble() == 1.0) ||
         (v.isBool() && v.toBool());
}

std::mutex g_plans_mu;
std::unordered_map<c10::OperatorName, Plan>& plans() {
  static std::unordered_map<c10::OperatorName, Plan> p;
  return p;
}
std::set<std::string>& served() {
  static std::set<std::string> s;
  return s;
}

std::string full_name(const c10::OperatorName& n) {
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

bool writes(const c10::Argument& a) {
  return a.alias_info() != nullptr && a.alias_info()->isWrite();
}

// native_batch_norm updates its running stats (arguments 3 and 4) in place
// although its schema does not mark them as written.
bool writes_undeclared(const c10::FunctionSchema& s, size_t i) {
  return s.name() == "aten::native_batch_norm" && s.overload_name().empty() && (i == 3 || i == 4);
}

// ---- arguments --------------------------------------------------------------

struct CallState {
  int device = -1;
  bool wide = false;  // a float64 tensor takes part: Python floats enter as f64
};

void note_tensor(const at::Tensor& t, CallState& s, const c10::OperatorName& op) {
  if (!t.defined()) return;
  if (t.scalar_type() == at::kDouble) s.wide = true;
  if (t.device().type() == c10::DeviceType::PrivateUse1) {
    int d = t.device().index();
    TORCH_CHECK(s.device < 0 || s.device == d,
                "Expected all tensors to be on the same device, but found at least two "
                "devices, tpu:", s.device, " and tpu:", d, "! (in ", full_name(op), ")");
    s.device = d;
  } else {
    TORCH_CHECK(t.dim() == 0 && t.device().is_cpu(),
                "Expected all tensors to be on the same device, but found at least two "
                "devices, tpu and ", t.device(), "! (in ", full_name(op),
                "; move it with .to('tpu'))");
  }
}

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
c10::Scalar cpu_scalar(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kDouble: return *t.const_data_ptr<double>();
    case at::kFloat: return *t.const_data_ptr<float>();
    case at::kLong: return *t.const_data_ptr<int64_t>();
    case at::kInt: return *t.const_data_ptr<int32_t>();
    case at::kBool: return *t.const_data_ptr<bool>();
    default: return t.item();
  }
}

Arg tensor_arg(engine::Engine& e, const at::Tensor& t) {
  Arg a;
  if (!t.defined()) return a;
  a.kind = Arg::kTensor;
  if (t.device().type() == c10::DeviceType::PrivateUse1) {
    a.tensor = read(e, t);
  } else {  // a CPU 0-dim tensor: a host scalar
    a.tensor = host_scalar(e, cpu_scalar(t), to_hlo(t.scalar_type()));
    a.scalar = t.unsafeGetTensorImpl()->is_wrapped_number();
  }
  return a;
}

Arg convert(engine::Engine& e, const c10::Argument& schema_arg, const c10::IValue& v,
            CallState& s) {
  Arg a;
  c10::TypePtr type = schema_arg.real_type();
  if (auto opt = type->cast<c10::OptionalType>()) type = opt->getElementType();
  c10::TypeKind kind = type->kind();
  if (v.isNone()) {
    if (kind == c10::TypeKind::GeneratorType) {
      // The device's default generator.
      auto* g = default_generator(s.device).get<TpuGenerator>();
      a.kind = Arg::kGenerator;
      uint64_t offset = g->get_offset();
      a.tensors = {e.scalar(hlo::ElementType::kU64, g->current_seed()),
                   e.scalar(hlo::ElementType::kU64, offset)};
      a.i = static_cast<int64_t>(offset);
    }
    return a;
  }
  switch (kind) {
    case c10::TypeKind::TensorType:
      return tensor_arg(e, v.toTensor());
    case c10::TypeKind::NumberType:  // Scalar
      a.kind = Arg::kTensor;
      a.scalar = true;
      a.tensor = host_scalar(e, v.toScalar(), scalar_dtype(v.toScalar(), s.wide));
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
      auto gen = v.toGenerator();
      auto* g = gen.get<TpuGenerator>();
      TORCH_CHECK(g != nullptr, "expected a tpu generator");
      a.kind = Arg::kGenerator;
      a.tensors = {e.scalar(hlo::ElementType::kU64, g->current_seed()),
                   e.scalar(hlo::ElementType::kU64, g->get_offset())};
      a.i = static_cast<int64_t>(g->get_offset());
      return a;
    }
    case c10::TypeKind::ListType: {
      auto elem = type->castRaw<c10::ListType>()->getElementType();
      if (auto o = elem->cast<c10::OptionalType>()) elem = o->getElementType();
      switch (elem->kind()) {
        case c10::TypeKind::TensorType:
          a.kind = Arg::kTensorList;
          for (const c10::IValue& t : v.toListRef()) {
            Arg ta = t.isNone() ? Arg() : tensor_arg(e, t.toTensor());
            a.tensors.push_back(ta.tensor);
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
            a.tensors.push_back(host_scalar(e, x.toScalar(), scalar_dtype(x.toScalar(), s.wide)));
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

// Tensors of the stack values `vals`, flattened (lists expand).
// Undefined tensors (outputs a backward's output_mask leaves out) are skipped.
void flatten(const c10::IValue& v, c10::SmallVectorImpl<at::Tensor>& out) {
  if (v.isTensor()) {
    if (v.toTensor().defined()) out.push_back(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) out.push_back(t);
  }
}

// Random ops that take no generator argument (native_dropout) draw from the
// device's default generator: the lowering gets it as one more argument.
bool implicit_generator(const c10::FunctionSchema& schema) {
  return schema.name() == "aten::native_dropout";
}
const c10::Argument& default_generator_argument() {
  static const c10::Argument arg("generator", c10::OptionalType::create(c10::GeneratorType::get()));
  return arg;
}

// Advances the generator argument (if any) by what the op drew.
void advance_generators(const Plan& plan, c10::ArrayRef<c10::IValue> args, int device,
                        int64_t drawn) {
  auto advance = [&](at::Generator gen) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.get<TpuGenerator>()->advance(static_cast<uint64_t>(std::max<int64_t>(drawn, 1)));
  };
  if (plan.implicit_generator) advance(default_generator(device));
  for (size_t i : plan.generators)
    advance(args[i].isNone() ? default_generator(device) : args[i].toGenerator());
}

bool is_generator(const c10::Argument& a) {
  c10::TypePtr t = a.real_type();
  if (auto o = t->cast<c10::OptionalType>()) t = o->getElementType();
  return t->kind() == c10::TypeKind::GeneratorType;
}

// The plan of `schema`'s operator. Plans never move once registered, so each
// thread remembers them by schema address without taking the lock again.
const Plan& plan_of(const c10::FunctionSchema& schema) {
  thread_local std::unordered_map<const c10::FunctionSchema*, const Plan*> known;
  auto it = known.find(&schema);
  if (it != known.end()) return *it->second;
  std::lock_guard<std::mutex> lock(g_plans_mu);
  const Plan* plan = &plans().at(schema.operator_name());
  known.emplace(&schema, plan);
  return *plan;
}

// Adds the time of its scope to the kernel timer when that is on.
class KernelTimer {
 public:
  explicit KernelTimer(engine::Metrics& m) : metrics_(m.kernel_timing() ? &m : nullptr) {
    if (metrics_) start_ = std::chrono::steady_clock::now();
  }
  ~KernelTimer() {
    if (metrics_)
      metrics_->time_kernel(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::steady_clock::now() - start_).count());
  }

 private:
  engine::Metrics* metrics_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

Ran run_lowered(const c10::OperatorHandle& op, const Plan& plan, c10::ArrayRef<c10::IValue> args) {
  auto& e = engine::Engine::get();
  KernelTimer timer(e.metrics());
  const c10::FunctionSchema& schema = op.schema();
  if (g_log_ops) std::cerr << "[torch_tpu] " << full_name(schema.operator_name()) << "\n";

  CallState state;
  for (const c10::IValue& v : args) scan(v, state, schema.operator_name());
  if (state.device < 0) state.device = current_device();
  // Factories (no tensor inputs: arange, linspace, …) take Python numbers in
  // double, as CPU's range kernels do.
  state.wide |= std::none_of(plan.inputs.begin(), plan.inputs.end(),
                             [&](size_t i) { return args[i].isTensor() || args[i].isTensorList(); });
  check_device(state.device);

  // 1. PyTorch's own shape, dtype and argument checks (cached).
  Ran ran;
  ran.meta = infer_meta(op, args, plan.mutated);
  const OpMeta& meta = *ran.meta;
  c10::SmallVector<at::Tensor, 2> mutated;  // the real tensors written, in order
  for (size_t i : plan.mutated) flatten(args[i], mutated);
  // Writing through a view where several elements share one memory location
  // (expand) is an error on CPU; meta functions do not check it.
  for (const at::Tensor& t : mutated) at::assert_no_internal_overlap(t);
  TORCH_CHECK(mutated.size() == meta.mutated.size(), "tpu: internal error: ",
              full_name(schema.operator_name()), " mutates ", mutated.size(),
              " tensors but its meta function reported ", meta.mutated.size());

  // 2. Record the op. The Python site is read before the engine lock: it
  // takes the GIL, which a Python thread may hold while waiting for the lock.
  const std::string* site = python_site();
  c10::DeviceGuard device_guard(c10::Device(c10::DeviceType::PrivateUse1, state.device));
  int64_t drawn = 0;
  {
    auto guard = e.lock();
    e.begin(state.device);
    Args largs;
    largs.reserve(plan.inputs.size());
    for (size_t i : plan.inputs) {
      if (is_unit(args[i]) && std::find(plan.unit_scales.begin(), plan.unit_scales.end(),
                                        static_cast<int>(i)) != plan.unit_scales.end())
        largs.emplace_back();
      else
        largs.push_back(convert(e, schema.arguments()[i], args[i], state));
    }
    if (plan.implicit_generator)
      largs.push_back(convert(e, default_generator_argument(), c10::IValue(), state));
    lowering::Context ctx{e.builder(), meta.types, lowering::LazyPrecision(&current_precision),
                          plan.lowering};
    hlo::Values outs;
    try {
      outs = (*plan.fn)(ctx, largs);
    } catch (const lowering::Unsupported& u) {
      TORCH_CHECK_NOT_IMPLEMENTED(false, "tpu: ", full_name(schema.operator_name()),
                                  " is not supported for these arguments: ", u.what(),
                                  ". Set TORCH_TPU_CPU_FALLBACK=1 to run unsupported ops on the CPU.");
    } catch (const lowering::InvalidArgument& bad) {
      TORCH_CHECK(false, bad.what());
    } catch (const hlo::TypeError& t) {
      TORCH_CHECK(false, "tpu: internal error lowering ", full_name(schema.operator_name()), ": ",
                  t.what());
    }
    TORCH_CHECK(outs.size() == ctx.outputs.size(), "tpu: internal error: lowering of ",
                plan.lowering, " returned ", outs.size(), " values, expected ",
                ctx.outputs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      TORCH_CHECK(outs[i].shape() == ctx.outputs[i].shape, "tpu: internal error: lowering of ",
                  plan.lowering, " produced ", outs[i].type().str(), " for output ", i,
                  ", expected ", ctx.outputs[i].str());
      drawn += ctx.outputs[i].numel();
    }
    for (size_t i = 0; i < meta.fresh.size(); ++i) {
      const TensorMeta& m = meta.fresh[i];
      at::Tensor t = at::detail::empty_strided_generic(
          m.sizes, m.strides, allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
          m.dtype);
      write(e, t, outs[i]);
      ran.results.push_back(std::move(t));
    }
    for (size_t i = 0; i < mutated.size(); ++i) {
      const at::Tensor& t = mutated[i];
      const TensorMeta& m = meta.mutated[i];
      if (t.sizes() != c10::IntArrayRef(m.sizes)) resize(t, m.sizes, m.strides);
      write(e, t, outs[meta.fresh.size() + i]);
    }
    e.end(plan.lowering.c_str(), site);
  }
  if (plan.implicit_generator || !plan.generators.empty())
    advance_generators(plan, args, state.device, drawn);
  return ran;
}

namespace {

// The kernel of every lowered operator called through the boxed path (and of
// all whose C++ signature unboxed.h does not instantiate).
void lowered_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t n = schema.arguments().size();
  // The arguments stay on the stack (copying them would touch every tensor's
  // Python refcount); room for the returns is made first so `args` stays valid.
  stack->reserve(stack->size() + schema.returns().size());
  const size_t base = stack->size() - n;
  c10::ArrayRef<c10::IValue> args(stack->data() + base, n);
  Ran ran = run_lowered(op, plan_of(schema), args);

  // Returns: fresh tensors in order, aliasing returns are their arguments.
  // They are pushed above the arguments, which are then erased.
  size_t next_fresh = 0, next_return = 0;
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    const c10::Argument& ret = schema.returns()[r];
    if (ret.alias_info() == nullptr) {
      int64_t count = ran.meta->return_lists.at(next_return++);
      if (count >= 0) {
        c10::List<at::Tensor> list;
        for (int64_t k = 0; k < count; ++k) list.push_back(ran.results[next_fresh++]);
        stack->emplace_back(list);
      } else if (count == -2) {
        stack->emplace_back(at::Tensor());  // left out by an output_mask
      } else {
        stack->emplace_back(ran.results[next_fresh++]);
      }
      continue;
    }
    for (size_t i = 0; i < n; ++i) {
      const auto* ai = schema.arguments()[i].alias_info();
      if (ai != nullptr && ai->beforeSets() == ret.alias_info()->beforeSets()) {
        stack->push_back(args[i]);
        break;
      }
    }
  }
  stack->erase(stack->begin() + base, stack->begin() + base + n);
}

// ---- registration -----------------------------------------------------------

bool same_arguments(const c10::FunctionSchema& functional, const c10::FunctionSchema& variant,
                    const std::vector<size_t>& inputs) {
  const auto& fa = functional.arguments();
  if (fa.size() != inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& va = variant.arguments()[inputs[i]];
    if (fa[i].name() != va.name() || fa[i].type()->str() != va.type()->str()) return false;
  }
  return true;
}

}  // namespace

void set_log_ops(bool on) { g_log_ops = on; }

std::vector<std::string> native_ops() {
  std::lock_guard<std::mutex> lock(g_plans_mu);
  return {served().begin(), served().end()};
}

void register_lowered_ops(torch::Library& m) {
  auto& registry = lowering::Registry::get();
  auto& dispatcher = c10::Dispatcher::singleton();
  // Functional lowerings by base name, for deriving variants.
  std::unordered_map<std::string, std::vector<std::string>> by_base;
  for (const std::string& name : registry.ops()) {
    auto dot = name.find('.');
    by_base[name.substr(0, dot)].push_back(name);
  }

  auto add_plan = [&](const c10::OperatorHandle& h, const std::string& lowering_name) {
    const auto& schema = h.schema();
    Plan p;
    p.fn = registry.find(lowering_name);
    p.lowering = lowering_name;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      if (schema.arguments()[i].is_out()) {
        p.mutated.push_back(i);
        continue;
      }
      if (writes(schema.arguments()[i]) || writes_undeclared(schema, i)) p.mutated.push_back(i);
      if (is_generator(schema.arguments()[i])) p.generators.push_back(i);
      const std::string& arg = schema.arguments()[i].name();
      if ((arg == "alpha" || arg == "beta") && registry.omits_unit_scales(lowering_name))
        p.unit_scales.push_back(static_cast<int>(i));
      p.inputs.push_back(i);
    }
    p.implicit_generator = implicit_generator(schema);
    std::string name = full_name(schema.operator_name());
    {
      std::lock_guard<std::mutex> lock(g_plans_mu);
      plans()[schema.operator_name()] = std::move(p);
      served().insert(name);
    }
    if (!register_unboxed(m, name.c_str(), h, plan_of(schema)))
      m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&lowered_kernel>());
  };

  for (const c10::OperatorName& opname : dispatcher.getAllOpNames()) {
    if (opname.name.rfind("aten::", 0) != 0) continue;
    auto handle = dispatcher.findSchema(opname);
    if (!handle) continue;
    // Composite-implicit ops decompose above the backend; a backend kernel
    // would hide them from autograd.
    if (handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) continue;
    std::string name = full_name(opname);
    const auto& schema = handle->schema();
    if (registry.find(name)) {
      add_plan(*handle, name);
      continue;
    }
    // Derived variants: in-place (`op_`) and out= forms of a lowered op.
    std::vector<size_t> inputs;
    bool has_out = false;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      if (schema.arguments()[i].is_out()) has_out = true;
      else inputs.push_back(i);
    }
    std::string base = opname.name;
    bool inplace = !has_out && base.size() > 1 && base.back() == '_' &&
                   base.compare(base.size() - 2, 2, "__") != 0 && !schema.arguments().empty() &&
                   writes(schema.arguments()[0]);
    if (inplace) base.pop_back();
    if (!inplace && !has_out) continue;
    if (inplace && base == "aten::copy") continue;  // copy_ crosses devices: core_ops serves it
    auto it = by_base.find(base);
    if (it == by_base.end()) continue;
    for (const std::string& candidate : it->second) {
      auto dot = candidate.find('.');
      std::string overload = dot == std::string::npos ? "" : candidate.substr(dot + 1);
      auto fh = dispatcher.findSchema({base, overload});
      if (!fh) continue;
      if (inplace && overload != opname.overload_name) continue;
      if (!same_arguments(fh->schema(), schema, inputs)) continue;
      add_plan(*handle, candidate);
      break;
    }
  }
}

}  // namespace torch_tpu::aten
