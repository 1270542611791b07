// The execution engine: records ops into a pending program, decides when to
// flush it (the eager mode), compiles through the cache and launches.
// Knows nothing of torch.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "../hlo/target.h"
#include "../pjrt/client.h"
#include "background_programs.h"
#include "cache.h"
#include "deferred.h"
#include "element_types.h"
#include "flush_cause.h"
#include "launcher.h"
#include "metrics.h"
#include "mode.h"
#include "recompile_watcher.h"
#include "recorder.h"
#include "transfers.h"
#include "value.h"
#include "warmup.h"

namespace torch_tpu::engine {

struct Config {
  std::string plugin_path;        // the PJRT plugin .so
  int64_t cpu_device_count = 1;   // create option for the CPU plugin
  std::string cache_dir;          // empty: no disk cache
  hlo::HalfConvQuery cpu_half_conv = nullptr;  // the target's CPU-numerics source
};

// A host scalar's bytes as the device holds them (little-endian): up to 16,
// for complex128; a narrower scalar sits in the low bytes of words[0].
struct ScalarBits {
  uint64_t words[2] = {0, 0};
  ScalarBits() = default;
  ScalarBits(uint64_t low) : words{low, 0} {}  // NOLINT: implicit, any scalar up to 64 bits
};

// A flushed recording: what ran, with which inputs and outputs.
struct Program {
  std::string text;                   // printed on a cache miss or on request
  pjrt::ExecutablePtr exe;            // null when nothing was pending
  std::vector<pjrt::BufferPtr> inputs;  // parameter i's buffer
  std::vector<ValuePtr> outputs;      // result j's value
  int device = 0;
  CheckListPtr checks;                // its run-time checks (an extra result)
};

class Engine {
 public:
  // Sets how the engine is created; must precede the first get().
  static void configure(const Config& config);
  // The process-wide engine; creates the PJRT client on first use. Throws
  // pjrt::Error when no plugin can be loaded.
  static Engine& get();
  static bool initialized();

  pjrt::Client& client() { return *client_; }
  // The plugin's profile, built with the client; lowerings read it.
  const hlo::Target& target() const { return target_; }
  // Waits for the background warm-up (see warmup.h), if one is running.
  void join_warmup() {
    if (warmup_) warmup_->join();
  }
  // At exit: the launched programs still running finish (a training step's
  // backward and optimizer programs, say, after a script's last read waited
  // only for its loss), then the warm-up and the running background compile;
  // queued compiles are dropped. Nothing may run in the plugin when its
  // statics go: XLA:CPU's exit handlers free the JIT code of its oneDNN
  // kernels, and a program still in one crashed the process. Failures of
  // those programs are not raised (nothing reads their results).
  void stop_background();
  int device_count() const { return client_->device_count(); }

  // Recording (callers hold lock()).
  std::unique_lock<std::recursive_mutex> lock() { return std::unique_lock(mu_); }
  // The builder of the current recording; lowers the deferred ops first.
  hlo::Builder& builder() {
    if (r_->state != Recorder::State::kBuilder) to_builder();
    return *r_->builder;
  }
  // Starts recording an op of this thread on `device` (flushes first if the
  // pending program belongs to another device). Each thread records into its
  // own recording; a value pending in another thread's is flushed there
  // when this one uses it.
  void begin(int device);
  // The node for `v` in the current program: its pending node, or a new
  // parameter bound to its buffer.
  hlo::Value use(const ValuePtr& v);
  // A 0-d program input holding `bits` (a host scalar): values never enter
  // the program text, so a new value never recompiles.
  hlo::Value scalar(hlo::ElementType dtype, const ScalarBits& bits);
  // A new pending value computed by `node`.
  ValuePtr produce(hlo::Value node);
  // `next` (pending) replaces `old` in its holder, a storage written in
  // place: if next's program fails, next takes old's contents back, so a
  // failure never loses what existed before the program.
  void supersede(const ValuePtr& next, const ValuePtr& old);
  // Ends an op: flushes now or later according to the mode. `site` is where
  // the op came from (a Python file:line, interned by the caller: it must
  // outlive the engine), for errors and recompile warnings. In Strict Eager
  // an op that `joins_consumer` (a device copy: clone, contiguous() and
  // reshape of a strided view, .to(dtype)) is not a program of its own: it
  // runs in the program of the op after it (a host read or synchronize
  // flushes it as ever).
  void end(const char* op, const std::string* site = nullptr, bool joins_consumer = false);
  // Receives warnings (recompilations); the aten layer routes them to Python.
  void set_warning_handler(std::function<void(const std::string&)> handler);
  // Donation of dead input buffers to the program (off while capturing graphs
  // whose inputs stay alive outside the engine's view).
  void set_donation(bool on) { donate_ = on; }
  // Step capture (aten/step_capture.h): while on, any flush of the calling
  // thread's recording throws instead (a host read, a synchronize, a mode
  // or device change would cut the step into several programs), and the
  // first such refusal is kept for capture_guard_tripped(). Turning it on or
  // off clears that.
  void set_capture_guard(bool on);
  const std::string& capture_guard_tripped() const { return guard_tripped_; }

  // Runs this thread's pending program (if any). `cause` is counted in the
  // metrics (flush_cause.h).
  void flush(FlushCause cause);
  // optimizer.step() begins (the hook of torch_tpu/modes.py): flushes the
  // gradients' program (kOptimizerStepBegin); `creates_state` says the
  // optimizer has no state yet, so this step's update runs once.
  void begin_optimizer_step(bool creates_state);
  Program flush_program(FlushCause cause, bool with_text = false);
  // Ends this thread's recording like flush_program(cause, true) without
  // compiling or running it (asynchronous graph compiles): the program's
  // text, parameters and results, its executable only if the memory tier
  // holds it. The results never get values (reading one raises).
  Program record_program(FlushCause cause);
  // Launches a compiled program on `args`; returns its outputs, materialized.
  // `ops` (optional) are named if the program fails after its launch.
  std::vector<ValuePtr> run(const pjrt::Executable& exe, const std::vector<pjrt::BufferPtr>& args,
                            int device, const std::vector<OpSite>* ops = nullptr,
                            Mode mode = Mode::kDeferNever);
  // Materializes `v` (flushing if it is pending) and returns its buffer.
  pjrt::BufferPtr buffer(const ValuePtr& v, FlushCause cause);
  // Host transfers (transfers.cc). One array, waiting for the copy:
  ValuePtr from_host(const void* data, const hlo::TensorType& type, int device);
  void to_host(const ValuePtr& v, void* dst, size_t bytes);
  // Many arrays: every upload is issued before any is awaited; `values`
  // receives their device values, usable at once (programs reading them
  // wait for the copies). A plugin error raises once nothing of the batch is
  // left in flight.
  Transfers upload(const std::vector<HostArray>& arrays, std::vector<ValuePtr>* values);
  // Flushes the recordings the values are pending in (one program each),
  // then issues every copy before awaiting any.
  Transfers download(const std::vector<ValuePtr>& values, const std::vector<HostSpan>& dsts);
  // Waits for every copy of `t` (all of them, even after one failed), then
  // raises the first error: a failed upload, a failed program as to_host
  // does, a device-side check (downloads).
  void await(Transfers& t);
  // A materialized value holding `buffer` (a result of a program the engine
  // did not launch: csrc/distributed's collectives).
  ValuePtr adopt(pjrt::BufferPtr buffer, int device);
  // References to `buffer` that launched, unfinished programs hold (no
  // reason not to donate it: PJRT orders a donation after those reads).
  long in_flight_refs(const pjrt::Buffer* buffer) const;
  // Flushes and waits until every launched program finished.
  void synchronize();
  // What a stream event captures: this thread's recording is flushed and
  // launched, and the completion events of the programs launched so far that
  // are not known to be done are returned (none: everything has finished).
  std::vector<std::shared_ptr<pjrt::Event>> mark();
  // Run-time checks (index bounds) in the programs recorded from now on;
  // TORCH_TPU_INDEX_CHECKS=0 starts with them off.
  void set_checks(bool on);
  bool checks() const { return checks_; }
  // Reads the checks of launched programs; throws CheckFailed for the first
  // violated one (the others are dropped), or one an op's launch found
  // earlier. Host reads and synchronize call it.
  void verify_checks();

  Mode mode() const { return mode_; }
  void set_mode(Mode m);

  // Asynchronous compiles of Fused Eager recordings (async_eager.cc;
  // TORCH_TPU_ASYNC_COMPILE=1 starts with them on): a recording whose
  // program neither cache tier holds runs op by op, each op a Strict
  // program, while the program compiles on the cache's background worker;
  // once it is in the cache, the same recording launches it.
  void set_async_compile(bool on);
  bool async_compile() const { return async_compile_; }
  // Whether an op whose lowering is new runs as a program of its own
  // (FlushCause::kNewOp), keeping the Fused recordings around it deferred:
  // not inside optimizer.step(), one program in Strict Eager too.
  bool runs_new_ops_alone() const {
    return async_compile_ && mode_ == Mode::kDeferAndFuse && !r_->loop.held();
  }
  // Whether the recording holds an op that Strict Eager would have run
  // before the op being recorded: not only this op's own deferred inputs
  // (an unwritten storage's zeros) and copies that join their consumer.
  bool has_earlier_program() const { return r_->ops > r_->joining_ops; }

  // ---- deferred lowering (deferred.h); callers hold lock() ----
  // Every eager mode records an op whose signature lowered before as a
  // DeferredOp, and a flush finds the program of a known trace without
  // lowering (Strict is a trace of one op flushed at once). Graph capture
  // (kDeferAll) lowers as it records: it hands out the program's text.
  // Whether the next op may be recorded as a DeferredOp: nothing of the
  // current recording has been lowered yet.
  bool deferring() const { return deferral_enabled() && r_->state != Recorder::State::kBuilder; }
  // Deferral is on for this mode: signatures are worth noting even while
  // the recording is in the builder (they are deferred the next time).
  bool deferral_enabled() const { return mode_ != Mode::kDeferAll && defer_lowering_; }

  // `v` as a deferred op's input; a materialized value's buffer becomes an
  // external input (checked to be on the recording's device).
  TraceRef trace_ref(const ValuePtr& v);
  // The device buffer of a host scalar (one per distinct dtype, bits and
  // device, reused) and a reference to it as an external input.
  pjrt::BufferPtr scalar_buffer(hlo::ElementType dtype, const ScalarBits& bits);
  TraceRef trace_buffer(const pjrt::BufferPtr& buffer, hlo::ElementType dtype) {
    return trace_constant(buffer, hlo::TensorType{dtype, {}});
  }
  // A buffer the caller keeps (a host scalar's, a compiled graph's constant)
  // as an external input of its own at every use, never donated.
  TraceRef trace_constant(const pjrt::BufferPtr& buffer, const hlo::TensorType& type);
  // A pending value the op being deferred produces, and its trace index.
  ValuePtr placeholder(const hlo::TensorType& type, uint32_t* index);
  // Appends an op whose key covers its lowering's inputs and their bindings.
  void defer(DeferredPtr op, uint64_t key);
  // Identifies the current recording (after begin): renewed at every flush.
  uint64_t recording_epoch() const { return r_->epoch; }
  // For DeferredOp::lower: the node of an input; a result's node.
  hlo::Value trace_input(TraceRef ref);
  void set_trace_result(uint32_t index, hlo::Value node);
  // TORCH_TPU_DEFER_LOWERING=0 turns deferral off (every op is lowered as
  // it is recorded).
  void set_defer_lowering(bool on) {
    auto guard = lock();
    flush_all(FlushCause::kModeChange);
    defer_lowering_ = on;
  }
  bool defer_lowering() const { return defer_lowering_; }

  Metrics& metrics() { return metrics_; }
  Cache& cache() { return *cache_; }
  // Empties the compile cache (and its directory if `disk`); compiles after
  // it start the per-site recompilation counts over.
  void clear_cache(bool disk);
  // Tests: the next flush of a recording with outputs fails with an
  // internal error (the recording must be dropped).
  void fail_next_flush() {
    auto guard = lock();
    fail_next_flush_ = true;
  }

 private:
  Engine();
  void reset_recording();

  std::recursive_mutex mu_;
  std::unique_ptr<pjrt::Client> client_;
  hlo::Target target_;  // built with client_ (target.h)
  std::unique_ptr<Cache> cache_;
  std::unique_ptr<Launcher> launcher_;  // launches and follows programs (launcher.h)
  std::unique_ptr<Warmup> warmup_;  // uses client_ and cache_: declared after them
  Metrics metrics_;
  Mode mode_ = Mode::kDeferNever;

  // The recordings, one per recording thread (recorder.h), and the one the
  // engine works on: the calling thread's, set by the entry points that
  // record or flush (begin, flush_program), or another thread's while a
  // value pending there is flushed (flush_recorder). Guarded by mu_.
  std::vector<std::unique_ptr<Recorder>> recorders_;
  Recorder* r_ = nullptr;
  uint64_t next_epoch_ = 1;
  // The calling thread's recorder (made on its first use; marked orphaned
  // when the thread ends) and the recorder `v` is pending in (null: none).
  Recorder& mine();
  Recorder* recorder_of(const DeviceValue& v);
  // Flushes `r` (another thread's recording, or an orphan) as if its thread
  // had asked; the caller's recorder stays current.
  void flush_recorder(Recorder& r, FlushCause cause);
  // Flushes every recording (a mode change) and drops the orphans.
  void flush_all(FlushCause cause);
  // Flushes and drops the recorders of threads that ended.
  void drop_orphans();
  std::atomic<int> orphans_{0};
  // Flushes the current recorder's program; a recording that fails before
  // it is consumed is dropped, its values abandoned.
  Program flush_current(FlushCause cause, bool with_text, bool run = true);
  Program flush_recording(FlushCause cause, bool with_text, bool run);
  bool fail_next_flush_ = false;  // fail_next_flush
  // The program result for a pending value's node: the value its flat array
  // was reshaped from, where the target keeps results shaped.
  hlo::Value shaped_result(hlo::Value flat) const;
  // Makes `v` usable by the current recording: a value pending in another
  // recording is flushed there; a failed value raises its error.
  void settle(const DeviceValue& v);
  // Warns once per site that Fused Eager flushed at its size cap there.
  void warn_size_cap(const std::string* site);
  std::set<const std::string*> size_cap_warned_;
  bool defer_lowering_ = true;
  // Compiled traces by key (deferred.h).
  std::unordered_map<uint64_t, TraceEntry> traces_;
  // The priors of a program's outputs (output i's, or null), copied from
  // them, and per buffer the references that only those priors hold: such a
  // buffer is still donated (see donatable).
  struct Priors {
    std::vector<ValuePtr> of;
    std::unordered_map<const pjrt::Buffer*, long> held;
  };
  // Lowers the deferred ops into the builder; the recording continues there.
  // `keep`: the ops stay in the recording (Recorder::lowered) for a run op
  // by op.
  void to_builder(bool keep = false);
  // The flush of a trace: launches a known one without lowering it (true),
  // or lowers it into the builder (keeping the ops when `keep`) and sets
  // `*key` for remember_trace.
  bool flush_trace(Program& p, uint64_t* key, const Priors& priors, bool keep);

  // ---- asynchronous compiles of Fused Eager (async_eager.cc) ----
  // A recording run op by op: its lowered ops, the buffers of its externals
  // and, per trace index, the value an op's program gave it.
  struct SplitRun {
    int device = 0;
    std::vector<DeferredPtr> ops;
    std::vector<int64_t> tags;               // each op's index in the recording's sites
    std::vector<pjrt::BufferPtr> externals;  // external i's buffer
    std::vector<hlo::TensorType> external_types;
    std::vector<bool> external_scalar;
    std::vector<ValuePtr> values;            // trace index → its value (null until written)
    std::vector<int32_t> last_use;           // external i's last reader (-1: none)
    std::vector<int32_t> trace_last_use;     // trace index i's last reader (-1: none)
    int32_t op = 0;                          // the op being run
    std::unordered_map<uint32_t, hlo::Value> bound;  // its externals, once bound
    std::vector<uint32_t> unread;            // its results no later op reads
  };
  // Whether a flush for `cause` keeps its deferred ops for a run op by op.
  bool may_split(FlushCause cause, bool run) const;
  // The recording's ops and inputs for run_split (before it is reset).
  std::unique_ptr<SplitRun> take_split(const Program& p);
  // Runs each op as a program of its own, in order; the recording's live
  // values get their buffers from them.
  void run_split(SplitRun& s, const std::vector<OpSite>& sites);
  // Records that the deferred op being lowered reads `index` (to_builder).
  void note_use(std::vector<int32_t>& last_use, uint32_t index) const;
  // trace_input and set_trace_result during run_split.
  hlo::Value split_input(TraceRef ref);
  void split_result(uint32_t index, hlo::Value node);
  // Queues the program's compile, unless it is queued, failed before (a
  // warning, once), or may run once (`once`: a reshaped recompilation or an
  // optimizer's first step, queued when it is seen again).
  void compile_async(const hlo::Fingerprint& key, std::string text, bool once);
  bool async_compile_ = false;
  SplitRun* split_ = nullptr;  // during run_split
  BackgroundPrograms background_programs_{metrics_};
  void remember_trace(uint64_t key, const hlo::Fingerprint& program, size_t num_outputs,
                      CheckListPtr checks);
  // Appends the checks' i32 result to `results` and lists them (null: none).
  CheckListPtr check_results(hlo::Values& results);
  bool checks_ = true;
  // A failed check that a launch found while reading its oldest pending
  // codes (a long loop without host reads): raised by the next host read or
  // synchronize, as the type it is there (IndexError), not from inside an op.
  std::optional<CheckFailed> found_failure_;
  // Runs p.exe on p.inputs and materializes p.outputs; a failure names the
  // recording's ops.
  void launch(Program& p, const std::vector<OpSite>& sites, Mode mode,
              const std::vector<ValuePtr>& priors);
  Priors take_priors(const std::vector<ValuePtr>& outputs);
  // Whether a program may reuse `buffer`'s memory: nothing but the recording
  // (and the priors kept for a failure) holds it.
  bool donatable(const pjrt::BufferPtr& buffer, const Priors& priors) const;
  // Values of a program that will not run: each takes its prior's buffer
  // back when it has a usable one, else remembers `why` for whoever reads it.
  static void abandon(const std::vector<ValuePtr>& values, const std::vector<ValuePtr>& priors,
                      const std::string& why);
  // abandon() for every live value of the current recording; then resets it.
  void abandon_recording(const std::string& why);
  // The parameter of a tensor's buffer: one per buffer.
  hlo::Value bind(const pjrt::BufferPtr& buffer, const hlo::TensorType& type,
                  int64_t external = -1);
  // A new parameter for a host scalar, even when an equal one is bound.
  hlo::Value bind_scalar(const pjrt::BufferPtr& buffer, const hlo::TensorType& type,
                         int64_t external = -1);

  // Scalars: one device buffer per distinct (dtype, bits, device), reused.
  std::map<std::tuple<int, uint64_t, uint64_t, int>, pjrt::BufferPtr> scalar_buffers_;

  // Which programs each call site compiles (recompile_watcher.h).
  RecompileWatcher watcher_;
  std::function<void(const std::string&)> warn_;
  bool donate_ = true;
  Recorder* guarded_ = nullptr;  // the capturing thread's recording (set_capture_guard)
  std::string guard_tripped_;

  // Raises `message` (an error found at a host read or synchronize) naming
  // the ops of the first program that failed after its launch.
  [[noreturn]] void raise_failure(const std::string& message, int code);
};

}  // namespace torch_tpu::engine
