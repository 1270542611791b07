// The engine's side of deferred lowering (see deferred.h).
#include <chrono>
#include <iterator>

#include "engine.h"

namespace torch_tpu::engine {

namespace {
// Traces remembered; past this the table starts over (a workload with this
// many distinct step shapes recompiles anyway).
constexpr size_t kMaxTraces = 4096;
}  // namespace

TraceRef Engine::trace_ref(const ValuePtr& v) {
  settle(*v);
  if (!v->materialized()) {
    if (v->trace_ < 0) throw pjrt::Error("internal: a pending value outlived its program");
    return TraceRef{static_cast<uint32_t>(v->trace_), false};
  }
  if (v->device_ != r_->device)
    throw pjrt::Error("a value on tpu:" + std::to_string(v->device_) +
                      " was used by an op on tpu:" + std::to_string(r_->device));
  auto [it, added] = r_->external_index.emplace(v->buffer_.get(), r_->externals.size());
  if (added) {
    r_->externals.push_back(v->buffer_);
    r_->external_types.push_back(v->type_);
    r_->external_scalar.push_back(false);
    r_->external_nodes.emplace_back();
  }
  return TraceRef{it->second, true};
}

TraceRef Engine::trace_constant(const pjrt::BufferPtr& buffer, const hlo::TensorType& type) {
  // Every use is its own external: an equal value must not change the trace.
  // (Not in r_->external_index: only tensor buffers are looked up there.)
  auto index = static_cast<uint32_t>(r_->externals.size());
  r_->externals.push_back(buffer);
  r_->external_types.push_back(type);
  r_->external_scalar.push_back(true);
  r_->external_nodes.emplace_back();
  return TraceRef{index, true};
}

ValuePtr Engine::placeholder(const hlo::TensorType& type, uint32_t* index) {
  auto v = std::make_shared<DeviceValue>(type, r_->device);
  v->epoch_ = r_->epoch;
  // Only placeholders are produced while the recording is a trace, so a
  // placeholder's index in r_->produced is its trace index.
  *index = static_cast<uint32_t>(r_->produced.size());
  v->trace_ = static_cast<int32_t>(*index);
  r_->produced.push_back(v);
  r_->trace_nodes.emplace_back();
  return v;
}

void Engine::defer(DeferredPtr op, uint64_t key) {
  r_->deferred.push_back(std::move(op));
  r_->deferred_tags.push_back(static_cast<int64_t>(r_->op_sites.size()));
  r_->trace_key = mix(r_->trace_key, key);
  r_->state = Recorder::State::kTrace;
  metrics_.count(Hot::kOpsDeferred);
}

void Engine::note_use(std::vector<int32_t>& last_use, uint32_t index) const {
  if (last_use.size() <= index) last_use.resize(index + 1, -1);
  last_use[index] = r_->lowering_op;
}

hlo::Value Engine::trace_input(TraceRef ref) {
  if (split_) return split_input(ref);
  if (ref.external) {
    if (r_->lowering_op >= 0) note_use(r_->external_last_use, ref.index);
    hlo::Value& node = r_->external_nodes.at(ref.index);
    if (!node.valid())
      node = r_->external_scalar[ref.index]
                 ? bind_scalar(r_->externals[ref.index], r_->external_types[ref.index], ref.index)
                 : bind(r_->externals[ref.index], r_->external_types[ref.index], ref.index);
    return node;
  }
  if (r_->lowering_op >= 0) note_use(r_->trace_last_use, ref.index);
  const hlo::Value& node = r_->trace_nodes.at(ref.index);
  if (!node.valid()) throw pjrt::Error("internal: a deferred op read a result not lowered yet");
  return node;
}

void Engine::set_trace_result(uint32_t index, hlo::Value node) {
  if (split_) return split_result(index, node);
  r_->trace_nodes.at(index) = node;
  if (ValuePtr v = r_->produced.at(index).lock()) {
    if (!(node.type() == v->type_))
      throw pjrt::Error("internal: a deferred op lowered to " + node.type().str() +
                        " for a placeholder of " + v->type_.str());
    v->node_ = node;
  }
}

void Engine::to_builder(bool keep) {
  Recorder::State was = r_->state;
  r_->state = Recorder::State::kBuilder;
  if (was != Recorder::State::kTrace) {
    r_->externals.clear();  // an op that was not deferred after all may have referenced some
    return;
  }
  metrics_.count("deferred_lowerings");
  auto start = std::chrono::steady_clock::now();
  try {
    for (size_t i = 0; i < r_->deferred.size(); ++i) {
      r_->builder->set_check_tag(r_->deferred_tags[i]);
      r_->lowering_op = static_cast<int32_t>(i);
      r_->deferred[i]->lower(*this);
    }
    r_->lowering_op = -1;
    // Back to the op being recorded (one that could not be deferred).
    r_->builder->set_check_tag(static_cast<int64_t>(r_->op_sites.size()));
  } catch (const std::exception& err) {
    // The recording cannot continue half lowered: it is abandoned as a
    // program that failed to compile (tensors updated in place keep their
    // old values, new ones carry the error).
    abandon_recording(err.what());
    throw;
  }
  if (keep)
    std::move(r_->deferred.begin(), r_->deferred.end(), std::back_inserter(r_->lowered));
  r_->deferred.clear();
  // Every external input is a parameter now (r_->inputs holds its buffer): the
  // trace's own references would keep old values from being donated.
  r_->externals.clear();
  metrics_.time("deferred_lowering", std::chrono::duration<double>(
                                         std::chrono::steady_clock::now() - start).count());
}

bool Engine::flush_trace(Program& p, uint64_t* key, const Priors& priors, bool keep) {
  uint64_t k = mix(r_->trace_key, p.outputs.size());
  for (const ValuePtr& v : p.outputs) k = mix(k, static_cast<uint64_t>(v->trace_));
  // Donation as the builder's flush decides it: buffers only the trace holds.
  for (size_t i = 0; i < r_->externals.size(); ++i)
    k = mix(k, !r_->external_scalar[i] && donatable(r_->externals[i], priors) ? 3 : 2);
  k = mix(k, static_cast<uint64_t>(r_->device));
  *key = k;

  auto it = traces_.find(k);
  pjrt::ExecutablePtr exe;
  if (it != traces_.end() && it->second.num_outputs == p.outputs.size())
    exe = cache_->lookup(it->second.program);
  if (!exe) {
    metrics_.count("trace_misses");
    to_builder(keep);
    return false;
  }
  metrics_.count("trace_hits");
  p.exe = exe;
  p.checks = it->second.checks;
  p.inputs.reserve(it->second.params.size());
  for (uint32_t e : it->second.params) p.inputs.push_back(r_->externals.at(e));
  std::vector<OpSite> sites = std::move(r_->op_sites);
  Mode mode = mode_;
  reset_recording();
  launch(p, sites, mode, priors.of);
  return true;
}

void Engine::remember_trace(uint64_t key, const hlo::Fingerprint& program, size_t num_outputs,
                            CheckListPtr checks) {
  TraceEntry entry{program, {}, num_outputs, std::move(checks)};
  entry.params.reserve(r_->inputs.size());
  for (int64_t e : r_->input_externals) {
    if (e < 0) return;  // bound outside the trace: not replayable
    entry.params.push_back(static_cast<uint32_t>(e));
  }
  if (traces_.size() >= kMaxTraces) traces_.clear();
  traces_[key] = std::move(entry);
}

}  // namespace torch_tpu::engine
