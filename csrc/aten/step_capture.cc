#include "step_capture.h"

#include <thread>
#include <unordered_map>
#include <vector>

#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/intrusive_ptr.h>

#include "../engine/engine.h"
#include "generator.h"
#include "site.h"
#include "storage.h"

namespace torch_tpu::aten {

namespace step_capture_detail {
std::atomic<bool> capturing{false};
}

namespace {

// A storage the step read or wrote, with what it held before the step
// first touched it (null: never written).
struct Noted {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;
  engine::ValuePtr first;
  hlo::ElementType dtype = hlo::ElementType::kU8;
  size_t nbytes = 0;
};

// A generator the step draws from: its state when the step first drew, and
// that state as the step's inputs (fresh buffers: the parameters they bind
// are known by their buffer at the end).
struct GeneratorUse {
  at::Generator gen;
  uint64_t seed = 0, base = 0;
  uint64_t least = 0;  // the least offset the generator may be at next (draws advance it)
  engine::ValuePtr seed_in, offset_in;
  engine::ValuePtr next;  // end(): the offset after the step, a result
};

struct Capture {
  bool active = false;
  engine::Mode previous = engine::Mode::kDeferNever;
  std::vector<Noted> noted;
  std::unordered_map<const c10::StorageImpl*, size_t> index;  // into noted
  std::vector<GeneratorUse> generators;
  std::string refused;  // why the step cannot be captured (a host read)
  std::thread::id thread;  // the capturing thread
};

Capture& capture() {
  static Capture c;
  return c;
}

// Ends the capture state (engine lock held); the engine's mode comes back,
// which flushes what was recorded.
void finish(engine::Engine& e, Capture& c) {
  step_capture_detail::capturing = false;
  c.active = false;
  e.set_capture_guard(false);
  e.set_mode(c.previous);
  e.set_donation(true);
}

}  // namespace

void step_capture_detail::note(const c10::Storage& storage) {
  Capture& c = capture();
  if (!c.active || std::this_thread::get_id() != c.thread) return;
  auto [it, inserted] = c.index.try_emplace(storage.unsafeGetStorageImpl(), c.noted.size());
  if (!inserted) {
    if (!c.noted[it->second].storage.expired()) return;
    it->second = c.noted.size();  // a dead storage's address, reused
  }
  StorageState& st = state_of(storage);
  c.noted.push_back({storage.getWeakStorageImpl(), st.value, st.dtype, st.nbytes});
}

namespace {

void refuse(const std::string& what, const char* why_not) {
  {
    auto& e = engine::Engine::get();
    auto guard = e.lock();
    if (!capture().active || std::this_thread::get_id() != capture().thread) return;
  }
  const std::string* site = python_site();
  std::string why = what + (site->empty() ? "" : " at " + *site) + why_not;
  {
    auto& e = engine::Engine::get();
    auto guard = e.lock();
    if (capture().refused.empty()) capture().refused = why;
  }
  TORCH_CHECK(false, "tpu: ", why, ".");
}

}  // namespace

void step_capture_detail::refuse_host_read(const char* op) {
  refuse(op, " reads a device value on the host, which a captured step cannot do: the step "
             "must run on the device alone (no .item(), .cpu(), .tolist(), print of a tensor, "
             "or op whose result shape depends on data such as nonzero or boolean-mask "
             "indexing). Move the read out of the captured region, or keep it on the device "
             "(e.g. torch.where instead of a mask)");
}

bool step_capture_detail::generator_inputs(const at::Generator& gen, uint64_t seed,
                                           uint64_t offset, hlo::Value* seed_value,
                                           hlo::Value* offset_value) {
  auto& e = engine::Engine::get();
  auto guard = e.lock();
  Capture& c = capture();
  if (!c.active || std::this_thread::get_id() != c.thread) return false;
  GeneratorUse* u = nullptr;
  for (GeneratorUse& g : c.generators)
    if (g.gen.unsafeGetGeneratorImpl() == gen.unsafeGetGeneratorImpl()) u = &g;
  if (u == nullptr) {
    const hlo::TensorType type{hlo::ElementType::kU64, {}};
    int device = gen.device().index();
    c.generators.push_back({gen, seed, offset, offset, e.from_host(&seed, type, device),
                            e.from_host(&offset, type, device), nullptr});
    u = &c.generators.back();
  }
  bool rewound = seed != u->seed || offset < u->least;
  u->least = offset + 1;
  TORCH_CHECK(!rewound,
              "tpu: a tpu generator was reseeded or rewound during a step capture; seed it "
              "before the capture (replays draw from its state at each replay)");
  hlo::Builder& b = e.builder();
  *seed_value = e.use(u->seed_in);
  hlo::Value base = e.use(u->offset_in);
  *offset_value = offset == u->base
                      ? base
                      : b.add(base, b.constant_bits(hlo::ElementType::kU64, offset - u->base));
  return true;
}

std::atomic<bool> g_donation{true};

struct StepGraph::Impl {
  std::string text;
  pjrt::ExecutablePtr exe;  // null: the step recorded no device work
  // The same program with the parameters of `donated` (sources the step
  // rewrites with a result of its own) donated: a replay whose donated
  // buffers nothing else holds runs it, and the program may write its
  // results into their memory. Null: none (or donation off).
  pjrt::ExecutablePtr donating_exe;
  std::vector<size_t> donated;  // sources
  int device = 0;
  // Parameter i: the current contents of sources[source[i]], or constants[i]
  // (a host scalar, host data uploaded during the step) when source[i] < 0.
  std::vector<int> source;
  std::vector<pjrt::BufferPtr> constants;
  struct Source {
    c10::Storage storage;
    hlo::ElementType dtype;
    size_t nbytes;
  };
  std::vector<Source> sources;
  // A generator the step draws from. Its state is device state the program
  // reads (seed, offset on entry) and advances (offset + total, a result);
  // the buffers of the last replay are kept while the host's state agrees.
  struct Generator {
    at::Generator gen;
    uint64_t total = 0;       // what the step draws (its offset advance)
    size_t next_result = 0;   // the program's result: the offset after the step
    engine::ValuePtr offset;  // holds `offset_holds`
    uint64_t offset_holds = 0;
    pjrt::BufferPtr seed;     // holds `seed_holds`
    uint64_t seed_holds = 0;
  };
  std::vector<Generator> generators;
  // Parameters read from a generator: (parameter, generator, is its offset).
  struct GeneratorParam {
    size_t param, generator;
    bool offset;
  };
  std::vector<GeneratorParam> generator_params;
  // A storage the step rewrote and what it holds after a replay.
  struct Update {
    enum class Kind { kResult, kSource, kBuffer, kCleared } kind;
    c10::Storage storage;
    size_t index = 0;         // kResult: the program's result; kSource: sources[index] on entry
    pjrt::BufferPtr buffer;   // kBuffer
    hlo::ElementType dtype;
  };
  std::vector<Update> updates;
};

bool StepGraph::active() { return capture().active; }

void StepGraph::begin() {
  auto& e = engine::Engine::get();
  auto guard = e.lock();
  Capture& c = capture();
  TORCH_CHECK(!c.active, "tpu: a step capture is already running; end it (capture_end) or "
              "reset the graph that began it before capturing another");
  TORCH_CHECK(e.mode() != engine::Mode::kDeferAll,
              "tpu: a step cannot be captured inside torch.compile's graph capture");
  e.flush(engine::FlushCause::kCaptureBegin);
  c.noted.clear();
  c.index.clear();
  c.generators.clear();
  c.refused.clear();
  c.previous = e.mode();
  e.set_mode(engine::Mode::kDeferAll);
  // Inputs stay alive in the caller's tensors: nothing may be donated.
  e.set_donation(false);
  e.set_capture_guard(true);
  c.active = true;
  c.thread = std::this_thread::get_id();
  step_capture_detail::capturing = true;
}

void StepGraph::abort() {
  auto& e = engine::Engine::get();
  auto guard = e.lock();
  Capture& c = capture();
  if (!c.active) return;
  finish(e, c);
  c.noted.clear();
  c.index.clear();
  c.generators.clear();
}

std::shared_ptr<StepGraph> StepGraph::end() {
  auto& e = engine::Engine::get();
  auto guard = e.lock();
  Capture& c = capture();
  TORCH_CHECK(c.active, "tpu: capture_end() without a capture_begin()");
  std::string refused = !c.refused.empty() ? c.refused : e.capture_guard_tripped();
  if (!refused.empty()) {
    abort();
    TORCH_CHECK(false, "tpu: the step capture was abandoned (its ops ran eagerly): ", refused);
  }
  // Each generator's offset after the step: base + what the step drew.
  std::vector<uint64_t> totals;
  for (GeneratorUse& u : c.generators) {
    auto* g = u.gen.get<TpuGenerator>();
    uint64_t now, seed;
    {
      std::lock_guard<std::mutex> lock(u.gen.mutex());
      now = g->get_offset();
      seed = g->current_seed();
    }
    if (now < u.least || seed != u.seed) {
      abort();
      TORCH_CHECK(false, "tpu: the step capture was abandoned (its ops ran eagerly): a tpu "
                  "generator was reseeded or rewound during it; seed it before the capture "
                  "(replays draw from its state at each replay)");
    }
    totals.push_back(now - u.base);
  }
  step_capture_detail::capturing = false;
  e.set_capture_guard(false);
  for (size_t k = 0; k < c.generators.size(); ++k) {
    GeneratorUse& u = c.generators[k];
    e.begin(u.offset_in->device());
    hlo::Builder& b = e.builder();
    u.next = e.produce(b.add(e.use(u.offset_in),
                             b.constant_bits(hlo::ElementType::kU64, totals[k])));
  }
  engine::Program p;
  try {
    p = e.flush_program(engine::FlushCause::kCaptureEnd, /*with_text=*/true);
  } catch (...) {  // a compile error: the step's values carry it
    finish(e, c);
    c.noted.clear();
    c.index.clear();
    throw;
  }
  finish(e, c);
  std::vector<Noted> noted = std::move(c.noted);
  std::vector<GeneratorUse> generators = std::move(c.generators);
  c.noted.clear();
  c.index.clear();
  c.generators.clear();
  c.generators.clear();

  auto impl = std::make_shared<Impl>();
  impl->text = p.text;
  impl->exe = p.exe;
  impl->device = p.device;
  std::vector<c10::intrusive_ptr<c10::StorageImpl>> alive(noted.size());
  for (size_t k = 0; k < noted.size(); ++k) alive[k] = noted[k].storage.lock();

  // Parameters: a buffer a live storage held before the step touched it is
  // that storage's contents on each replay; any other is a constant.
  std::unordered_map<const pjrt::Buffer*, size_t> first_of;  // buffer -> noted index
  for (size_t k = 0; k < noted.size(); ++k)
    if (alive[k] && noted[k].first && noted[k].first->materialized())
      first_of.try_emplace(noted[k].first->buffer().get(), k);
  // Generators: what the step drew from each is what replays draw.
  std::unordered_map<const engine::DeviceValue*, size_t> result_of;
  for (size_t j = 0; j < p.outputs.size(); ++j) result_of.emplace(p.outputs[j].get(), j);
  std::unordered_map<const pjrt::Buffer*, std::pair<size_t, bool>> generator_of;
  for (size_t k = 0; k < generators.size(); ++k) {
    GeneratorUse& u = generators[k];
    auto r = result_of.find(u.next.get());
    TORCH_CHECK(r != result_of.end(), "tpu: internal error: a captured generator's offset is "
                "not a result of the step");
    impl->generators.push_back({u.gen, totals[k], r->second, u.offset_in, u.base,
                                u.seed_in->buffer(), u.seed});
    generator_of.emplace(u.seed_in->buffer().get(), std::make_pair(k, false));
    generator_of.emplace(u.offset_in->buffer().get(), std::make_pair(k, true));
    // As with CUDA graphs, capture does not advance the generator.
    std::lock_guard<std::mutex> lock(u.gen.mutex());
    u.gen.get<TpuGenerator>()->set_offset(u.base);
  }
  std::unordered_map<size_t, int> source_of;  // noted index -> sources index
  for (const pjrt::BufferPtr& b : p.inputs) {
    if (auto gp = generator_of.find(b.get()); gp != generator_of.end()) {
      impl->generator_params.push_back({impl->source.size(), gp->second.first,
                                        gp->second.second});
      impl->source.push_back(-1);
      impl->constants.push_back(nullptr);
      continue;
    }
    auto it = first_of.find(b.get());
    if (it == first_of.end()) {
      impl->source.push_back(-1);
      impl->constants.push_back(b);
      continue;
    }
    size_t k = it->second;
    auto [s, inserted] = source_of.try_emplace(k, static_cast<int>(impl->sources.size()));
    if (inserted)
      impl->sources.push_back({c10::Storage(alive[k]), noted[k].dtype, noted[k].nbytes});
    impl->source.push_back(s->second);
    impl->constants.push_back(nullptr);
  }

  // Updates: each live storage whose value the step replaced.
  std::string refuse;
  for (size_t k = 0; k < noted.size() && refuse.empty(); ++k) {
    if (!alive[k]) continue;
    StorageState& st = state_of(c10::Storage(alive[k]));
    if (st.value == noted[k].first) continue;
    if (st.nbytes != noted[k].nbytes) {
      refuse = "a storage was resized during the step";
      break;
    }
    using Kind = Impl::Update::Kind;
    Impl::Update u{Kind::kCleared, c10::Storage(alive[k]), 0, nullptr, st.dtype};
    if (!st.value) {
      u.kind = Kind::kCleared;
    } else if (auto r = result_of.find(st.value.get()); r != result_of.end()) {
      u.kind = Kind::kResult;
      u.index = r->second;
    } else if (st.value->materialized()) {
      auto f = first_of.find(st.value->buffer().get());
      auto s = f == first_of.end() ? source_of.end() : source_of.find(f->second);
      if (s != source_of.end()) {
        u.kind = Kind::kSource;
        u.index = static_cast<size_t>(s->second);
      } else {
        u.kind = Kind::kBuffer;
        u.buffer = st.value->buffer();
      }
    } else {
      refuse = "a tensor of the step is pending in another thread's recording";
      break;
    }
    impl->updates.push_back(std::move(u));
  }
  // As with CUDA graphs, capturing records the step; it does not apply it:
  // storages that held contents get them back. Those made (or first
  // written) during the step keep what the capture computed, so a second
  // capture that reads them (a backward graph reading what a forward graph
  // saved) finds them as its inputs.
  for (size_t k = 0; k < noted.size(); ++k) {
    if (!alive[k] || !noted[k].first) continue;
    StorageState& st = state_of(c10::Storage(alive[k]));
    if (st.nbytes != noted[k].nbytes) continue;
    st.value = noted[k].first;
    st.dtype = noted[k].dtype;
  }
  TORCH_CHECK(refuse.empty(), "tpu: the step cannot be captured: ", refuse);
  if (g_donation && impl->exe) add_donating_program(e, *impl);
  return std::make_shared<StepGraph>(impl);
}

void StepGraph::add_donating_program(engine::Engine& e, Impl& g) {
  // A source may be donated when the step replaces its storage's contents
  // with a result and no other storage takes its entry buffer.
  using Kind = Impl::Update::Kind;
  std::unordered_map<const c10::StorageImpl*, size_t> source_of;
  for (size_t s = 0; s < g.sources.size(); ++s)
    source_of.emplace(g.sources[s].storage.unsafeGetStorageImpl(), s);
  std::vector<bool> rewritten(g.sources.size(), false), taken(g.sources.size(), false);
  for (const Impl::Update& u : g.updates) {
    if (u.kind == Kind::kSource) taken[u.index] = true;
    auto it = source_of.find(u.storage.unsafeGetStorageImpl());
    if (u.kind == Kind::kResult && it != source_of.end()) rewritten[it->second] = true;
  }
  std::vector<size_t> params;
  for (size_t i = 0; i < g.source.size(); ++i) {
    int s = g.source[i];
    if (s >= 0 && rewritten[s] && !taken[s]) {
      params.push_back(i);
      g.donated.push_back(static_cast<size_t>(s));
    }
  }
  if (params.empty()) return;
  g.donating_exe = e.cache().get(hlo::with_donated_params(g.text, params));
}

void StepGraph::set_donation(bool on) { g_donation = on; }
bool StepGraph::donation() { return g_donation; }

void StepGraph::replay() const {
  Impl& g = *impl_;
  auto& e = engine::Engine::get();
  auto guard = e.lock();
  TORCH_CHECK(!capture().active, "tpu: a graph cannot be replayed while a step is captured");
  std::vector<pjrt::BufferPtr> entry(g.sources.size());
  for (size_t s = 0; s < g.sources.size(); ++s) {
    StorageState& st = state_of(g.sources[s].storage);
    TORCH_CHECK(st.value != nullptr && st.nbytes == g.sources[s].nbytes &&
                    st.dtype == g.sources[s].dtype,
                "tpu: a tensor the captured step reads was freed, resized or rewritten with "
                "another dtype since the capture; capture the step again (reset(), then "
                "capture)");
    entry[s] = e.buffer(st.value, engine::FlushCause::kGraphInput);
  }
  // Each generator's state now is what this replay draws from; the host
  // generator advances as the eager step would have advanced it.
  const hlo::TensorType u64{hlo::ElementType::kU64, {}};
  for (Impl::Generator& gen : g.generators) {
    uint64_t seed, offset;
    {
      std::lock_guard<std::mutex> lock(gen.gen.mutex());
      auto* tg = gen.gen.get<TpuGenerator>();
      seed = tg->current_seed();
      offset = tg->get_offset();
      tg->set_offset(offset + gen.total);
    }
    if (offset != gen.offset_holds) {
      gen.offset = e.from_host(&offset, u64, g.device);
      gen.offset_holds = offset;
    }
    if (seed != gen.seed_holds) {
      gen.seed = e.from_host(&seed, u64, g.device)->buffer();
      gen.seed_holds = seed;
    }
  }
  // Donation: every donated source's buffer is held by its storage's value
  // alone (and by launched programs reading it), so the program may take it.
  bool donate = g.donating_exe != nullptr;
  for (size_t k = 0; donate && k < g.donated.size(); ++k) {
    size_t s = g.donated[k];
    const engine::ValuePtr& v = state_of(g.sources[s].storage).value;
    const pjrt::BufferPtr& b = entry[s];
    donate = v.use_count() == 1 && b.use_count() == 2 + e.in_flight_refs(b.get());
  }
  std::vector<engine::ValuePtr> results;
  if (g.exe) {
    std::vector<pjrt::BufferPtr> args;
    args.reserve(g.source.size());
    for (size_t i = 0; i < g.source.size(); ++i)
      args.push_back(g.source[i] < 0 ? g.constants[i] : entry[g.source[i]]);
    for (const Impl::GeneratorParam& gp : g.generator_params) {
      Impl::Generator& gen = g.generators[gp.generator];
      args[gp.param] = gp.offset ? gen.offset->buffer() : gen.seed;
    }
    const pjrt::Executable& exe = donate ? *g.donating_exe : *g.exe;
    results = e.run(exe, args, g.device);
    // What replays allocate beyond their arguments (compiled statistics).
    e.metrics().count("step_replays");
    if (donate) e.metrics().count("step_replays_donating");
    if (exe.run_bytes() > 0) e.metrics().count("step_replay_bytes", exe.run_bytes());
  }
  for (Impl::Generator& gen : g.generators) {
    gen.offset = results.at(gen.next_result);
    gen.offset_holds += gen.total;
  }
  using Kind = Impl::Update::Kind;
  for (const Impl::Update& u : g.updates) {
    StorageState& st = state_of(u.storage);
    switch (u.kind) {
      case Kind::kResult: st.value = results[u.index]; break;
      case Kind::kSource: st.value = e.adopt(entry[u.index], g.device); break;
      case Kind::kBuffer: st.value = e.adopt(u.buffer, g.device); break;
      case Kind::kCleared: st.value = nullptr; break;
    }
    st.dtype = u.dtype;
  }
}

const std::string& StepGraph::text() const { return impl_->text; }
size_t StepGraph::num_inputs() const { return impl_->source.size(); }
size_t StepGraph::num_updates() const { return impl_->updates.size(); }

}  // namespace torch_tpu::aten
