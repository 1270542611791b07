#include "trace.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace torch_tpu::engine::trace {

namespace detail {
std::atomic<bool> g_on{false};
}

namespace {
// The sink outlives the process's launches (listen's contract), so a
// completion racing a listen(nullptr) may still reach it; the generation
// drops completions of programs launched under an earlier sink.
std::atomic<Sink*> g_sink{nullptr};
std::atomic<uint64_t> g_generation{0};
std::atomic<int64_t> g_pending{0};
std::atomic<uint64_t> g_next_launch{0};

// Output buffer -> the traced launch that produced it, until a host read
// finds it ready (read_ready); emptied when a sink comes or goes.
std::mutex g_outputs_mu;
std::unordered_map<const void*, uint64_t> g_outputs;

// The last cache miss on this thread, for the launch that follows it (under
// the same sink: a miss left by a profile that ended says nothing).
struct Miss {
  const char* tier = nullptr;
  int64_t ns = 0;
  uint64_t generation = 0;
};
thread_local Miss t_miss;

const char* mode_name(int mode) {
  static constexpr const char* kNames[] = {"Strict", "Debug", "Fused", "Captured"};
  return mode >= 0 && mode < 4 ? kNames[mode] : "Strict";
}

std::string hex(uint64_t v) {
  char s[20];
  std::snprintf(s, sizeof(s), "%08llx", static_cast<unsigned long long>(v & 0xffffffffull));
  return s;
}

uint64_t fnv(uint64_t h, const char* s) {
  for (; *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 1099511628211ull;
  return (h ^ 0xff) * 1099511628211ull;  // separates "ab","c" from "a","bc"
}

// "aten::mm, aten::add.Tensor, ... (+21 more)": the program's ops in order.
std::string op_summary(const std::vector<OpSite>& ops) {
  constexpr size_t kShown = 16;
  std::string s;
  for (size_t i = 0; i < ops.size() && i < kShown; ++i) {
    if (i) s += ", ";
    s += ops[i].op;
  }
  if (ops.size() > kShown) s += ", ... (+" + std::to_string(ops.size() - kShown) + " more)";
  return s;
}

// The program's name in the trace and in key_averages(): its mode and op
// for a one-op program; its mode, a hash of its op sequence and its length
// otherwise (the same loop body, the same name); a torch.compile graph by
// its executable.
std::string program_name(const std::vector<OpSite>* ops, int mode, const void* exe) {
  if (!ops) return "Graph " + hex(fnv(14695981039346656037ull, std::to_string(
                                          reinterpret_cast<uintptr_t>(exe)).c_str()));
  std::string m = mode_name(mode);
  if (ops->size() == 1) return m + " " + (*ops)[0].op;
  uint64_t h = 14695981039346656037ull;
  for (const OpSite& op : *ops) h = fnv(h, op.op);
  return m + " program " + hex(h) + " (" + std::to_string(ops->size()) + " ops)";
}
}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void listen(Sink* sink) {
  {
    std::lock_guard<std::mutex> lock(g_outputs_mu);
    g_outputs.clear();
  }
  g_generation.fetch_add(1);
  g_sink.store(sink);
  detail::g_on.store(sink != nullptr, std::memory_order_relaxed);
}

bool await_completions(int timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (g_pending.load() > 0) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

void emit(Event event) {
  if (Sink* sink = g_sink.load()) sink->record(std::move(event));
}

namespace {
// The miss this thread's next launch follows, if any (taken: the launch
// after it found its program in memory). A hit leaves no trace: it costs
// nothing while profiling is off.
Miss take_miss() {
  Miss m = t_miss;
  t_miss = Miss{};
  if (m.generation != g_generation.load()) m = Miss{};
  return m;
}

// A launch of `program` on `device` (`ops`: what it holds, when known;
// `miss`: the cache miss before it) and, at its completion, its device span.
void trace_launch(std::string program, const char* mode, const std::vector<OpSite>* ops,
                  const Miss& miss, int device, int64_t begin_ns,
                  const std::shared_ptr<pjrt::Event>& done,
                  const std::vector<pjrt::BufferPtr>& outputs) {
  Event launch;
  launch.kind = Kind::kLaunch;
  launch.device = device;
  launch.begin_ns = begin_ns;
  launch.launch = g_next_launch.fetch_add(1) + 1;
  launch.name = "tpu::launch";
  launch.args.emplace_back("program", program);
  launch.args.emplace_back("mode", mode);
  if (ops) {
    launch.args.emplace_back("ops", op_summary(*ops));
    launch.args.emplace_back("num_ops", std::to_string(ops->size()));
    for (const OpSite& op : *ops)
      if (op.site && !op.site->empty()) {
        launch.args.emplace_back("site", *op.site);
        break;
      }
  }
  launch.args.emplace_back("cache", miss.tier ? miss.tier : "memory");
  if (miss.tier) launch.args.emplace_back("compile_ms", std::to_string(miss.ns / 1e6));
  launch.args.emplace_back("device", "tpu:" + std::to_string(device));

  Event run;
  run.kind = Kind::kProgram;
  run.device = device;
  run.begin_ns = begin_ns;
  run.launch = launch.launch;
  run.name = std::move(program);
  for (const auto& a : launch.args)
    if (a.first != "program") run.args.push_back(a);
  launch.end_ns = now_ns();
  if (done && !outputs.empty()) {
    std::lock_guard<std::mutex> lock(g_outputs_mu);
    for (const auto& b : outputs) g_outputs[b->get()] = launch.launch;
  }
  emit(std::move(launch));
  if (!done) {
    run.end_ns = now_ns();
    run.args.emplace_back("completion", "unknown: the plugin gave no event");
    emit(std::move(run));
    return;
  }
  uint64_t generation = g_generation.load();
  g_pending.fetch_add(1);
  auto complete = [run = std::move(run), generation]() mutable {
    run.end_ns = now_ns();
    try {
      if (g_generation.load() == generation) emit(std::move(run));
    } catch (...) {  // on the plugin's thread: nothing may leave
    }
    g_pending.fetch_sub(1);
  };
  try {
    done->on_ready(std::move(complete));
  } catch (...) {
    g_pending.fetch_sub(1);  // never registered: no device span
  }
}

void trace_compile(uint64_t key, const char* tier, int64_t begin_ns, size_t text_bytes) {
  Event e;
  e.kind = Kind::kCompile;
  e.begin_ns = begin_ns;
  e.end_ns = now_ns();
  e.name = "tpu::compile";
  e.args.emplace_back("tier", tier);
  e.args.emplace_back("key", hex(key));
  e.args.emplace_back("program_bytes", std::to_string(text_bytes));
  t_miss = Miss{tier, e.end_ns - begin_ns, g_generation.load()};
  emit(std::move(e));
}

void trace_transfer(Kind kind, int device, int64_t bytes, int64_t begin_ns) {
  Event e;
  e.kind = kind;
  e.device = device;
  e.begin_ns = begin_ns;
  e.end_ns = now_ns();
  e.bytes = bytes;
  e.name = kind == Kind::kToHost ? "tpu::copy_to_host" : "tpu::copy_to_device";
  e.args.emplace_back("bytes", std::to_string(bytes));
  e.args.emplace_back("device", "tpu:" + std::to_string(device));
  emit(std::move(e));
}

void trace_synchronize(int64_t begin_ns, size_t programs) {
  Event e;
  e.kind = Kind::kSynchronize;
  e.begin_ns = begin_ns;
  e.end_ns = now_ns();
  e.name = "tpu::synchronize";
  e.args.emplace_back("programs_waited", std::to_string(programs));
  emit(std::move(e));
}

void trace_ready(const void* buffer) {
  Event e;
  {
    std::lock_guard<std::mutex> lock(g_outputs_mu);
    auto it = g_outputs.find(buffer);
    if (it == g_outputs.end()) return;
    e.launch = it->second;
    g_outputs.erase(it);  // a later read saw it ready later
  }
  e.kind = Kind::kReady;
  e.begin_ns = e.end_ns = now_ns();
  emit(std::move(e));
}
}  // namespace

// The hooks run in the middle of the engine's work (between a launch and
// its bookkeeping, before a compiled executable is cached): a profiler's
// failure (out of memory while it records) must not undo that work, so
// none leaves them. The event is lost.
void launched(const std::vector<OpSite>* ops, int mode, const void* exe, int device,
              int64_t begin_ns, const std::shared_ptr<pjrt::Event>& done,
              const std::vector<pjrt::BufferPtr>& outputs) noexcept {
  try {
    trace_launch(program_name(ops, mode, exe), ops ? mode_name(mode) : "Graph", ops, take_miss(),
                 device, begin_ns, done, outputs);
  } catch (...) {
  }
}

void launched_replicated(const std::string& what, const std::vector<int>& devices,
                         int64_t begin_ns,
                         const std::vector<std::shared_ptr<pjrt::Event>>& done) noexcept {
  try {
    Miss miss = take_miss();  // one program, compiled for every device
    for (size_t i = 0; i < devices.size(); ++i)
      trace_launch("Collective " + what, "Collective", nullptr, miss, devices[i], begin_ns,
                   i < done.size() ? done[i] : nullptr, {});
  } catch (...) {
  }
}

void compiled(uint64_t key, const char* tier, int64_t begin_ns, size_t text_bytes) noexcept {
  try {
    trace_compile(key, tier, begin_ns, text_bytes);
  } catch (...) {
  }
}

void transfer(Kind kind, int device, int64_t bytes, int64_t begin_ns) noexcept {
  try {
    trace_transfer(kind, device, bytes, begin_ns);
  } catch (...) {
  }
}

void synchronized(int64_t begin_ns, size_t programs) noexcept {
  try {
    trace_synchronize(begin_ns, programs);
  } catch (...) {
  }
}

void read_ready(const void* buffer) noexcept {
  try {
    trace_ready(buffer);
  } catch (...) {
  }
}

}  // namespace torch_tpu::engine::trace
