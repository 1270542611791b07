#include "meta.h"

#include <ATen/ops/empty_strided.h>

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "../engine/engine.h"
#include "tensor_io.h"

namespace torch_tpu::aten {

namespace {

void put(std::string& key, const void* data, size_t n) {
  key.append(static_cast<const char*>(data), n);
}
void put_i64(std::string& key, int64_t v) { put(key, &v, sizeof(v)); }

void put_tensor(std::string& key, const at::Tensor& t) {
  if (!t.defined()) {
    key.push_back('u');
    return;
  }
  key.push_back('T');
  key.push_back(static_cast<char>(t.device().type()));
  key.push_back(static_cast<char>(t.scalar_type()));
  key.push_back(t.unsafeGetTensorImpl()->is_wrapped_number() ? 'w' : '-');
  put_i64(key, t.dim());
  put(key, t.sizes().data(), t.dim() * sizeof(int64_t));
  put(key, t.strides().data(), t.dim() * sizeof(int64_t));
}

// Scalar, Scalar? and Scalar[]: a value never changes a shape, so with
// tensor inputs only its kind enters the key. Scalar[] are the per-step
// values of foreach optimizers (AdamW's step sizes): keyed by value, each
// step missed the cache and ran the Python meta of every _foreach op again.
bool is_number(const c10::TypePtr& t) {
  switch (t->kind()) {
    case c10::TypeKind::NumberType: return true;
    case c10::TypeKind::OptionalType: return is_number(t->castRaw<c10::OptionalType>()->getElementType());
    case c10::TypeKind::ListType: return is_number(t->castRaw<c10::ListType>()->getElementType());
    default: return false;
  }
}

// Scalars (NumberType) count by kind only: their values never change shapes.
void put_value(std::string& key, const c10::IValue& v, bool number_kind_only) {
  if (v.isNone()) {
    key.push_back('N');
  } else if (v.isTensor()) {
    put_tensor(key, v.toTensor());
  } else if (v.isTensorList()) {
    key.push_back('L');
    for (const at::Tensor& t : v.toTensorList()) put_tensor(key, t);
    key.push_back(';');
  } else if (v.isList()) {
    key.push_back('[');
    for (const c10::IValue& e : v.toListRef()) put_value(key, e, number_kind_only);
    key.push_back(']');
  } else if (v.isInt()) {
    key.push_back('i');
    if (!number_kind_only) put_i64(key, v.toInt());
  } else if (v.isDouble()) {
    key.push_back('d');
    if (!number_kind_only) {
      double d = v.toDouble();
      put(key, &d, sizeof(d));
    }
  } else if (v.isBool()) {
    key.push_back(v.toBool() ? 't' : 'f');
  } else if (v.isComplexDouble()) {
    key.push_back('c');
  } else if (v.isString()) {
    key.push_back('s');
    key += v.toStringRef();
    key.push_back('\0');
  } else if (v.isDevice()) {
    key.push_back('D');
    key.push_back(static_cast<char>(v.toDevice().type()));
    key.push_back(static_cast<char>(v.toDevice().index()));
  } else if (v.isGenerator()) {
    key.push_back('G');
  } else {
    key.push_back('?');
    key += v.tagKind();
  }
}

at::Tensor to_meta(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return t;
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

c10::IValue meta_value(const c10::IValue& v) {
  if (v.isTensor()) return to_meta(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(to_meta(t));
    return out;
  }
  if (v.isList() && v.toList().elementType()->kind() == c10::TypeKind::OptionalType) {
    c10::List<std::optional<at::Tensor>> out;
    for (const c10::IValue& e : v.toListRef())
      out.push_back(e.isTensor() ? std::optional<at::Tensor>(to_meta(e.toTensor())) : std::nullopt);
    return out;
  }
  if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1)
    return c10::Device(c10::kMeta);
  return v;
}

// A 0-dim CPU tensor as the `value` of masked_fill or index_fill: CPU
// scalars are accepted there for accelerators (PyTorch's own decompositions
// reject a CPU value next to a meta tensor), so the meta step sees it on meta.
bool cpu_scalar_value(const c10::Argument& a, const c10::IValue& v) {
  return a.name() == "value" && v.isTensor() && v.toTensor().defined() &&
         v.toTensor().device().is_cpu() && v.toTensor().dim() == 0;
}

// The meta step's arguments: tpu tensors (and CPU scalar values) on meta.
std::vector<c10::IValue> meta_stack(const c10::FunctionSchema& schema,
                                    c10::ArrayRef<c10::IValue> args) {
  std::vector<c10::IValue> stack;
  stack.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (cpu_scalar_value(schema.arguments()[i], args[i]))
      stack.push_back(at::empty_strided({}, {}, args[i].toTensor().options().device(c10::kMeta)));
    else
      stack.push_back(meta_value(args[i]));
  }
  return stack;
}

TensorMeta describe(const at::Tensor& t) {
  return {t.sizes().vec(), t.strides().vec(), t.scalar_type()};
}

// Defined tensors of `v`, flattened (as dispatch.cc's flatten()).
void describe_all(const c10::IValue& v, std::vector<TensorMeta>& out) {
  if (v.isTensor() && v.toTensor().defined()) out.push_back(describe(v.toTensor()));
  else if (v.isTensorList())
    for (const at::Tensor& t : v.toTensorList())
      if (t.defined()) out.push_back(describe(t));
}

// In-place ops write the functional result into self: its dtype must cast
// (TensorIterator's rule; meta functions of in-place variants skip it).
std::unordered_map<std::string, c10::KernelFunction>& private_metas() {
  static auto* table = new std::unordered_map<std::string, c10::KernelFunction>();
  return *table;
}

std::string full_name(const c10::OperatorHandle& op) {
  const c10::OperatorName& n = op.operator_name();
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

bool has_private_meta(const c10::OperatorHandle& op) {
  return private_metas().count(full_name(op)) != 0;
}

void check_result_type(const c10::OperatorHandle& functional, c10::ArrayRef<c10::IValue> args,
                       const OpMeta& m) {
  std::vector<c10::IValue> stack = meta_stack(functional.schema(), args);
  call_meta(functional, &stack);
  std::vector<TensorMeta> results;
  for (const c10::IValue& v : stack) describe_all(v, results);
  for (size_t i = 0; i < results.size() && i < m.mutated.size(); ++i)
    TORCH_CHECK(c10::canCast(results[i].dtype, m.mutated[i].dtype), "result type ",
                results[i].dtype, " can't be cast to the desired output type ", m.mutated[i].dtype);
}

// The functional's results for an out= call: its meta function on the
// call's meta inputs without the out= tensors.
std::vector<TensorMeta> functional_results(const c10::OperatorHandle& out_op,
                                           const c10::OperatorHandle& functional,
                                           const std::vector<c10::IValue>& meta_args) {
  const auto& arguments = out_op.schema().arguments();
  std::vector<c10::IValue> stack;
  for (size_t i = 0; i < meta_args.size(); ++i)
    if (!arguments[i].is_out()) stack.push_back(meta_args[i]);
  call_meta(functional, &stack);
  std::vector<TensorMeta> results;
  for (const c10::IValue& v : stack) describe_all(v, results);
  return results;
}

// An out= variant PyTorch gives no meta kernel (geqrf.a, linalg_lstsq.out):
// its functional's results, resized into the out= tensors (an out= tensor
// of the right size keeps its strides, a resized one takes the functional
// result's layout), each in its out= tensor's dtype, which the result must
// cast to. Arguments written in place as well (batch norm's running
// statistics) keep their metadata.
void out_meta_from_functional(const c10::OperatorHandle& out_op,
                              const c10::OperatorHandle& functional,
                              const std::vector<c10::IValue>& meta_args,
                              const std::vector<size_t>& mutated_args, OpMeta& m) {
  const auto& arguments = out_op.schema().arguments();
  std::vector<TensorMeta> results = functional_results(out_op, functional, meta_args);
  size_t next = 0;
  for (size_t i : mutated_args) {
    if (!arguments[i].is_out()) {
      describe_all(meta_args[i], m.mutated);
      continue;
    }
    std::vector<TensorMeta> outs;
    describe_all(meta_args[i], outs);
    for (const TensorMeta& out : outs) {
      TORCH_CHECK(next < results.size(), full_name(out_op), " writes more out= tensors than ",
                  full_name(functional), " returns");
      const TensorMeta& r = results[next++];
      TORCH_CHECK(c10::canCast(r.dtype, out.dtype), "result type ", r.dtype,
                  " can't be cast to the desired output type ", out.dtype);
      m.mutated.push_back({r.sizes, out.sizes == r.sizes ? out.strides : r.strides, out.dtype});
    }
  }
  TORCH_CHECK(next == results.size(), full_name(out_op), " writes fewer out= tensors than ",
              full_name(functional), " returns");
}

// A pointwise op's out= tensor that the call resizes takes, on CPU,
// TensorIterator's layout, which is the functional result's (a transposed
// input gives a transposed result); PyTorch's Python meta functions resize
// it contiguous. Ops with one out= tensor; `meta_args` are the meta inputs.
void pointwise_out_layout(const c10::OperatorHandle& out_op, const c10::OperatorHandle& functional,
                          c10::ArrayRef<c10::IValue> args, const std::vector<c10::IValue>& meta_args,
                          const std::vector<size_t>& mutated_args, OpMeta& m) {
  const auto& arguments = out_op.schema().arguments();
  if (mutated_args.size() != 1 || m.mutated.size() != 1) return;
  size_t at = mutated_args[0];
  if (!arguments[at].is_out() || !args[at].isTensor() ||
      args[at].toTensor().sizes() == c10::IntArrayRef(m.mutated[0].sizes))
    return;  // not resized: it keeps its strides
  std::vector<TensorMeta> results = functional_results(out_op, functional, meta_args);
  if (results.size() == 1 && results[0].sizes == m.mutated[0].sizes)
    m.mutated[0].strides = results[0].strides;
}

OpMeta run_meta(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                const std::vector<size_t>& mutated_args, const c10::OperatorHandle* functional) {
  const auto& schema = op.schema();
  std::vector<c10::IValue> stack = meta_stack(schema, args);
  std::vector<c10::IValue> meta_args = stack;  // keep the (mutable) meta inputs
  const bool out = is_out_variant(schema);
  OpMeta m;
  try {
    call_meta(op, &stack);
  } catch (const c10::NotImplementedError&) {
    if (!out || functional == nullptr) throw;
    out_meta_from_functional(op, *functional, meta_args, mutated_args, m);
    apply_cpu_rules(schema, args, m);
    for (const TensorMeta& t : m.mutated) m.types.push_back({to_hlo(t.dtype), t.sizes});
    return m;
  }

  for (size_t r = 0; r < schema.returns().size(); ++r) {
    if (schema.returns()[r].alias_info() != nullptr) continue;
    if (stack[r].isTensorList()) {
      m.return_lists.push_back(static_cast<int64_t>(stack[r].toTensorList().size()));
    } else if (stack[r].isInt()) {
      m.return_lists.push_back(-3);
      m.ints.push_back(stack[r].toInt());
      continue;
    } else if (!stack[r].isTensor() || !stack[r].toTensor().defined()) {
      m.return_lists.push_back(-2);  // left out, e.g. by a backward's output_mask
      continue;
    } else {
      m.return_lists.push_back(-1);
    }
    describe_all(stack[r], m.fresh);
  }
  // Written arguments: the meta inputs after the call hold their final sizes
  // (out= results are resized by the meta function).
  for (size_t i : mutated_args) describe_all(meta_args[i], m.mutated);
  if (out && functional != nullptr &&
      (op.hasTag(at::Tag::pointwise) || functional->hasTag(at::Tag::pointwise)))
    pointwise_out_layout(op, *functional, args, meta_args, mutated_args, m);
  apply_cpu_rules(schema, args, m);
  // A functional whose in-place op has a private meta kernel (the fused
  // optimizer steps) would reach that op's missing Meta kernel: skipped.
  // (An out= variant's meta function checks its own result types.)
  if (functional != nullptr && !out && !has_private_meta(op))
    check_result_type(*functional, args, m);
  for (const auto* group : {&m.fresh, &m.mutated})
    for (const TensorMeta& t : *group) m.types.push_back({to_hlo(t.dtype), t.sizes});
  return m;
}

}  // namespace

bool is_out_variant(const c10::FunctionSchema& s) {
  for (const c10::Argument& a : s.arguments())
    if (a.is_out()) return true;
  return false;
}

void add_private_meta(const std::string& op, c10::KernelFunction kernel) {
  private_metas().emplace(op, std::move(kernel));
}

void call_meta(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto& table = private_metas();
  auto it = table.find(full_name(op));
  if (it == table.end()) return op.callBoxed(stack);
  it->second.callBoxed(op, c10::DispatchKeySet(c10::DispatchKey::Meta), stack);
}

std::shared_ptr<const OpMeta> infer_meta(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                                         const std::vector<size_t>& mutated_args,
                                         const c10::OperatorHandle* functional) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const OpMeta>> cache;
  const auto& schema = op.schema();
  thread_local std::string key;  // reused: no allocation per call
  key.clear();
  const void* id = &schema;
  put(key, &id, sizeof(id));
  // Without tensor inputs (arange, linspace, full) numbers decide the shape.
  bool has_input_tensor = false;
  for (size_t i = 0; i < args.size(); ++i)
    if (!schema.arguments()[i].is_out() && (args[i].isTensor() || args[i].isTensorList()))
      has_input_tensor = true;
  for (size_t i = 0; i < args.size(); ++i)
    put_value(key, args[i], has_input_tensor && is_number(schema.arguments()[i].type()));
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  if (engine::Engine::initialized()) engine::Engine::get().metrics().count("meta_cache_misses");
  std::string owned = key;  // the buffer is this thread's: keep a copy across the call
  auto m = std::make_shared<const OpMeta>(run_meta(op, args, mutated_args, functional));  // raises
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() > 100000) cache.clear();
  cache.emplace(std::move(owned), m);
  return m;
}

}  // namespace torch_tpu::aten
