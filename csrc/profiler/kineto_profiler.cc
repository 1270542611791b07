// The tpu's Kineto activity profiler. PyTorch (2.12+) forwards a factory
// registered with REGISTER_PRIVATEUSE1_PROFILER to Kineto when a profile is
// prepared; Kineto then configures a session of ours for every profile whose
// activities we serve, starts and stops it with the CPU trace, and merges
// what processTrace logs into the trace torch reads (prof.events(),
// key_averages()) and exports (export_chrome_trace).
//
//   host events  (PRIVATEUSE1_RUNTIME, part of ProfilerActivity.CPU): on the
//                thread that did them — tpu::launch, tpu::compile,
//                tpu::copy_to_device, tpu::copy_to_host, tpu::synchronize
//   device spans (CONCURRENT_KERNEL, ProfilerActivity.PrivateUse1): one per
//                launched program on device tpu:N, named for the program,
//                linked to the op that launched it (so key_averages() shows
//                it as that op's device time) and to its launch (a flow
//                arrow in the Chrome trace)
//
// TpuProfilerConfig (torch.tpu.profiler) passes host_tracer_level and
// device_tracer_level through the custom profiler config; 0 turns the
// matching events off.
#include "kineto_profiler.h"

#ifdef TORCH_TPU_KINETO

#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <libkineto.h>
#include <output_base.h>

#include <algorithm>
#include <map>
#include <string_view>
#include <unordered_map>

#include "collector.h"

namespace torch_tpu::profiler {

namespace {

using engine::trace::Kind;

struct Options {
  bool host = true;    // launches, compiles, copies, synchronizes
  bool device = true;  // programs on the device lanes
};

// The integer value of `key` in a TpuProfilerConfig string
// ("host_tracer_level:2,device_tracer_level:1,run_dir:\"/x,y\""), or -1.
int64_t level(const std::string& config, const std::string& key) {
  bool quoted = false;
  size_t start = 0;
  for (size_t i = 0; i <= config.size(); ++i) {
    if (i < config.size() && config[i] == '\\' && quoted) {
      ++i;
      continue;
    }
    if (i < config.size() && config[i] == '"') quoted = !quoted;
    if (i < config.size() && (quoted || config[i] != ',')) continue;
    std::string part = config.substr(start, i - start);
    start = i + 1;
    if (part.rfind(key + ":", 0) == 0) {
      try {
        return std::stoll(part.substr(key.size() + 1));
      } catch (const std::exception&) {
        return -1;
      }
    }
  }
  return -1;
}

// JSON string contents (Kineto writes quoted metadata as is).
std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    out += c;
  }
  return out;
}

// Whether Kineto may write `s` unquoted: a JSON number (digits, an optional
// fraction, no leading zero). A program key such as "04811313" is a string.
bool numeric(const std::string& s) {
  auto digits = [](std::string_view v) {
    return !v.empty() && v.find_first_not_of("0123456789") == std::string_view::npos;
  };
  size_t dot = s.find('.');
  std::string_view whole = std::string_view(s).substr(0, dot);
  if (!digits(whole) || (whole.size() > 1 && whole[0] == '0')) return false;
  return dot == std::string::npos || digits(std::string_view(s).substr(dot + 1));
}

void add_args(libkineto::GenericTraceActivity& a, const engine::trace::Event& e) {
  for (const auto& [key, value] : e.args) {
    if (numeric(value))
      a.addMetadata(key, value);
    else
      a.addMetadataQuoted(key, escaped(value));
  }
}

class Session final : public libkineto::IActivityProfilerSession {
 public:
  explicit Session(Options options) : options_(options) {}

  // Asked for neither (TpuProfilerConfig's levels at 0): nothing listens.
  void start() override {
    start_ns_ = engine::trace::now_ns();
    if (options_.host || options_.device) Collector::get().start();
  }
  void stop() override {
    if (options_.host || options_.device) events_ = Collector::get().stop(options_.device);
    end_ns_ = engine::trace::now_ns();
  }
  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, start_ns_, end_ns_);
  }
  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked, int64_t, int64_t) override {
    build(linked);
    for (const auto& a : buffer_->activities) a->log(logger);
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(0, libkineto::kExceedMaxPid, "tpu", "tpu:0");
  }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> lanes;
    for (int d : devices_) lanes.push_back(libkineto::ResourceInfo{0, 0, d, "programs"});
    return lanes;
  }
  // Kineto keeps the activities processTrace logged alive through this.
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

  void pushCorrelationId(uint64_t id) override { Collector::push_correlation(id); }
  void popCorrelationId() override { Collector::pop_correlation(); }

 private:
  libkineto::GenericTraceActivity& add(libkineto::ActivityType type, const std::string& name) {
    buffer_->emplace_activity(buffer_->span, type, name);
    return *buffer_->activities.back();
  }

  void build(const libkineto::getLinkedActivityCallback& linked) {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_ns_, end_ns_, "tpu");
    buffer_->gpuOpCount = -1;
    auto link = [&](uint64_t correlation) -> const libkineto::ITraceActivity* {
      return linked && correlation ? linked(static_cast<int32_t>(correlation)) : nullptr;
    };
    std::unordered_map<uint64_t, const Recorded*> launches;
    std::unordered_map<uint64_t, int64_t> seen_ready;  // launch -> first host read that waited
    std::vector<Recorded*> programs;
    for (Recorded& r : events_) {
      if (r.event.kind == Kind::kLaunch) launches[r.event.launch] = &r;
      if (r.event.kind == Kind::kProgram) programs.push_back(&r);
      if (r.event.kind == Kind::kReady) seen_ready.emplace(r.event.launch, r.event.end_ns);
    }
    for (const Recorded& r : events_) {
      if (!options_.host || r.event.kind == Kind::kProgram || r.event.kind == Kind::kReady)
        continue;
      auto& a = add(libkineto::ActivityType::PRIVATEUSE1_RUNTIME, r.event.name);
      a.startTime = r.event.begin_ns;
      a.endTime = r.event.end_ns;
      a.device = libkineto::processId();
      a.resource = a.threadId = r.thread;
      a.linked = link(r.correlation);
      if (r.event.kind == Kind::kLaunch && options_.device) {
        a.id = static_cast<int32_t>(r.event.launch);
        a.flow.id = static_cast<uint32_t>(r.event.launch);
        a.flow.type = libkineto::kLinkAsyncCpuGpu;
        a.flow.start = 1;
      }
      add_args(a, r.event);
    }
    if (!options_.device) return;
    // A device runs its programs in launch order: each starts when it was
    // launched or when the one before it on that device was done, whichever
    // is later, and ends when its outputs were ready, seen by its completion
    // callback or, if earlier, by a host read that waited for it or for a
    // later program on its device (the callback runs on a plugin thread,
    // which a loaded machine may schedule after the read). One whose
    // callback fired before its predecessor's, as independent programs on
    // XLA:CPU's thread pool can, ends where that one ended.
    std::sort(programs.begin(), programs.end(),
              [](const Recorded* a, const Recorded* b) { return a->event.launch < b->event.launch; });
    std::vector<int64_t> ends(programs.size());
    std::map<int, int64_t> read_by;  // per device: the earliest read of a later program
    for (size_t i = programs.size(); i-- > 0;) {
      const engine::trace::Event& e = programs[i]->event;
      auto read = read_by.find(e.device);
      int64_t bound = read == read_by.end() ? e.end_ns : read->second;
      auto seen = seen_ready.find(e.launch);
      if (seen != seen_ready.end()) bound = std::min(bound, seen->second);
      if (seen != seen_ready.end() || read != read_by.end()) read_by[e.device] = bound;
      ends[i] = std::min(e.end_ns, bound);
    }
    std::map<int, int64_t> free_at;
    for (size_t i = 0; i < programs.size(); ++i) {
      const engine::trace::Event& e = programs[i]->event;
      int64_t& free = free_at[e.device];
      int64_t begin = std::max(e.begin_ns, free);
      free = std::max(begin, ends[i]);
      auto& a = add(libkineto::ActivityType::CONCURRENT_KERNEL, e.name);
      a.startTime = begin;
      a.endTime = free;
      a.device = e.device;
      a.resource = 0;
      a.id = static_cast<int32_t>(e.launch);
      auto launch = launches.find(e.launch);
      if (launch != launches.end()) a.linked = link(launch->second->correlation);
      a.flow.id = static_cast<uint32_t>(e.launch);
      a.flow.type = libkineto::kLinkAsyncCpuGpu;
      a.flow.start = 0;
      add_args(a, e);
      if (std::find(devices_.begin(), devices_.end(), e.device) == devices_.end())
        devices_.push_back(e.device);
    }
  }

  Options options_;
  int64_t start_ns_ = 0, end_ns_ = 0;
  std::vector<Recorded> events_;
  std::vector<int> devices_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

class TpuActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& types, const libkineto::Config& config) override {
    Options o;
    o.host = types.count(libkineto::ActivityType::PRIVATEUSE1_RUNTIME) > 0 &&
             level(config.getCustomConfig(), "host_tracer_level") != 0;
    o.device = types.count(libkineto::ActivityType::CONCURRENT_KERNEL) > 0 &&
               level(config.getCustomConfig(), "device_tracer_level") != 0;
    return std::make_unique<Session>(o);
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<libkineto::ActivityType>& types,
      const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_ = "tpu";
  std::set<libkineto::ActivityType> activities_{libkineto::ActivityType::PRIVATEUSE1_RUNTIME,
                                                libkineto::ActivityType::CONCURRENT_KERNEL};
};

REGISTER_PRIVATEUSE1_PROFILER(TpuActivityProfiler);

}  // namespace

bool registered() {
  return torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().hasFactory();
}

}  // namespace torch_tpu::profiler

#else  // torch without Kineto or without the PrivateUse1 profiler registry

namespace torch_tpu::profiler {
bool registered() { return false; }
}  // namespace torch_tpu::profiler

#endif
