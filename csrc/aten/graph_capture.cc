#include "graph_capture.h"

#include <atomic>
#include <map>
#include <mutex>

#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>

#include "../engine/engine.h"
#include "../hlo/kernel.h"
#include "site.h"
#include "storage.h"
#include "tensor_io.h"

namespace torch_tpu::aten {

namespace {

struct InputLayout {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  c10::ScalarType dtype = c10::kFloat;
  size_t nbytes = 0;
  int device = 0;
  int storage_group = 0;  // inputs sharing a storage share a group
};

struct OutputTensor {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  c10::ScalarType dtype = c10::kFloat;
  int storage = 0;  // index into Impl::output_storages
};

// An output storage's contents on replay: a result of the program, or, for
// a value that does not depend on the inputs (a tensor made from host data
// while the graph ran, e.g. a CPU constant moved to tpu), that same device
// buffer, held here so that nothing donates it; or an input's contents on
// entry (a copy the engine did not need to make); or none (never written).
struct OutputStorage {
  size_t program_output = 0;
  int input = -1;  // >= 0: the contents graph input `input` had on entry
  pjrt::BufferPtr constant;
  bool written = true;
  size_t nbytes = 0;
  hlo::ElementType dtype = hlo::ElementType::kF32;
};

struct Capture {
  engine::Mode previous = engine::Mode::kDeferNever;
  std::vector<engine::ValuePtr> start_values;  // input storages' values at begin
  engine::Metrics::FlushCounts flushes{};      // the engine's flush counts at begin
  bool active = false;
};

// "host_read x2, synchronize": the flushes between `before` and `now` (a
// flush between begin and end ran part of the graph before its program — a
// host read of a device value — so that program alone cannot replay it).
std::string flushes_since(const engine::Metrics::FlushCounts& before,
                          const engine::Metrics::FlushCounts& now) {
  std::string out;
  for (size_t i = 0; i < now.size(); ++i) {
    int64_t d = now[i] - before[i];
    if (d <= 0) continue;
    if (!out.empty()) out += ", ";
    out += std::string(engine::name(static_cast<engine::FlushCause>(i))) +
           (d > 1 ? " x" + std::to_string(d) : "");
  }
  return out;
}

std::atomic<uint64_t> g_graphs{0};
// The recording (Engine::recording_epoch) of this thread that holds a
// training graph's call, if any.
thread_local uint64_t t_training_recording = 0;

// A replay recorded into a Fused Eager recording: a call of the graph's
// program, lowered only when the recording's trace is not in the cache, so
// the graphs of a step (forward, backward, optimizer) and the eager ops
// between them become one program.
class GraphCall final : public engine::DeferredOp {
 public:
  hlo::KernelPtr kernel;
  std::vector<engine::TraceRef> args;
  std::vector<uint32_t> results;  // trace indices of the placeholders

  void lower(engine::Engine& e) override {
    hlo::Values in;
    in.reserve(args.size());
    for (engine::TraceRef r : args) in.push_back(e.trace_input(r));
    hlo::Values out = e.builder().call(kernel, in);
    for (size_t j = 0; j < results.size(); ++j) e.set_trace_result(results[j], out[j]);
  }
};

Capture& capture() {
  static Capture c;
  return c;
}

std::vector<InputLayout> layouts(const std::vector<at::Tensor>& inputs) {
  std::vector<InputLayout> out;
  std::vector<const c10::StorageImpl*> storages;
  for (const at::Tensor& t : inputs) {
    InputLayout l;
    l.sizes = t.sizes().vec();
    l.strides = t.strides().vec();
    l.offset = t.storage_offset();
    l.dtype = t.scalar_type();
    l.nbytes = t.storage().nbytes();
    l.device = t.device().index();
    const c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
    auto it = std::find(storages.begin(), storages.end(), s);
    l.storage_group = static_cast<int>(it - storages.begin());
    if (it == storages.end()) storages.push_back(s);
    out.push_back(std::move(l));
  }
  return out;
}

bool same_layout(const InputLayout& a, const InputLayout& b) {
  return a.sizes == b.sizes && a.strides == b.strides && a.offset == b.offset &&
         a.dtype == b.dtype && a.nbytes == b.nbytes && a.device == b.device &&
         a.storage_group == b.storage_group;
}

void check_inputs(const std::vector<at::Tensor>& inputs) {
  for (const at::Tensor& t : inputs)
    TORCH_CHECK(t.defined() && t.device().type() == c10::DeviceType::PrivateUse1,
                "tpu graph inputs must be tpu tensors");
}

}  // namespace

struct CapturedGraph::Impl {
  std::string text;
  // Its name in a Fused Eager recording's ops ("compiled graph N"): a stable
  // address per graph, which loop detection takes as the op's identity.
  std::string op_name;
  // The program as a function a Fused Eager recording calls (parsed at the
  // first such replay; `unfusable` when it cannot be, then it launches).
  hlo::KernelPtr kernel;
  uint64_t call_key = 0;  // its GraphCall's key before the inputs' bindings
  bool unfusable = false;
  Fusion fusion = Fusion::kNever;
  // Set once; by the background worker for a compile in the background.
  mutable std::mutex mu;
  pjrt::ExecutablePtr exe;
  bool pending = false;
  std::string error;  // the background compile's failure
  int device = 0;
  std::vector<InputLayout> inputs;
  // Parameter i: graph input `source[i] >= 0`, or constants[i] when -1.
  std::vector<int> source;
  std::vector<pjrt::BufferPtr> constants;
  std::vector<OutputStorage> output_storages;
  std::vector<OutputTensor> outputs;
  // Inputs whose storage the graph rewrote: (input index, program output).
  std::vector<std::pair<int, size_t>> updates;
};

void CapturedGraph::begin(const std::vector<at::Tensor>& inputs) {
  check_inputs(inputs);
  auto& e = engine::Engine::get();
  auto guard = e.lock();
  Capture& c = capture();
  TORCH_CHECK(!c.active, "tpu: graph captures cannot nest");
  // Storages never written yet get their (zero) contents now, so that every
  // input enters the program as a parameter.
  for (const at::Tensor& t : inputs) {
    StorageState& st = state_of(t);
    if (!st.value && t.numel() > 0) {
      e.begin(st.device);
      read(e, t);
      e.end("capture_init");
    }
  }
  e.flush(engine::FlushCause::kCaptureBegin);
  c.start_values.clear();
  for (const at::Tensor& t : inputs) c.start_values.push_back(state_of(t).value);
  c.flushes = e.metrics().flushes();
  c.previous = e.mode();
  e.set_mode(engine::Mode::kDeferAll);
  e.set_donation(false);  // graph inputs stay alive in the caller's tensors
  c.active = true;
}

void CapturedGraph::abort() {
  auto& e = engine::Engine::get();
  auto guard = e.lock();
  Capture& c = capture();
  if (!c.active) return;
  c.active = false;
  c.start_values.clear();
  e.set_mode(c.previous);  // flushes what was recorded: eager semantics hold
  e.set_donation(true);
}

std::shared_ptr<CapturedGraph> CapturedGraph::end(const std::vector<at::Tensor>& inputs,
                                                  const std::vector<at::Tensor>& outputs,
                                                  std::string* why, bool in_background) {
  auto& e = engine::Engine::get();
  auto guard = e.lock();
  Capture& c = capture();
  TORCH_CHECK(c.active, "tpu: end of a graph capture that was not begun");
  c.active = false;
  std::string flushed = flushes_since(c.flushes, e.metrics().flushes());
  engine::Program p;
  try {
    p = in_background ? e.record_program(engine::FlushCause::kCaptureEnd)
                      : e.flush_program(engine::FlushCause::kCaptureEnd, /*with_text=*/true);
  } catch (...) {
    // A flush that fails (XLA rejecting the program) ends the capture all the
    // same: the engine must not stay in capture mode for the ops after it.
    c.start_values.clear();
    e.set_mode(c.previous);
    e.set_donation(true);
    throw;
  }
  e.set_mode(c.previous);
  e.set_donation(true);
  std::vector<engine::ValuePtr> start = std::move(c.start_values);

  auto impl = std::make_shared<Impl>();
  impl->text = p.text;
  impl->op_name = "compiled graph " + std::to_string(++g_graphs);
  impl->exe = p.exe;
  impl->device = p.device;
  impl->inputs = layouts(inputs);
  auto fail = [&](const std::string& reason) {
    *why = reason;
    return std::shared_ptr<CapturedGraph>();
  };
  if (!flushed.empty())
    return fail("the graph's ops ran in more than one program: it read device values on the "
                "host while it ran (flushes: " + flushed + "), e.g. .item(), .tolist(), nonzero "
                "or a shape that depends on data, so replaying its last program alone would "
                "reuse the values computed before those reads");
  if (!p.exe && p.text.empty()) return fail("the graph recorded no device work");

  for (const pjrt::BufferPtr& b : p.inputs) {
    int src = -1;
    for (size_t k = 0; k < start.size(); ++k)
      if (start[k] && start[k]->buffer() == b) src = static_cast<int>(k);
    impl->source.push_back(src);
    impl->constants.push_back(src < 0 ? b : nullptr);
  }
  std::vector<int> storage_of_output(p.outputs.size(), -1);
  std::vector<const c10::StorageImpl*> constant_storages;
  std::vector<int> constant_storage_index;
  std::vector<bool> used(p.outputs.size(), false);
  auto find_output = [&](const engine::ValuePtr& v) -> int {
    for (size_t j = 0; j < p.outputs.size(); ++j)
      if (p.outputs[j] == v) return static_cast<int>(j);
    return -1;
  };
  for (size_t k = 0; k < inputs.size(); ++k) {
    const engine::ValuePtr& now = state_of(inputs[k]).value;
    if (now == start[k]) continue;
    int j = find_output(now);
    if (j < 0) return fail("an input was rewritten outside the graph");
    impl->updates.emplace_back(static_cast<int>(k), static_cast<size_t>(j));
    used[j] = true;
  }
  for (const at::Tensor& t : outputs) {
    TORCH_CHECK(t.defined() && t.device().type() == c10::DeviceType::PrivateUse1,
                "tpu graph outputs must be tpu tensors");
    for (const at::Tensor& in : inputs)
      if (in.storage().is_alias_of(t.storage()))
        return fail("an output aliases an input");
    StorageState& st = state_of(t);
    int j = find_output(st.value);
    int storage = -1;
    if (j >= 0) {
      used[j] = true;
      if (storage_of_output[j] < 0) {
        storage_of_output[j] = static_cast<int>(impl->output_storages.size());
        impl->output_storages.push_back(
            {static_cast<size_t>(j), -1, nullptr, true, st.nbytes, st.dtype});
      }
      storage = storage_of_output[j];
    } else if (st.value == nullptr || st.value->materialized()) {
      // Not computed by the program and, with no flush during the capture,
      // not from the inputs: host data or a tensor never written. Outputs
      // sharing such a storage share it on replay too.
      const c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
      auto it = std::find(constant_storages.begin(), constant_storages.end(), s);
      if (it != constant_storages.end()) {
        storage = constant_storage_index[it - constant_storages.begin()];
      } else {
        storage = static_cast<int>(impl->output_storages.size());
        constant_storages.push_back(s);
        constant_storage_index.push_back(storage);
        int input = -1;
        for (size_t k = 0; k < start.size() && st.value; ++k)
          if (start[k] && start[k]->buffer() == st.value->buffer()) input = static_cast<int>(k);
        impl->output_storages.push_back({0, input,
                                         st.value && input < 0 ? st.value->buffer() : nullptr,
                                         st.value != nullptr, st.nbytes, st.dtype});
      }
    } else {
      return fail("an output is pending in another thread's recording");
    }
    impl->outputs.push_back({t.sizes().vec(), t.strides().vec(), t.storage_offset(),
                             t.scalar_type(), storage});
  }
  for (size_t j = 0; j < used.size(); ++j)
    if (!used[j]) return fail("the graph left a value alive outside its outputs");
  if (!impl->exe) {
    impl->pending = true;
    std::weak_ptr<Impl> weak = impl;
    e.cache().compile_in_background(std::move(p.text), [weak](pjrt::ExecutablePtr exe, const std::string& error) {
      std::shared_ptr<Impl> graph = weak.lock();
      if (!graph) return;
      std::lock_guard<std::mutex> lock(graph->mu);
      graph->exe = std::move(exe);
      graph->error = graph->exe ? "" : error;
      graph->pending = false;
    });
  }
  return std::make_shared<CapturedGraph>(impl);
}

bool CapturedGraph::matches(const std::vector<at::Tensor>& inputs) const {
  if (inputs.size() != impl_->inputs.size()) return false;
  for (const at::Tensor& t : inputs)
    if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return false;
  std::vector<InputLayout> now = layouts(inputs);
  for (size_t i = 0; i < now.size(); ++i)
    if (!same_layout(now[i], impl_->inputs[i])) return false;
  return true;
}

std::optional<std::vector<at::Tensor>> CapturedGraph::try_run(
    const std::vector<at::Tensor>& inputs) const {
  pjrt::ExecutablePtr exe;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    exe = impl_->exe;
  }
  if (!exe || !matches(inputs)) return std::nullopt;
  auto& e = engine::Engine::get();
  for (size_t i = 0; i < impl_->source.size(); ++i) {
    int k = impl_->source[i];
    TORCH_CHECK(k < 0 || state_of(inputs[k]).value != nullptr, "tpu: graph input ", k,
                " has no contents");
  }
  std::vector<engine::ValuePtr> values;
  const bool recorded = record_call(inputs, &values);
  if (!recorded) {
    std::vector<pjrt::BufferPtr> args;
    args.reserve(impl_->source.size());
    for (size_t i = 0; i < impl_->source.size(); ++i) {
      int k = impl_->source[i];
      args.push_back(k < 0 ? impl_->constants[i]
                           : e.buffer(state_of(inputs[k]).value, engine::FlushCause::kGraphInput));
    }
    values = e.run(*exe, args, impl_->device);
  }

  c10::DeviceGuard device_guard(c10::Device(c10::DeviceType::PrivateUse1, impl_->device));
  std::vector<c10::Storage> storages;
  for (const OutputStorage& s : impl_->output_storages) {
    c10::Storage storage(c10::Storage::use_byte_size_t(), s.nbytes, allocator(),
                         /*resizable=*/true);
    StorageState& st = state_of(storage);
    if (s.input >= 0)  // its own value on the same buffer: two holders, never donated
      st.value = e.adopt(e.buffer(state_of(inputs[s.input]).value, engine::FlushCause::kGraphInput), impl_->device);
    else if (s.constant)
      st.value = e.adopt(s.constant, impl_->device);
    else if (s.written)
      st.value = values[s.program_output];
    st.dtype = s.dtype;
    storages.push_back(std::move(storage));
  }
  std::vector<at::Tensor> outs;
  for (const OutputTensor& o : impl_->outputs) {
    at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(storages[o.storage]), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
        caffe2::TypeMeta::fromScalarType(o.dtype));
    t.unsafeGetTensorImpl()->set_sizes_and_strides(o.sizes, o.strides, o.offset);
    outs.push_back(std::move(t));
  }
  for (const auto& [k, j] : impl_->updates) {
    engine::ValuePtr& held = state_of(inputs[k]).value;
    if (recorded) e.supersede(values[j], held);  // if its program fails, the old value stays
    held = values[j];
  }
  return outs;
}

bool CapturedGraph::record_call(const std::vector<at::Tensor>& inputs,
                                std::vector<engine::ValuePtr>* values) const {
  auto& e = engine::Engine::get();
  if (e.mode() != engine::Mode::kDeferAndFuse) return false;
  Fusion fusion;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    fusion = impl_->fusion;
    if (impl_->unfusable || fusion == Fusion::kNever) return false;
    if (!impl_->kernel) {
      try {
        impl_->kernel = hlo::Kernel::parse(impl_->text);
        impl_->call_key = engine::mix(0x6772617068ull, std::hash<std::string>{}(impl_->kernel->entry));
      } catch (const hlo::TypeError&) {
        impl_->unfusable = true;  // launched on its own, as in the other modes
        return false;
      }
    }
  }
  const hlo::KernelPtr& kernel = impl_->kernel;
  const std::string* site = python_site();  // before the engine lock: it takes the GIL
  auto guard = e.lock();
  if (e.mode() != engine::Mode::kDeferAndFuse) return false;
  e.begin(impl_->device);
  if (fusion == Fusion::kTrain)
    t_training_recording = e.recording_epoch();
  else if (t_training_recording != e.recording_epoch())
    return false;  // kFollow without a training graph in the recording: launched alone
  std::vector<engine::ValuePtr> ins;
  ins.reserve(impl_->source.size());
  for (size_t i = 0; i < impl_->source.size(); ++i) {
    int k = impl_->source[i];
    ins.push_back(k < 0 ? nullptr : state_of(inputs[k]).value);
  }
  if (e.deferring()) {
    auto call = std::make_unique<GraphCall>();
    call->kernel = kernel;
    uint64_t key = impl_->call_key;
    for (size_t i = 0; i < ins.size(); ++i) {
      engine::TraceRef r = ins[i] ? e.trace_ref(ins[i])
                                  : e.trace_constant(impl_->constants[i], kernel->parameters[i]);
      call->args.push_back(r);
      key = engine::mix(key, r.key());
    }
    for (const hlo::TensorType& t : kernel->results) {
      uint32_t index = 0;
      values->push_back(e.placeholder(t, &index));
      call->results.push_back(index);
    }
    e.defer(engine::DeferredPtr(call.release()), key);
  } else {  // the recording is in its builder already: lower the call there
    hlo::Values in;
    for (size_t i = 0; i < ins.size(); ++i)
      in.push_back(e.use(ins[i] ? ins[i] : e.adopt(impl_->constants[i], impl_->device)));
    for (const hlo::Value& v : e.builder().call(kernel, in)) values->push_back(e.produce(v));
  }
  e.end(impl_->op_name.c_str(), site);
  return true;
}

const std::string& CapturedGraph::text() const { return impl_->text; }

void CapturedGraph::set_fusion(Fusion fusion) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->fusion = fusion;
}

std::string CapturedGraph::status() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->exe ? "ready" : impl_->pending ? "pending" : "failed";
}

std::string CapturedGraph::error() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->error;
}

}  // namespace torch_tpu::aten
