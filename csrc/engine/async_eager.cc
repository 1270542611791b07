// Asynchronous compiles of Fused Eager recordings: a recording whose program
// neither cache tier holds does not wait for its compile. The program is
// queued on the cache's background worker (the worker of tiered compilation
// and of torch.compile's async_compile), and the recording runs now, one
// program per op, as Strict Eager would have run it (those one-op programs
// are small and mostly cached already). The recording's trace is remembered
// as usual, so once the program is in the memory tier the same recording
// launches it without lowering anything.
//
// How the ops run one by one: the flush lowered the deferred ops into the
// builder for the program's fingerprint and text, keeping them
// (Recorder::lowered) and noting each input's last reader. Each recorded
// op's deferred ops are lowered again into a recording of their own, external
// inputs bound to the buffers the program would have taken and trace inputs
// to the values earlier ops' programs produced; then that recording is
// flushed like a Strict op's (FlushCause::kAsyncEager). The recording's live
// values are the ops' results, so they end up holding the buffers of those
// programs; dead intermediates live in temporaries until their last reader
// ran. Each such program is the one Strict Eager runs for the op, so a cache
// holding Strict's serves it: the run lets go of each external input after
// its last reader, donation takes only an in-place update's old buffer, and
// a value only its own op reads stays inside (see split_result).
#include "engine.h"

namespace torch_tpu::engine {

void Engine::set_async_compile(bool on) {
  auto guard = lock();
  async_compile_ = on;
}

bool Engine::may_split(FlushCause cause, bool run) const {
  return async_compile_ && run && mode_ == Mode::kDeferAndFuse && cause != FlushCause::kCaptureEnd;
}

std::unique_ptr<Engine::SplitRun> Engine::take_split(const Program& p) {
  auto s = std::make_unique<SplitRun>();
  s->device = r_->device;
  s->ops = std::move(r_->lowered);
  s->tags = r_->deferred_tags;
  s->external_types = r_->external_types;
  s->external_scalar = r_->external_scalar;
  // Every external is a parameter of the program (an op bound it).
  s->externals.resize(s->external_types.size());
  for (size_t i = 0; i < p.inputs.size(); ++i)
    if (r_->input_externals[i] >= 0) s->externals.at(r_->input_externals[i]) = p.inputs[i];
  s->last_use = r_->external_last_use;
  s->last_use.resize(s->externals.size(), -1);
  s->trace_last_use = r_->trace_last_use;
  s->trace_last_use.resize(r_->produced.size(), -1);
  s->values.reserve(r_->produced.size());
  for (auto& w : r_->produced) s->values.push_back(w.lock());
  return s;
}

hlo::Value Engine::split_input(TraceRef ref) {
  if (ref.external) {
    SplitRun& s = *split_;
    if (auto it = s.bound.find(ref.index); it != s.bound.end()) return it->second;
    pjrt::BufferPtr& buffer = s.externals.at(ref.index);
    if (!buffer) throw pjrt::Error("internal: an external input of a split recording is unbound");
    const hlo::TensorType& type = s.external_types[ref.index];
    hlo::Value node = s.external_scalar[ref.index] ? bind_scalar(buffer, type) : bind(buffer, type);
    s.bound.emplace(ref.index, node);
    if (s.last_use[ref.index] <= s.op) buffer.reset();  // its last reader has it now
    return node;
  }
  const ValuePtr& v = split_->values.at(ref.index);
  if (!v) throw pjrt::Error("internal: an op of a split recording read a result not computed yet");
  return use(v);
}

void Engine::split_result(uint32_t index, hlo::Value node) {
  SplitRun& s = *split_;
  ValuePtr& v = s.values.at(index);
  // A dead intermediate is a result of this program, as all of an op's
  // results are in Strict Eager, unless only its own op reads it (an
  // unwritten storage's zeros): that stays inside, as in Strict's program.
  bool internal = false;
  const int32_t reader = s.trace_last_use.at(index);
  if (reader < 0) s.unread.push_back(index);  // let go once computed
  if (!v) {
    v = std::make_shared<DeviceValue>(node.type(), r_->device);
    internal = reader >= 0 && s.tags.at(reader) == s.tags.at(s.op);
  }
  if (!(node.type() == v->type_))
    throw pjrt::Error("internal: a deferred op lowered to " + node.type().str() +
                      " for a placeholder of " + v->type_.str());
  v->epoch_ = r_->epoch;
  v->node_ = node;
  if (!internal) r_->produced.push_back(v);
}

void Engine::run_split(SplitRun& s, const std::vector<OpSite>& sites) {
  metrics_.count("async_eager_recordings");
  Recorder one;
  one.device = s.device;
  one.epoch = next_epoch_++;
  Recorder* outer = std::exchange(r_, &one);
  const Mode mode = std::exchange(mode_, Mode::kDeferNever);  // each op's program is Strict's
  split_ = &s;
  auto restore = [&] {
    split_ = nullptr;
    mode_ = mode;
    r_ = outer;
  };
  // Each value is let go after its last reader (a dead intermediate's
  // buffer is freed there, as in Strict Eager, not at the end of the run).
  std::vector<std::vector<uint32_t>> release_at(s.ops.size());
  for (size_t v = 0; v < s.trace_last_use.size(); ++v)
    if (s.trace_last_use[v] >= 0 && static_cast<size_t>(s.trace_last_use[v]) < s.ops.size())
      release_at[s.trace_last_use[v]].push_back(static_cast<uint32_t>(v));
  try {
    // The deferred ops of one recorded op (the zeros of an unwritten storage
    // it reads, then the op) are one program, as in Strict Eager.
    for (size_t i = 0; i < s.ops.size();) {
      const size_t first = i;
      const int64_t tag = s.tags[i];
      s.bound.clear();
      s.unread.clear();
      one.state = Recorder::State::kBuilder;
      one.builder->set_checks_enabled(checks_);
      one.builder->set_check_tag(0);
      if (tag >= 0 && static_cast<size_t>(tag) < sites.size()) one.op_sites.push_back(sites[tag]);
      for (; i < s.ops.size() && s.tags[i] == tag; ++i) {
        s.op = static_cast<int32_t>(i);
        s.ops[i]->lower(*this);
      }
      flush_current(FlushCause::kAsyncEager, /*with_text=*/false);
      for (size_t k = first; k < i; ++k)
        for (uint32_t v : release_at[k]) s.values[v].reset();
      for (uint32_t v : s.unread) s.values[v].reset();
    }
  } catch (const std::exception& err) {
    // The ops after the failed one never run: their values carry its error
    // (or take back what they replaced), as a failed program's do.
    std::vector<ValuePtr> left, priors;
    for (const ValuePtr& v : s.values)
      if (v && !v->materialized() && !v->error_) {
        left.push_back(v);
        priors.push_back(v->prior_);
      }
    abandon(left, priors, err.what());
    restore();
    throw;
  }
  restore();
}

void Engine::compile_async(const hlo::Fingerprint& key, std::string text, bool once) {
  std::string failure = background_programs_.queue(*cache_, key, std::move(text), once);
  if (!failure.empty() && warn_)
    warn_("torch_tpu: a Fused Eager program failed to compile in the background; its ops keep "
          "running one program each:\n" + failure);
}

}  // namespace torch_tpu::engine
