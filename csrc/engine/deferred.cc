// The engine's side of deferred lowering (see deferred.h).
#include <chrono>

#include "engine.h"

namespace torch_tpu::engine {

namespace {
// Traces remembered; past this the table starts over (a workload with this
// many distinct step shapes recompiles anyway).
constexpr size_t kMaxTraces = 4096;
}  // namespace

TraceRef Engine::trace_ref(const ValuePtr& v) {
  if (!v->materialized()) {
    if (v->error_) throw pjrt::Error(*v->error_);
    if (v->epoch_ != epoch_ || v->trace_ < 0)
      throw pjrt::Error("internal: a pending value outlived its program");
    return TraceRef{static_cast<uint32_t>(v->trace_), false};
  }
  if (v->device_ != device_)
    throw pjrt::Error("a value on tpu:" + std::to_string(v->device_) +
                      " was used by an op on tpu:" + std::to_string(device_));
  auto [it, added] = external_index_.emplace(v->buffer_.get(), externals_.size());
  if (added) {
    externals_.push_back(v->buffer_);
    external_types_.push_back(v->type_);
    external_scalar_.push_back(false);
    external_nodes_.emplace_back();
  }
  return TraceRef{it->second, true};
}

TraceRef Engine::trace_buffer(const pjrt::BufferPtr& buffer, hlo::ElementType dtype) {
  // Every use is its own external: an equal value must not change the trace.
  // (Not in external_index_: only tensor buffers are looked up there.)
  auto index = static_cast<uint32_t>(externals_.size());
  externals_.push_back(buffer);
  external_types_.push_back(hlo::TensorType{dtype, {}});
  external_scalar_.push_back(true);
  external_nodes_.emplace_back();
  return TraceRef{index, true};
}

ValuePtr Engine::placeholder(const hlo::TensorType& type, uint32_t* index) {
  auto v = std::make_shared<DeviceValue>(type, device_);
  v->epoch_ = epoch_;
  // Only placeholders are produced while the recording is a trace, so a
  // placeholder's index in produced_ is its trace index.
  *index = static_cast<uint32_t>(produced_.size());
  v->trace_ = static_cast<int32_t>(*index);
  produced_.push_back(v);
  trace_nodes_.emplace_back();
  return v;
}

void Engine::defer(DeferredPtr op, uint64_t key) {
  deferred_.push_back(std::move(op));
  deferred_tags_.push_back(static_cast<int64_t>(op_sites_.size()));
  trace_key_ = mix(trace_key_, key);
  recording_ = Recording::kTrace;
  metrics_.count(Hot::kOpsDeferred);
}

hlo::Value Engine::trace_input(TraceRef ref) {
  if (ref.external) {
    hlo::Value& node = external_nodes_.at(ref.index);
    if (!node.valid())
      node = external_scalar_[ref.index]
                 ? bind_scalar(externals_[ref.index], external_types_[ref.index], ref.index)
                 : bind(externals_[ref.index], external_types_[ref.index], ref.index);
    return node;
  }
  const hlo::Value& node = trace_nodes_.at(ref.index);
  if (!node.valid()) throw pjrt::Error("internal: a deferred op read a result not lowered yet");
  return node;
}

void Engine::set_trace_result(uint32_t index, hlo::Value node) {
  trace_nodes_.at(index) = node;
  if (ValuePtr v = produced_.at(index).lock()) {
    if (!(node.type() == v->type_))
      throw pjrt::Error("internal: a deferred op lowered to " + node.type().str() +
                        " for a placeholder of " + v->type_.str());
    v->node_ = node;
  }
}

void Engine::to_builder() {
  Recording was = recording_;
  recording_ = Recording::kBuilder;
  if (was != Recording::kTrace) {
    externals_.clear();  // an op that was not deferred after all may have referenced some
    return;
  }
  metrics_.count("deferred_lowerings");
  auto start = std::chrono::steady_clock::now();
  try {
    for (size_t i = 0; i < deferred_.size(); ++i) {
      builder_->set_check_tag(deferred_tags_[i]);
      deferred_[i]->lower(*this);
    }
    // Back to the op being recorded (one that could not be deferred).
    builder_->set_check_tag(static_cast<int64_t>(op_sites_.size()));
  } catch (const std::exception& err) {
    // The recording cannot continue half lowered: it is abandoned as a
    // program that failed to compile (tensors updated in place keep their
    // old values, new ones carry the error).
    abandon_recording(err.what());
    throw;
  }
  deferred_.clear();
  // Every external input is a parameter now (inputs_ holds its buffer): the
  // trace's own references would keep old values from being donated.
  externals_.clear();
  metrics_.time("deferred_lowering", std::chrono::duration<double>(
                                         std::chrono::steady_clock::now() - start).count());
}

bool Engine::flush_trace(Program& p, uint64_t* key, const Priors& priors) {
  uint64_t k = mix(trace_key_, p.outputs.size());
  for (const ValuePtr& v : p.outputs) k = mix(k, static_cast<uint64_t>(v->trace_));
  // Donation as the builder's flush decides it: buffers only the trace holds.
  std::vector<bool> donated(externals_.size(), false);
  for (size_t i = 0; i < externals_.size(); ++i) {
    donated[i] = !external_scalar_[i] && donatable(externals_[i], priors);
    k = mix(k, donated[i] ? 3 : 2);
  }
  k = mix(k, static_cast<uint64_t>(device_));
  *key = k;

  auto it = traces_.find(k);
  pjrt::ExecutablePtr exe;
  if (it != traces_.end() && it->second.num_outputs == p.outputs.size())
    exe = cache_->lookup(it->second.program);
  if (!exe) {
    metrics_.count("trace_misses");
    to_builder();
    return false;
  }
  metrics_.count("trace_hits");
  p.exe = exe;
  p.checks = it->second.checks;
  p.inputs.reserve(it->second.params.size());
  for (uint32_t e : it->second.params) p.inputs.push_back(externals_.at(e));
  std::vector<OpSite> sites = std::move(op_sites_);
  Mode mode = mode_;
  reset_recording();
  launch(p, sites, mode, priors.of);
  return true;
}

void Engine::remember_trace(uint64_t key, const hlo::Fingerprint& program, size_t num_outputs,
                            CheckListPtr checks) {
  TraceEntry entry{program, {}, num_outputs, std::move(checks)};
  entry.params.reserve(inputs_.size());
  for (int64_t e : input_externals_) {
    if (e < 0) return;  // bound outside the trace: not replayable
    entry.params.push_back(static_cast<uint32_t>(e));
  }
  if (traces_.size() >= kMaxTraces) traces_.clear();
  traces_[key] = std::move(entry);
}

}  // namespace torch_tpu::engine
