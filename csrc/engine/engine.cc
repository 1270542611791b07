#include "engine.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>
#include <utility>

#include <unistd.h>

#include "target.h"
#include "trace.h"
#include "xla_cpu/flags.h"

namespace torch_tpu::engine {

namespace {
Config& config() {
  static Config c;
  return c;
}
std::atomic<bool> g_initialized{false};

// Fused Eager flushes a program that grows past this many StableHLO ops.
constexpr size_t kMaxProgramOps = 20000;
// ... or past this many recorded ops (each lowers to a few StableHLO ops).
constexpr size_t kMaxRecordedOps = 4000;

// TORCH_TPU_TIERED_COMPILE (cache.h): unset or "recompiles", "0"/"off",
// "1"/"all"; checked before the client exists.
Cache::Tiering tiering_from_env() {
  const char* v = std::getenv("TORCH_TPU_TIERED_COMPILE");
  std::string name = v ? v : "recompiles";
  if (name == "recompiles") return Cache::Tiering::kRecompiles;
  if (name == "0" || name == "off") return Cache::Tiering::kOff;
  if (name == "1" || name == "all") return Cache::Tiering::kAll;
  throw pjrt::Error("TORCH_TPU_TIERED_COMPILE is 'recompiles' (the default), '0' or 'off', or '1' "
                    "or 'all', not '" + name + "'",
                    PJRT_Error_Code_INVALID_ARGUMENT);
}

}  // namespace

void Engine::configure(const Config& c) {
  if (g_initialized) throw pjrt::Error("torch_tpu: the runtime is already initialized");
  config() = c;
}

bool Engine::initialized() { return g_initialized; }

Engine& Engine::get() {
  // Constructed once; a failed construction is retried on the next call so
  // that a user can fix the environment without restarting.
  static std::mutex mu;
  static Engine* engine = nullptr;
  if (g_initialized) return *engine;
  std::lock_guard<std::mutex> lock(mu);
  if (!engine) {
    engine = new Engine();
    g_initialized = true;
  }
  return *engine;
}

Engine::Engine() {
  const Config& c = config();
  const Cache::Tiering tiering = tiering_from_env();
  if (xla_cpu::named_like_xla_cpu(c.plugin_path)) xla_cpu::tune_flags();  // before the client
  auto plugin = pjrt::Plugin::load(c.plugin_path);
  std::map<std::string, pjrt::Attribute> options;
  if (c.cpu_device_count > 0) options["cpu_device_count"] = c.cpu_device_count;
  try {
    client_ = std::make_unique<pjrt::Client>(plugin, options);
  } catch (const pjrt::Error&) {
    client_ = std::make_unique<pjrt::Client>(plugin);  // plugin without that option
  }
  target_ = make_target(*client_, c.cpu_half_conv);
  // Per device, the bytes a program may allocate (-1: unknown); XLA:CPU's
  // device memory is the host's.
  std::vector<int64_t> memory_limits;
  for (int d = 0; d < client_->device_count(); ++d) {
    int64_t limit = client_->memory_limit(d);
    if (limit < 0 && target_.xla_cpu)
      limit = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
    memory_limits.push_back(limit);
  }
  launcher_ = std::make_unique<Launcher>(*client_, metrics_, std::move(memory_limits));
  cache_ = std::make_unique<Cache>(*client_, metrics_, c.cache_dir);
  // Tiered compilation (cache.h) where its options are known: XLA:CPU.
  // By default only reshaped recompilations compile quickly (a program whose
  // site compiled the same op sequence over other shapes: each decode step
  // of generate(), a loop over lengths; `RecompileWatcher::reshaped`); a site's
  // first program and programs of a new op sequence compile optimized.
  // TORCH_TPU_TIERED_COMPILE=0 or off: none; =1 or all: every program
  // (quick code ran a small GPT's forward ~3x slower until its upgrade
  // landed, seconds later on two busy cores).
  cache_->set_tiering(target_.xla_cpu ? tiering : Cache::Tiering::kOff);
  cache_->set_unpartitioned_small(target_.unpartitioned_small_programs);
  if (const char* d = std::getenv("TORCH_TPU_DEFER_LOWERING")) defer_lowering_ = std::strcmp(d, "0") != 0;
  if (const char* c = std::getenv("TORCH_TPU_INDEX_CHECKS")) checks_ = std::strcmp(c, "0") != 0;
  if (const char* a = std::getenv("TORCH_TPU_ASYNC_COMPILE")) async_compile_ = std::strcmp(a, "1") == 0;
  if (Warmup::wanted(target_)) warmup_ = std::make_unique<Warmup>(*client_, *cache_);
  r_ = &mine();
}

Recorder& Engine::mine() {
  // A thread's recorder lives in the engine (values pending in it outlive
  // the thread); the thread's end marks it for the next recording thread.
  struct Slot {
    Recorder* recorder = nullptr;
    Engine* engine = nullptr;
    ~Slot() {
      if (!recorder) return;
      recorder->orphaned = true;
      engine->orphans_.fetch_add(1, std::memory_order_relaxed);
    }
  };
  thread_local Slot slot;
  if (!slot.recorder) {
    recorders_.push_back(std::make_unique<Recorder>());
    slot.recorder = recorders_.back().get();
    slot.recorder->epoch = next_epoch_++;
    slot.engine = this;
  }
  return *slot.recorder;
}

Recorder* Engine::recorder_of(const DeviceValue& v) {
  if (v.materialized()) return nullptr;
  for (auto& r : recorders_)
    if (r->epoch == v.epoch_) return r.get();
  return nullptr;
}

void Engine::flush_recorder(Recorder& r, FlushCause cause) {
  Recorder* current = std::exchange(r_, &r);
  try {
    flush_current(cause, false);
  } catch (...) {
    r_ = current;
    throw;
  }
  r_ = current;
}

void Engine::flush_all(FlushCause cause) {
  r_ = &mine();
  for (auto& r : recorders_)
    if (r.get() != r_ && r->ops > 0) flush_recorder(*r, cause);
  flush_current(cause, false);
  drop_orphans();
}

void Engine::drop_orphans() {
  if (orphans_.load(std::memory_order_relaxed) == 0) return;
  for (auto it = recorders_.begin(); it != recorders_.end();) {
    Recorder& r = **it;
    if (!r.orphaned) {
      ++it;
      continue;
    }
    orphans_.fetch_sub(1, std::memory_order_relaxed);
    // A failure is kept by the values it leaves without contents (abandon):
    // whoever reads them gets it, not this unrelated thread.
    try {
      flush_recorder(r, FlushCause::kThreadExit);
    } catch (const pjrt::Error&) {
    }
    it = recorders_.erase(it);
  }
}

void Engine::settle(const DeviceValue& v) {
  if (v.materialized()) return;
  if (v.error_) throw pjrt::Error(*v.error_);
  if (v.epoch_ == r_->epoch) return;
  Recorder* other = recorder_of(v);
  if (!other) throw pjrt::Error("internal: a pending value outlived its program");
  flush_recorder(*other, FlushCause::kOtherThread);
  if (v.error_) throw pjrt::Error(*v.error_);
}

void Engine::reset_recording() {
  r_->loop.restart();
  r_->op_sites.clear();
  r_->builder->clear();  // keeps its memory: no allocation churn per program
  r_->epoch = next_epoch_++;
  r_->ops = 0;
  r_->joining_ops = 0;
  r_->inputs.clear();
  r_->bound.clear();
  r_->produced.clear();
  r_->state = Recorder::State::kEmpty;
  r_->deferred.clear();
  r_->externals.clear();
  r_->external_types.clear();
  r_->external_scalar.clear();
  r_->external_nodes.clear();
  r_->input_externals.clear();
  r_->input_scalar.clear();
  r_->external_index.clear();
  r_->trace_nodes.clear();
  r_->deferred_tags.clear();
  r_->trace_key = 0;
  r_->lowered.clear();
  r_->external_last_use.clear();
  r_->trace_last_use.clear();
}

void Engine::set_mode(Mode m) {
  auto guard = lock();
  flush_all(FlushCause::kModeChange);
  mine().loop.hold(false);
  mode_ = m;
}

void Engine::flush(FlushCause cause) {
  auto guard = lock();
  flush_program(cause);
  // An optimizer step is one program (the hooks of torch_tpu/modes.py flush
  // at both ends): Fused Eager's loop detection waits for the step's end,
  // and Strict Eager records the step's ops instead of flushing each, as a
  // fused optimizer kernel (`fused=True`) would run them.
  if (cause == FlushCause::kOptimizerStepBegin) {
    r_->loop.hold(true);
    r_->step_open = mode_ == Mode::kDeferNever;
  }
  if (cause == FlushCause::kOptimizerStep) {
    r_->loop.hold(false);
    r_->first_step = false;
  }
}

void Engine::begin_optimizer_step(bool creates_state) {
  auto guard = lock();
  flush(FlushCause::kOptimizerStepBegin);
  r_->first_step = creates_state && mode_ != Mode::kDeferAll;
}

void Engine::begin(int device) {
  if (device < 0 || device >= device_count())
    throw pjrt::Error("tpu:" + std::to_string(device) + " does not exist: " +
                      std::to_string(device_count()) + " device(s) are available");
  r_ = &mine();
  drop_orphans();
  if (r_->loop.cut_pending()) flush_current(FlushCause::kLoopBoundary, false);
  if (r_->ops > 0 && device != r_->device) flush_current(FlushCause::kDeviceChange, false);
  r_->device = device;
  // Checks name the op being recorded; graph capture keeps its results as
  // the traced graph's.
  r_->builder->set_check_tag(static_cast<int64_t>(r_->op_sites.size()));
  r_->builder->set_checks_enabled(checks_ && mode_ != Mode::kDeferAll);
}

void Engine::set_checks(bool on) {
  auto guard = lock();
  flush_all(FlushCause::kModeChange);
  traces_.clear();  // traces record which programs they ran, checks included
  checks_ = on;
}

CheckListPtr Engine::check_results(hlo::Values& results) {
  const auto& checks = r_->builder->checks();
  if (checks.empty()) return nullptr;
  auto list = std::make_shared<CheckList>();
  hlo::Value code = r_->builder->constant_int(hlo::ElementType::kI32, -1);
  for (size_t i = checks.size(); i-- > 0;)
    code = r_->builder->select(checks[i].violated,
                            r_->builder->constant_int(hlo::ElementType::kI32, static_cast<int64_t>(i)),
                            code);
  for (const auto& c : checks) {
    list->ops.push_back(c.tag);
    list->messages.push_back(c.message);
    list->index_errors.push_back(c.index_error);
  }
  results.push_back(code);
  return list;
}

void Engine::verify_checks() {
  std::deque<Launcher::PendingCheck> pending;
  {
    auto guard = lock();
    if (found_failure_) {
      CheckFailed failure = std::move(*found_failure_);
      found_failure_.reset();
      throw failure;
    }
    pending = launcher_->take_checks();
  }
  Launcher::verify(pending, metrics_);
}

hlo::Value Engine::use(const ValuePtr& v) {
  if (r_->state != Recorder::State::kBuilder) to_builder();
  settle(*v);
  if (!v->materialized()) {
    if (!v->node_.valid()) throw pjrt::Error("internal: a pending value outlived its program");
    return v->node_;
  }
  if (v->device_ != r_->device)
    throw pjrt::Error("a value on tpu:" + std::to_string(v->device_) +
                      " was used by an op on tpu:" + std::to_string(r_->device));
  return bind(v->buffer_, v->type_);
}

hlo::Value Engine::bind(const pjrt::BufferPtr& buffer, const hlo::TensorType& type,
                        int64_t external) {
  auto it = r_->bound.find(buffer.get());
  if (it != r_->bound.end()) return it->second;
  hlo::Value p = r_->builder->parameter(type);
  r_->inputs.push_back(buffer);
  if (external < 0) {
    auto e = r_->external_index.find(buffer.get());
    if (e != r_->external_index.end()) external = e->second;
  }
  r_->input_externals.push_back(external);
  r_->input_scalar.push_back(false);
  r_->bound.emplace(buffer.get(), p);
  return p;
}

hlo::Value Engine::bind_scalar(const pjrt::BufferPtr& buffer, const hlo::TensorType& type,
                               int64_t external) {
  hlo::Value p = r_->builder->parameter(type);
  r_->inputs.push_back(buffer);
  r_->input_externals.push_back(external);
  r_->input_scalar.push_back(true);
  return p;
}

pjrt::BufferPtr Engine::scalar_buffer(hlo::ElementType dtype, const ScalarBits& bits) {
  auto key = std::make_tuple(static_cast<int>(dtype), bits.words[0], bits.words[1], r_->device);
  auto it = scalar_buffers_.find(key);
  if (it != scalar_buffers_.end()) return it->second;
  int64_t traced = trace::on() ? trace::now_ns() : 0;
  pjrt::BufferPtr buffer = client_->buffer_from_host(bits.words, buffer_type(dtype), {}, r_->device);
  if (traced) trace::transfer(trace::Kind::kToDevice, r_->device, element_size(dtype), traced);
  if (scalar_buffers_.size() > 4096) scalar_buffers_.clear();
  scalar_buffers_.emplace(key, buffer);
  metrics_.count("scalar_uploads");
  return buffer;
}

hlo::Value Engine::scalar(hlo::ElementType dtype, const ScalarBits& bits) {
  if (r_->state != Recorder::State::kBuilder) to_builder();
  return bind_scalar(scalar_buffer(dtype, bits), hlo::TensorType{dtype, {}});
}

ValuePtr Engine::produce(hlo::Value node) {
  if (r_->state != Recorder::State::kBuilder) to_builder();
  auto v = std::make_shared<DeviceValue>(node.type(), r_->device);
  v->epoch_ = r_->epoch;
  v->node_ = node;
  r_->produced.push_back(v);
  return v;
}

void Engine::supersede(const ValuePtr& next, const ValuePtr& old) {
  if (!old || old == next) return;
  // A prior pending in this recording is itself new: what it replaced is
  // what a failure restores.
  next->prior_ = old->materialized() ? old : old->prior_;
}

void Engine::set_warning_handler(std::function<void(const std::string&)> handler) {
  auto guard = lock();
  warn_ = std::move(handler);
}

void Engine::end(const char* op, const std::string* site, bool joins_consumer) {
  ++r_->ops;
  r_->joining_ops = joins_consumer ? r_->joining_ops + 1 : 0;
  // An op without a site (a copy the autocast backward makes) says nothing
  // of where the user's code is: it does not end a run of that code.
  if (site != nullptr && site != r_->last_site) {
    r_->last_site = site;
    watcher_.new_run();
  }
  metrics_.count(Hot::kOpsRecorded);
  r_->op_sites.push_back(OpSite{op, site});
  switch (mode_) {
    case Mode::kDeferNever:
      if (!r_->step_open) {
        if (!joins_consumer) flush(FlushCause::kOp);
      } else if (r_->builder->num_ops() > kMaxProgramOps || r_->ops > kMaxRecordedOps) {
        // A long step (a for-loop optimizer over many tensors) is cut into
        // programs of the cap's size; the step stays open.
        flush_current(FlushCause::kSizeCap, false);
        r_->step_open = true;
      }
      break;
    case Mode::kDeferNeverAndLaunchBlocking:
      flush(FlushCause::kOp);
      break;
    case Mode::kDeferAndFuse: {
      // Op names are stable strings (a plan's, or literals): their address
      // identifies the op for loop detection without hashing the name.
      LoopDetector::Cut cut = r_->loop.record(reinterpret_cast<uintptr_t>(op));
      if (cut == LoopDetector::Cut::kNow) {
        if (r_->loop.found()) metrics_.count("loops_found");
        flush_current(FlushCause::kLoopBoundary, false);
      } else if (cut == LoopDetector::Cut::kNone &&
                 (r_->builder->num_ops() > kMaxProgramOps || r_->ops > kMaxRecordedOps)) {
        warn_size_cap(site);
        flush_current(FlushCause::kSizeCap, false);
      }
      break;
    }
    case Mode::kDeferAll:
      break;
  }
}

Program Engine::flush_program(FlushCause cause, bool with_text) {
  auto guard = lock();
  r_ = &mine();
  return flush_current(cause, with_text);
}

Program Engine::record_program(FlushCause cause) {
  auto guard = lock();
  r_ = &mine();
  return flush_current(cause, /*with_text=*/true, /*run=*/false);
}

void Engine::set_capture_guard(bool on) {
  auto guard = lock();
  guarded_ = on ? &mine() : nullptr;
  guard_tripped_.clear();
}

hlo::Value Engine::shaped_result(hlo::Value flat) const {
  hlo::Value source = r_->builder->reshaped_from(flat);
  return flat.rank() == 1 && source.rank() > 1 && source.dtype() == flat.dtype() ? source : flat;
}

Program Engine::flush_current(FlushCause cause, bool with_text, bool run) {
  r_->step_open = false;  // whatever flushed, the step's one program ends here
  if (guarded_ != nullptr && r_ == guarded_) {
    std::string why = std::string("a flush of the recording (") + name(cause) +
                      ") during a step capture: a captured step runs as one program, so "
                      "nothing in it may run part of it early (host reads, "
                      "torch.tpu.synchronize(), stream events, eager-mode or device changes)";
    if (guard_tripped_.empty()) guard_tripped_ = why;
    throw pjrt::Error("tpu: " + why);
  }
  // An error before the recording is consumed (its results, fingerprint or
  // text; a lowering error drops it in to_builder) drops it as a failed
  // compile does: otherwise every later op would flush the same recording
  // and fail the same way.
  const uint64_t epoch = r_->epoch;
  try {
    return flush_recording(cause, with_text, run);
  } catch (const std::exception& err) {
    if (r_->epoch == epoch)
      abandon_recording(std::string("internal error while building the program: ") + err.what() +
                        "\n" + describe_ops(r_->op_sites, mode_));
    throw;
  }
}

Program Engine::flush_recording(FlushCause cause, bool with_text, bool run) {
  Program p;
  p.device = r_->device;
  r_->loop.flushing(requested(cause));
  // Outputs: the pending values still alive. Dead intermediates stay internal.
  for (auto& w : r_->produced)
    if (ValuePtr v = w.lock()) p.outputs.push_back(std::move(v));
  // A recording whose values all died still runs for its checks (an index
  // written out of range into a temporary is an error as on CPU).
  if (p.outputs.empty() && r_->ops > 0 && checks_ && r_->state == Recorder::State::kTrace) to_builder();
  bool checked = r_->state == Recorder::State::kBuilder && !r_->builder->checks().empty();
  if (p.outputs.empty() && !checked) {
    reset_recording();
    return p;
  }
  if (fail_next_flush_) {
    fail_next_flush_ = false;
    throw std::logic_error("an error injected for testing (fail_next_flush)");
  }
  metrics_.count(cause);
  if (cause != FlushCause::kOp && cause != FlushCause::kAsyncEager) watcher_.new_run();
  if (r_->state == Recorder::State::kTrace && with_text) to_builder();
  uint64_t trace_key = 0;
  bool from_trace = r_->state == Recorder::State::kTrace;
  Priors priors = take_priors(p.outputs);
  if (from_trace && flush_trace(p, &trace_key, priors, may_split(cause, run))) return p;
  // A parameter whose buffer nobody but this recording holds (the old value
  // of an in-place update) is donated: the program may reuse its memory.
  std::unordered_map<const pjrt::Buffer*, size_t> donated;  // buffer -> parameter
  // An op run alone for a Fused recording donates only what Strict would
  // (an in-place update's old buffer), not the buffer of a tensor that died
  // since it was recorded: its program stays Strict's.
  const bool only_priors = cause == FlushCause::kAsyncEager;
  if (donate_) {
    for (size_t i = 0; i < r_->inputs.size(); ++i)
      if (!r_->input_scalar[i] && donatable(r_->inputs[i], priors) &&
          (!only_priors || priors.held.count(r_->inputs[i].get()))) {
        r_->builder->set_donated(i);
        donated.emplace(r_->inputs[i].get(), i);
      }
  }
  hlo::Values results;
  // A captured program's results stay flat: its replays (Engine::run) and
  // the programs calling it (GraphCall) take them as storages. The new value
  // of a donated buffer (an in-place update) takes its parameter along: XLA
  // writes a result into its parameter's memory only when the two have one
  // shape (a shaped result of a flat parameter was computed into a temporary
  // and copied, x.add_(y) 2-3x slower), so that parameter is taken in the
  // result's shape (hlo::Builder::take_parameter_as) and named as that
  // result's buffer (alias_result: a bare donor's buffer XLA may give to any
  // result of its shape, and a foreach AdamW step then copied every state).
  const bool shaped = target_.shaped_results && run && cause != FlushCause::kCaptureEnd;
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const hlo::Value& node = p.outputs[k]->node_;
    hlo::Value result = shaped ? shaped_result(node) : node;
    const ValuePtr& prior = priors.of[k];
    auto donor = prior && prior->buffer_ ? donated.find(prior->buffer_.get()) : donated.end();
    if (donor != donated.end()) {
      // Same elements only: a storage written as another dtype (complex
      // viewed as real pairs) keeps its flat parameter and is only a donor,
      // and XLA copies it.
      const hlo::TensorType& param = r_->builder->parameters()[donor->second].type();
      if (param.dtype == result.type().dtype && param.numel() == result.type().numel()) {
        r_->builder->take_parameter_as(donor->second, result.type());  // as declared if equal
        r_->builder->alias_result(donor->second, k, result.type());
      }
      donated.erase(donor);  // one result per parameter
    }
    results.push_back(result);
  }
  p.checks = check_results(results);
  r_->builder->set_results(results);
  // A program seen before is found by its fingerprint, without printing it.
  hlo::Fingerprint key = r_->builder->fingerprint();
  if (from_trace) remember_trace(trace_key, key, p.outputs.size(), p.checks);
  p.exe = cache_->lookup(key);
  if (!p.exe || with_text) p.text = r_->builder->module();
  p.inputs = std::move(r_->inputs);
  std::unique_ptr<SplitRun> split;
  if (!p.exe && !r_->lowered.empty()) split = take_split(p);
  // A new program's site: its first op that came from user code (a copy
  // from the host, recorded without one, can open a recording).
  const std::string* site = nullptr;
  const char* first_op = nullptr;
  for (size_t i = 0; !p.exe && i < r_->op_sites.size() && !site; ++i)
    if (r_->op_sites[i].site && !r_->op_sites[i].site->empty())
      site = r_->op_sites[i].site, first_op = r_->op_sites[i].op;
  std::string signature;
  // A captured graph or step is compiled once and its executable held and
  // replayed directly (never looked up again, so a quick compile would never
  // be upgraded): it is no reshaped recompilation, whatever its site ran.
  if (site && cause != FlushCause::kCaptureEnd && cause != FlushCause::kAsyncEager)
    signature = RecompileWatcher::signature(*r_->builder, r_->op_sites);
  // Kept for the error message only: formatted if this program fails.
  std::vector<OpSite> sites = std::move(r_->op_sites);
  Mode mode = mode_;
  const bool first_step = r_->first_step;
  reset_recording();  // the recording is consumed even if compiling fails
  if (!run) {
    abandon(p.outputs, priors.of, "it was recorded for a background compile and never run");
    return p;
  }

  if (!p.exe) {
    // No Strict program is a reshaped recompilation, whatever its site ran:
    // the quick tier shortens Fused Eager's whole-step compiles, a single op
    // compiles fast either way, and quick code runs until its upgrade lands
    // (a 3-D depthwise convolution's 27 taps ran 16x slower; a small GPT's
    // optimizer step, one Strict program, after a quickstart MLP's at the
    // same line ran its steps at half speed while the nice-10 worker waited
    // for a core).
    // An optimizer's first step (its state's creation) runs once: quick too
    // (a cold quickstart MLP's first Strict step 0.55 -> 0.48 s), and never
    // upgraded (a background compile landing later would only load the cores).
    const bool once = first_step && cause != FlushCause::kOp;
    bool quick = once || (!signature.empty() && mode != Mode::kDeferNever &&
                          cause != FlushCause::kOp && watcher_.reshaped(*site, first_op, signature));
    // With asynchronous compiles a program neither tier holds compiles in
    // the background, and the recording runs op by op meanwhile.
    if (split) p.exe = cache_->find(key, p.text);
    try {
      if (!split) p.exe = cache_->get(key, p.text, quick, /*upgrade=*/!once);
    } catch (const pjrt::Error& err) {
      std::string why = std::string(err.what()) + "\n" + describe_ops(sites, mode);
      abandon(p.outputs, priors.of, why);
      pjrt::raise(why, err.code());
    }
    // (A program compiling in the background, or that failed to, was noted
    // when first missed: the recordings run op by op meanwhile compile
    // nothing new.)
    if (!signature.empty() && !(split && !p.exe && background_programs_.known(key))) {
      metrics_.count("compiles_at_known_site");
      std::string warning = watcher_.note(*site, first_op, signature);
      if (!warning.empty() && warn_) {
        metrics_.count("recompile_warnings");
        warn_(warning);
      }
    }
    if (!p.exe) {
      // The pieces a new op cut a recording into do not come again (the
      // next step records the whole step): queued only if they do.
      compile_async(key, std::move(p.text), quick || cause == FlushCause::kNewOp);
      // Only the run holds the inputs now, and lets go of each after its
      // last reader: donation decides as it would for these ops in Strict.
      p.inputs.clear();
      priors = Priors{};
      run_split(*split, sites);
      return p;
    }
  }
  launch(p, sites, mode, priors.of);
  return p;
}

void Engine::launch(Program& p, const std::vector<OpSite>& sites, Mode mode,
                    const std::vector<ValuePtr>& priors) {
  std::vector<pjrt::BufferPtr> buffers;
  try {
    buffers = launcher_->launch(*p.exe, p.inputs, p.device, &sites, mode,
                                /*blocking=*/mode_ == Mode::kDeferNeverAndLaunchBlocking);
  } catch (const pjrt::Error& err) {
    std::string why = std::string(err.what()) + "\n" + describe_ops(sites, mode);
    abandon(p.outputs, priors, why);
    pjrt::raise(why, err.code());
  }
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    DeviceValue& v = *p.outputs[i];
    v.buffer_ = std::move(buffers[i]);
    v.node_ = hlo::Value();
    v.trace_ = -1;
    v.prior_.reset();
  }
  if (p.checks && buffers.size() > p.outputs.size()) {
    // A long loop without host reads: read the oldest checks now and then.
    if (launcher_->add_checks(std::move(buffers.back()), p.checks, sites)) {
      try {
        verify_checks();
      } catch (const CheckFailed& failure) {
        if (!found_failure_) found_failure_.emplace(failure);
      }
    }
  }
}

Engine::Priors Engine::take_priors(const std::vector<ValuePtr>& outputs) {
  Priors p;
  p.of.reserve(outputs.size());
  std::unordered_map<const DeviceValue*, long> uses;
  for (const ValuePtr& v : outputs) {
    p.of.push_back(v->prior_);
    if (v->prior_) ++uses[v->prior_.get()];
  }
  // A prior that only these outputs and `p.of` hold keeps one reference to
  // its buffer that is no reason not to donate it.
  for (const auto& [prior, n] : uses)
    if (prior->buffer_) {
      const ValuePtr& any = *std::find_if(p.of.begin(), p.of.end(),
                                          [&](const ValuePtr& q) { return q.get() == prior; });
      if (any.use_count() == 2 * n) ++p.held[prior->buffer_.get()];
    }
  return p;
}

bool Engine::donatable(const pjrt::BufferPtr& buffer, const Priors& priors) const {
  if (!donate_) return false;
  long others = 0;
  if (auto it = priors.held.find(buffer.get()); it != priors.held.end()) others += it->second;
  others += launcher_->in_flight_refs(buffer.get());
  return buffer.use_count() == 1 + others;
}

void Engine::abandon(const std::vector<ValuePtr>& values, const std::vector<ValuePtr>& priors,
                     const std::string& why) {
  auto error = std::make_shared<const std::string>(
      "tpu: this tensor has no value: the program that computes it failed:\n" + why);
  for (size_t i = 0; i < values.size(); ++i) {
    DeviceValue& v = *values[i];
    const ValuePtr& old = i < priors.size() ? priors[i] : nullptr;
    v.node_ = hlo::Value();
    v.trace_ = -1;
    v.prior_.reset();
    bool usable = false;
    if (old && old->materialized() && old->type_ == v.type_) {
      try {
        usable = !old->buffer_->is_deleted();
      } catch (const pjrt::Error&) {
      }
    }
    if (usable)
      v.buffer_ = old->buffer_;
    else
      v.error_ = error;
  }
}

void Engine::abandon_recording(const std::string& why) {
  std::vector<ValuePtr> live, priors;
  for (auto& w : r_->produced)
    if (ValuePtr v = w.lock()) {
      priors.push_back(v->prior_);
      live.push_back(std::move(v));
    }
  abandon(live, priors, why);
  reset_recording();
}

std::string describe_ops(const std::vector<OpSite>& ops, Mode mode) {
  if (ops.size() <= 1 && mode != Mode::kDeferAndFuse && mode != Mode::kDeferAll) {
    if (ops.empty()) return "";
    std::string where = ops[0].where();
    return "  (in " + std::string(ops[0].op) + (where.empty() ? "" : " at " + where) + ")";
  }
  std::string out = "  (in a deferred program of " + std::to_string(ops.size()) +
                    " ops; rerun with TPU_LAUNCH_BLOCKING=1 to pin the error to its line)";
  size_t shown = 0;
  for (const OpSite& op_site : ops) {
    std::string site = op_site.where();
    if (++shown > 12) {
      out += "\n    ...";
      break;
    }
    out += "\n    " + std::string(op_site.op) + (site.empty() ? "" : " at " + site);
  }
  return out;
}

void Engine::clear_cache(bool disk) {
  auto guard = lock();
  cache_->clear(disk);
  watcher_.clear();
}

void Engine::warn_size_cap(const std::string* site) {
  if (!size_cap_warned_.insert(site).second || !warn_) return;
  warn_("torch_tpu: Fused Eager flushed a program of " + std::to_string(r_->ops) +
        " ops at its size cap" + (site && !site->empty() ? " at " + *site : std::string()) +
        ": no repeating op sequence or host read ended the recording, so it held every live "
        "intermediate until now. Read a result or call torch_tpu.sync() where an iteration "
        "ends (warned once per line).");
}

std::vector<ValuePtr> Engine::run(const pjrt::Executable& exe,
                                  const std::vector<pjrt::BufferPtr>& inputs, int device,
                                  const std::vector<OpSite>* ops, Mode mode) {
  auto guard = lock();
  return launcher_->run(exe, inputs, device, ops, mode,
                        /*blocking=*/mode_ == Mode::kDeferNeverAndLaunchBlocking);
}

void Engine::raise_failure(const std::string& message, int code) {
  std::string context;
  {
    auto guard = lock();
    context = launcher_->failure_context();
  }
  pjrt::raise(message + context, code);
}

pjrt::BufferPtr Engine::buffer(const ValuePtr& v, FlushCause cause) {
  auto guard = lock();
  if (v->error_) throw pjrt::Error(*v->error_);
  // Flushed in the recording it is pending in: this thread's or another's.
  if (Recorder* r = recorder_of(*v)) flush_recorder(*r, cause);
  if (!v->materialized()) throw pjrt::Error("internal: value not materialized after flush");
  return v->buffer_;
}

long Engine::in_flight_refs(const pjrt::Buffer* buffer) const {
  return launcher_->in_flight_refs(buffer);
}

ValuePtr Engine::adopt(pjrt::BufferPtr buffer, int device) {
  hlo::TensorType type = storage_type(*buffer);
  return std::make_shared<DeviceValue>(std::move(type), device, std::move(buffer));
}

std::vector<std::shared_ptr<pjrt::Event>> Engine::mark() {
  auto guard = lock();
  flush(FlushCause::kStreamEvent);
  return launcher_->unfinished();
}

void Engine::stop_background() {
  std::deque<Launcher::InFlight> launches;
  {
    auto guard = lock();
    launches = launcher_->take_in_flight();
  }
  std::vector<bool> failed = Launcher::await(launches);  // without the lock
  {
    auto guard = lock();
    launcher_->settle(launches, failed);
  }
  join_warmup();
  cache_->stop_background();
}

void Engine::synchronize() {
  watcher_.new_run();
  int64_t traced = trace::on() ? trace::now_ns() : 0;
  std::deque<Launcher::InFlight> launches;
  {
    auto guard = lock();
    flush(FlushCause::kSynchronize);
    launches = launcher_->take_in_flight();
  }
  std::vector<bool> failed = Launcher::await(launches);  // without the lock
  if (traced) trace::synchronized(traced, launches.size());
  // Failures found here or earlier (a finished launch released by a later
  // one) are raised once, naming the first failed program's ops.
  auto guard = lock();
  launcher_->settle(launches, failed);
  if (!launcher_->failed()) {
    guard.unlock();
    verify_checks();
    return;
  }
  auto [message, code] = launcher_->first_failure();
  guard.unlock();
  raise_failure(message, code);
}

}  // namespace torch_tpu::engine
