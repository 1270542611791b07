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
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "../lowering/registry.h"
#include "arguments.h"
#include "defer.h"
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

// The eager reader: tensors and numbers are bound into the builder now.
class Bind final : public ArgReader {
 public:
  explicit Bind(engine::Engine& e) : e_(e) {}
  hlo::Value tensor(const at::Tensor& t) override { return read(e_, t); }
  hlo::Value scalar(hlo::ElementType dtype, const engine::ScalarBits& bits) override {
    return e_.scalar(dtype, bits);
  }

 private:
  engine::Engine& e_;
};

std::mutex g_plans_mu;
std::unordered_map<c10::OperatorName, Plan>& plans() {
  static std::unordered_map<c10::OperatorName, Plan> p;
  return p;
}
std::map<std::string, std::string>& served() {  // operator -> its registry entry
  static std::map<std::string, std::string> s;
  return s;
}

bool writes(const c10::Argument& a) {
  return a.alias_info() != nullptr && a.alias_info()->isWrite();
}

// Whether a non-out argument of `s` is written.
bool writes_inputs(const c10::FunctionSchema& s) {
  return std::any_of(s.arguments().begin(), s.arguments().end(),
                     [](const c10::Argument& a) { return !a.is_out() && writes(a); });
}

// native_batch_norm (and its out= form) updates its running stats
// (arguments 3 and 4) in place although its schema does not mark them as
// written.
bool writes_undeclared(const c10::FunctionSchema& s, size_t i) {
  return s.name() == "aten::native_batch_norm" &&
         (s.overload_name().empty() || s.overload_name() == "out") && (i == 3 || i == 4);
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

// Lowers the call into the builder and writes its results.
void lower_now(engine::Engine& e, const c10::FunctionSchema& schema, const Plan& plan,
               c10::ArrayRef<c10::IValue> args, CallState& state, const OpMeta& meta,
               c10::ArrayRef<at::Tensor> mutated, c10::SmallVectorImpl<at::Tensor>& results) {
  Bind bind(e);
  Args largs;
  largs.reserve(plan.inputs.size());
  for (size_t i : plan.inputs) largs.push_back(input_arg(plan, bind, schema, args, i, state));
  if (plan.implicit_generator)
    largs.push_back(convert(bind, default_generator_argument(), c10::IValue(), state));
  hlo::Values outs = lower_call(e, plan, meta, lowering::LazyPrecision(&current_precision), largs,
                                &schema.operator_name());
  for (size_t i = 0; i < meta.fresh.size(); ++i) {
    const TensorMeta& m = meta.fresh[i];
    at::Tensor t = at::detail::empty_strided_generic(
        m.sizes, m.strides, allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
        m.dtype);
    write(e, t, outs[i]);
    results.push_back(std::move(t));
  }
  for (size_t i = 0; i < mutated.size(); ++i) {
    const at::Tensor& t = mutated[i];
    write(e, t, outs[meta.fresh.size() + i]);
  }
}

}  // namespace

bool omits(const Plan& plan, c10::ArrayRef<c10::IValue> args, size_t i) {
  return is_unit(args[i]) && std::find(plan.unit_scales.begin(), plan.unit_scales.end(),
                                       static_cast<int>(i)) != plan.unit_scales.end();
}

lowering::Arg input_arg(const Plan& plan, ArgReader& r, const c10::FunctionSchema& schema,
                        c10::ArrayRef<c10::IValue> args, size_t i, CallState& state) {
  if (omits(plan, args, i)) return {};
  if (std::find(plan.float_inputs.begin(), plan.float_inputs.end(), i) != plan.float_inputs.end())
    return float_input(r, args[i].toDouble(), state);
  if (std::find(plan.static_exponents.begin(), plan.static_exponents.end(), i) !=
          plan.static_exponents.end() &&
      (args[i].isDouble() || args[i].isInt())) {
    double e = args[i].isDouble() ? args[i].toDouble() : static_cast<double>(args[i].toInt());
    if (lowering::exact_exponent(e)) {
      lowering::Arg a;
      a.kind = lowering::Arg::kDouble;
      a.d = e;
      return a;
    }
  }
  return convert(r, schema.arguments()[i], args[i], state);
}

hlo::Values lower_call(engine::Engine& e, const Plan& plan, const OpMeta& meta,
                       lowering::LazyPrecision precision, const lowering::Args& args,
                       const c10::OperatorName* op) {
  const char* what = op ? "" : "deferred ";
  lowering::Context ctx{e.builder(), meta.types, precision, plan.lowering, e.target()};
  hlo::Values outs;
  try {
    outs = (*plan.fn)(ctx, args);
  } catch (const lowering::Unsupported& u) {
    TORCH_CHECK(op, "tpu: internal error lowering deferred ", plan.lowering, ": ", u.what());
    TORCH_CHECK_NOT_IMPLEMENTED(false, "tpu: ", full_name(*op),
                                " is not supported for these arguments: ", u.what(),
                                ". Set TORCH_TPU_CPU_FALLBACK=1 to run unsupported ops on the CPU.");
  } catch (const hlo::TypeError& t) {
    TORCH_CHECK(false, "tpu: internal error lowering ", what, plan.lowering, ": ", t.what());
  } catch (const std::exception& err) {
    if (op) throw;  // an invalid argument: the caller raises it as the CPU would
    TORCH_CHECK(false, "tpu: internal error lowering deferred ", plan.lowering, ": ", err.what());
  }
  if (ctx.precision.used()) plan.reads_precision = true;
  TORCH_CHECK(outs.size() == ctx.outputs.size(), "tpu: internal error: lowering of ", what,
              plan.lowering, " returned ", outs.size(), " values, expected ", ctx.outputs.size());
  for (size_t i = 0; i < outs.size(); ++i)
    TORCH_CHECK(outs[i].shape() == ctx.outputs[i].shape, "tpu: internal error: lowering of ", what,
                plan.lowering, " produced ", outs[i].type().str(), " for output ", i,
                ", expected ", ctx.outputs[i].str());
  return outs;
}

namespace {

// A lazy conjugate or negative view (Tensor.conj() of a complex tensor, and
// the imaginary part of one: is_conj()/is_neg()) reaches a lowered kernel
// only through the ops that PyTorch's conjugate and negative fallbacks let
// through because CPU's and CUDA's kernels apply the bit themselves (mm,
// addmm, bmm, baddbmm, dot, vdot, linalg_vector_norm, ...). Ours read
// storage: the inputs are resolved into plain tensors first. A written
// tensor with a bit would need its result conjugated on the way in: refused.
Ran run_resolving_math_bits(const c10::OperatorHandle& op, const Plan& plan,
                            c10::ArrayRef<c10::IValue> args) {
  auto plain = [&](const at::Tensor& t, size_t i) {
    if (!t.defined() || (!t.is_conj() && !t.is_neg())) return t;
    TORCH_CHECK_NOT_IMPLEMENTED(
        std::find(plan.mutated.begin(), plan.mutated.end(), i) == plan.mutated.end(),
        full_name(op.schema().operator_name()), ": writing into a conjugate or negative view "
        "(Tensor.conj(), .imag of a conjugate) is not supported on tpu; write into "
        "t.resolve_conj().resolve_neg() instead");
    return t.resolve_conj().resolve_neg();
  };
  std::vector<c10::IValue> resolved(args.begin(), args.end());
  for (size_t i = 0; i < resolved.size(); ++i) {
    c10::IValue& v = resolved[i];
    if (v.isTensor()) {
      v = plain(v.toTensor(), i);
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : v.toTensorList()) list.push_back(plain(t, i));
      v = list;
    } else if (v.isList() && v.toList().elementType()->kind() == c10::TypeKind::OptionalType) {
      c10::List<std::optional<at::Tensor>> list;
      for (const c10::IValue& e : v.toListRef())
        list.push_back(e.isTensor() ? std::optional<at::Tensor>(plain(e.toTensor(), i))
                                    : std::nullopt);
      v = list;
    }
  }
  return run_lowered(op, plan, resolved);
}

}  // namespace

Ran run_lowered(const c10::OperatorHandle& op, const Plan& plan, c10::ArrayRef<c10::IValue> args) {
  auto& e = engine::Engine::get();
  KernelTimer timer(e.metrics());
  const c10::FunctionSchema& schema = op.schema();

  CallState state;
  for (const c10::IValue& v : args) scan(v, state, schema.operator_name());
  if (state.math_bits) return run_resolving_math_bits(op, plan, args);
  if (state.device < 0) state.device = current_device();
  // Factories (no tensor inputs: arange, linspace, …) take Python numbers in
  // double, as CPU's range kernels do.
  state.wide |= std::none_of(plan.inputs.begin(), plan.inputs.end(),
                             [&](size_t i) { return args[i].isTensor() || args[i].isTensorList(); });
  check_device(state.device);

  // 1. PyTorch's own shape, dtype and argument checks (cached), then the
  // CPU kernel's that meta functions leave out; a mistake raises CPU's error.
  Ran ran;
  c10::SmallVector<at::Tensor, 2> mutated;  // the real tensors written, in order
  for (size_t i : plan.mutated) flatten(args[i], mutated);
  try {
    ran.meta = infer_meta(op, args, plan.mutated, plan.functional ? &*plan.functional : nullptr);
  } catch (...) {
    raise_as_cpu(op, args);
    throw;
  }
  const OpMeta& meta = *ran.meta;
  auto run_checks = [&] {
    try {
      for (Check check : plan.checks) check(schema, args, meta, mutated);
    } catch (...) {
      raise_as_cpu(op, args);
      throw;
    }
  };
  run_checks();
  TORCH_CHECK(mutated.size() == meta.mutated.size(), "tpu: internal error: ",
              full_name(schema.operator_name()), " mutates ", mutated.size(),
              " tensors but its meta function reported ", meta.mutated.size());
  // out= tensors take their new sizes before the op is recorded: growing a
  // storage that holds data is a program of its own. (At the same sizes
  // they keep their strides unless CPU's kernel restrides them,
  // `restrides_outs`.) CPU's kernels check overlap before resizing
  // (index_select) or after (gather's structured kernel): a resized out=
  // tensor is checked again.
  bool resized = false;
  for (size_t i = 0; i < mutated.size(); ++i)
    if (mutated[i].sizes() != c10::IntArrayRef(meta.mutated[i].sizes) ||
        (meta.restrides_outs &&
         mutated[i].strides() != c10::IntArrayRef(meta.mutated[i].strides))) {
      resize(mutated[i], meta.mutated[i].sizes, meta.mutated[i].strides);
      resized = true;
    }
  if (resized) run_checks();

  // 2. Record the op. The Python site is read before the engine lock: it
  // takes the GIL, which a Python thread may hold while waiting for the lock.
  const std::string* site = python_site();
  c10::DeviceGuard device_guard(c10::Device(c10::DeviceType::PrivateUse1, state.device));
  int64_t drawn = 0;
  for (const hlo::TensorType& t : meta.types) drawn += t.numel();
  try {
    auto guard = e.lock();
    e.begin(state.device);
    uint64_t signature = 0;
    bool deferred = e.deferral_enabled() &&
        try_defer(e, schema, plan, args, state, ran.meta, mutated, ran.results, &signature);
    if (g_log_ops)
      std::cerr << "[torch_tpu] " << full_name(schema.operator_name())
                << (deferred ? " (deferred)" : "") << "\n";
    // With asynchronous compiles in Fused Eager, an op never lowered before
    // is a program of its own (Strict's, usually cached): the recordings
    // around it stay made of deferred ops, which run op by op while their
    // program compiles (engine/async_eager.cc).
    const bool alone = !deferred && signature != 0 && e.runs_new_ops_alone() &&
                       !was_lowered(signature);
    if (alone && e.has_earlier_program()) {
      e.flush(engine::FlushCause::kNewOp);
      e.begin(state.device);
    }
    if (!deferred) {
      lower_now(e, schema, plan, args, state, meta, mutated, ran.results);
      note_lowered(signature);
    }
    e.end(plan.lowering.c_str(), site);
    if (alone) e.flush(engine::FlushCause::kNewOp);
  } catch (const lowering::InvalidArgument& bad) {
    raise_as_cpu(op, args);  // the engine lock is released: CPU kernels may take the GIL
    TORCH_CHECK(false, bad.what());
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
  size_t next_fresh = 0, next_return = 0, next_int = 0;
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
      } else if (count == -3) {
        stack->emplace_back(ran.meta->ints.at(next_int++));
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

std::map<std::string, std::string> native_lowerings() {
  std::lock_guard<std::mutex> lock(g_plans_mu);
  return served();
}

std::vector<std::string> native_ops() {
  std::vector<std::string> ops;
  for (const auto& [op, lowering] : native_lowerings())
    if (lowering.rfind("stablehlo:", 0) != 0) ops.push_back(op);  // not a user's kernel
  return ops;
}

void serve(torch::Library& m, const c10::OperatorHandle& h, const lowering::LoweringFn* fn,
           const std::string& lowering_name, std::optional<c10::OperatorHandle> functional) {
  auto& registry = lowering::Registry::get();
  const auto& schema = h.schema();
  Plan p;
  p.fn = fn;
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
    if (schema.arguments()[i].real_type()->kind() == c10::TypeKind::FloatType &&
        registry.float_input(lowering_name, arg))
      p.float_inputs.push_back(i);
    if (arg == "exponent" && schema.arguments()[i].real_type()->kind() == c10::TypeKind::NumberType &&
        registry.has_static_exponent(lowering_name))
      p.static_exponents.push_back(i);
    p.inputs.push_back(i);
  }
  p.implicit_generator = implicit_generator(schema);
  p.checks = checks_for(schema);
  // A derived out= variant writes its functional's results, then what the
  // functional writes in place (batch norm's running statistics): the
  // functional lowering's outputs in that order.
  if (functional)
    std::stable_partition(p.mutated.begin(), p.mutated.end(),
                          [&](size_t i) { return schema.arguments()[i].is_out(); });
  p.functional = std::move(functional);
  std::string name = full_name(schema.operator_name());
  {
    std::lock_guard<std::mutex> lock(g_plans_mu);
    plans()[schema.operator_name()] = std::move(p);
    served()[name] = lowering_name;
  }
  if (!register_unboxed(m, name.c_str(), h, plan_of(schema)))
    m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&lowered_kernel>());
}

void register_lowered_ops(torch::Library& m, const std::string& ns) {
  const std::string prefix = ns + "::";
  auto& registry = lowering::Registry::get();
  auto& dispatcher = c10::Dispatcher::singleton();
  // Functional lowerings by base name, for deriving variants.
  std::unordered_map<std::string, std::vector<std::string>> by_base;
  for (const std::string& name : registry.ops()) {
    auto dot = name.find('.');
    by_base[name.substr(0, dot)].push_back(name);
  }

  auto add_plan = [&](const c10::OperatorHandle& h, const std::string& lowering_name,
                      std::optional<c10::OperatorHandle> functional = std::nullopt) {
    serve(m, h, registry.find(lowering_name), lowering_name, std::move(functional));
  };

  for (const c10::OperatorName& opname : dispatcher.getAllOpNames()) {
    if (opname.name.rfind(prefix, 0) != 0) continue;
    auto handle = dispatcher.findSchema(opname);
    if (!handle) continue;
    // Composite-implicit ops decompose above the backend; a backend kernel
    // would hide them from autograd. Those tpu gives an autograd kernel of
    // its own (kernel.h) are lowered like any other.
    std::string name = full_name(opname);
    if (handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
        !has_tpu_autograd(name))
      continue;
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
      // The in-place overload carries the functional's name, except where
      // PyTorch calls it `Tensor` for an unnamed functional (floor_divide_).
      if (inplace && overload != opname.overload_name &&
          !(overload.empty() && opname.overload_name == "Tensor"))
        continue;
      if (!same_arguments(fh->schema(), schema, inputs)) continue;
      // An out= variant that also writes arguments its functional returns
      // as results (the _fused_* optimizer steps) is not derived: the
      // results would land in the wrong tensors.
      if (has_out && writes_inputs(schema) && !writes_inputs(fh->schema())) continue;
      add_plan(*handle, candidate, fh);
      break;
    }
  }
}

}  // namespace torch_tpu::aten
