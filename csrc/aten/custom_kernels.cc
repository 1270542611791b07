#include "custom_kernels.h"

#include <torch/library.h>

#include <map>
#include <memory>
#include <mutex>

#include "../hlo/kernel.h"
#include "arguments.h"
#include "dispatch.h"

namespace torch_tpu::aten {

namespace {

// One operator's kernels, one per parameter signature (a kernel's types are
// static: jax.export makes one per input shape).
struct Served {
  std::vector<hlo::KernelPtr> kernels;
  std::unique_ptr<lowering::LoweringFn> fn;  // Plan::fn points here
  std::unique_ptr<torch::Library> library;   // its PrivateUse1 registration
};

std::mutex g_mu;
std::map<std::string, Served>& served_ops() {
  static auto* m = new std::map<std::string, Served>();  // outlives every call
  return *m;
}

std::string signature(const std::vector<hlo::TensorType>& types) {
  std::string s = "(";
  for (size_t i = 0; i < types.size(); ++i) s += (i ? ", " : "") + types[i].str();
  return s + ")";
}

// The lowering of operator `name`: the kernel whose parameters are the
// call's tensor types, called on them; its results must be the types the
// operator's fake function gave.
lowering::LoweringFn make_lowering(const std::string& name) {
  return [name](lowering::Context& c, const lowering::Args& args) {
    hlo::Values ins;
    std::vector<hlo::TensorType> types;
    for (const lowering::Arg& a : args) {
      ins.push_back(a.tensor);
      types.push_back(a.tensor.type());
    }
    hlo::KernelPtr kernel;
    std::string known;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      for (const hlo::KernelPtr& k : served_ops().at(name).kernels) {
        if (k->parameters == types) kernel = k;
        known += "\n  " + signature(k->parameters);
      }
    }
    if (!kernel)
      throw lowering::InvalidArgument("tpu: no StableHLO kernel of " + name + " takes " +
                                      signature(types) + "; its kernels take:" + known +
                                      "\nRegister one for these types "
                                      "(torch_tpu.library.register_stablehlo_kernel).");
    hlo::Values outs = c.b.call(kernel, ins);
    // A kernel unlike its fake function is the kernel's mistake, not the
    // arguments': a plain error (InvalidArgument would run the CPU kernel
    // to raise its error instead).
    TORCH_CHECK(outs.size() == c.outputs.size(), "tpu: the StableHLO kernel of ", name, " returns ",
                outs.size(), " tensors; the operator's fake function returns ", c.outputs.size());
    for (size_t i = 0; i < outs.size(); ++i)
      TORCH_CHECK(outs[i].type() == c.outputs[i], "tpu: the StableHLO kernel of ", name, " returns ",
                  outs[i].type().str(), " as result ", i, "; the operator's fake function says ",
                  c.outputs[i].str());
    return outs;
  };
}

}  // namespace

namespace {

// The operator `name` after the checks a StableHLO kernel needs: tensors in,
// new tensors out.
c10::OperatorHandle kernel_operator(const std::string& name) {
  auto dot = name.find('.');
  std::string base = name.substr(0, dot);
  std::string overload = dot == std::string::npos ? "" : name.substr(dot + 1);
  TORCH_CHECK_VALUE(base.find("::") != std::string::npos,
                    "tpu: a kernel is registered for an operator named 'namespace::name', not '",
                    name, "'");
  auto handle = c10::Dispatcher::singleton().findSchema({base, overload});
  TORCH_CHECK_VALUE(handle, "tpu: no operator ", name, " is defined; define it first ",
                    "(torch.library.custom_op or torch.library.Library(...).define)");
  const c10::FunctionSchema& schema = handle->schema();
  for (const c10::Argument& a : schema.arguments()) {
    TORCH_CHECK_VALUE(a.type()->kind() == c10::TypeKind::TensorType,
                      "tpu: a StableHLO kernel takes tensors only; ", name, "'s argument '",
                      a.name(), "' is ", a.type()->str());
    TORCH_CHECK_VALUE(a.alias_info() == nullptr || !a.alias_info()->isWrite(),
                      "tpu: a StableHLO kernel returns new tensors; ", name, " writes its argument '",
                      a.name(), "'");
  }
  for (const c10::Argument& r : schema.returns())
    TORCH_CHECK_VALUE(r.type()->kind() == c10::TypeKind::TensorType && r.alias_info() == nullptr,
                      "tpu: a StableHLO kernel returns new tensors; ", name, " returns ",
                      r.type()->str(), r.alias_info() ? " aliasing an argument" : "");
  return *handle;
}

// Registers the operator's tpu kernel once (caller holds g_mu).
void serve_locked(Served& s, const c10::OperatorHandle& handle, const std::string& qualified) {
  if (s.fn) return;  // served already: the lowering finds new signatures
  TORCH_CHECK_VALUE(!handle.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1),
                    "tpu: ", qualified, " already has a tpu (PrivateUse1) kernel");
  s.fn = std::make_unique<lowering::LoweringFn>(make_lowering(qualified));
  std::string ns = qualified.substr(0, qualified.find("::"));
  s.library = std::make_unique<torch::Library>(torch::Library::IMPL, ns,
                                               c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  serve(*s.library, handle, s.fn.get(), "stablehlo:" + qualified);
}

}  // namespace

void serve_stablehlo_operator(const std::string& name) {
  c10::OperatorHandle handle = kernel_operator(name);
  std::string qualified = full_name(handle.schema().operator_name());
  std::lock_guard<std::mutex> lock(g_mu);
  serve_locked(served_ops()[qualified], handle, qualified);
}

void register_stablehlo_kernel(const std::string& name, const std::string& text) {
  c10::OperatorHandle handle = kernel_operator(name);
  const c10::FunctionSchema& schema = handle.schema();
  hlo::KernelPtr kernel;
  try {
    kernel = hlo::Kernel::parse(text);
  } catch (const hlo::TypeError& e) {
    TORCH_CHECK_VALUE(false, "tpu: the StableHLO kernel for ", name, ": ", e.what());
  }
  TORCH_CHECK_VALUE(kernel->parameters.size() == schema.arguments().size(), "tpu: the StableHLO kernel for ",
                    name, " takes ", kernel->parameters.size(), " tensors; the operator takes ",
                    schema.arguments().size());
  TORCH_CHECK_VALUE(kernel->results.size() == schema.returns().size(), "tpu: the StableHLO kernel for ",
                    name, " returns ", kernel->results.size(), " tensors; the operator returns ",
                    schema.returns().size());

  std::string qualified = full_name(schema.operator_name());
  std::lock_guard<std::mutex> lock(g_mu);
  Served& s = served_ops()[qualified];
  for (const hlo::KernelPtr& k : s.kernels)
    TORCH_CHECK_VALUE(k->parameters != kernel->parameters, "tpu: ", qualified,
                      " already has a StableHLO kernel taking ", signature(k->parameters),
                      "; a kernel, once used, may be in compiled programs, so it is not replaced: ",
                      "define a new operator for a new kernel");
  serve_locked(s, handle, qualified);
  s.kernels.push_back(kernel);
}

std::vector<std::pair<std::string, std::string>> stablehlo_kernels() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, s] : served_ops())
    for (const hlo::KernelPtr& k : s.kernels) out.emplace_back(name, k->entry);
  return out;
}

}  // namespace torch_tpu::aten
