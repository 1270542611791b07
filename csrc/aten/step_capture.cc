#include "step_capture.h"

#include <thread>
#include <unordered_map>
#include <vector>

#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/intrusive_ptr.h>

#include "../engine/engine.h"
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

struct Capture {
  bool active = false;
  engine::Mode previous = engine::Mode::kDeferNever;
  std::vector<Noted> noted;
  std::unordered_map<const c10::StorageImpl*, size_t> index;  // into noted
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

void step_capture_detail::refuse_random() {
  refuse("a random op", " draws from a tpu generator, which a captured step cannot do yet: "
                        "its seed and offset would be constants of the program, so every "
                        "replay would draw the same numbers. Capture a step without random "
                        "ops (e.g. dropout with p=0 or model.eval()), or run it eagerly");
}

struct StepGraph::Impl {
  std::string text;
  pjrt::ExecutablePtr exe;  // null: the step recorded no device work
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
  step_capture_detail::capturing = false;
  e.set_capture_guard(false);
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
  c.noted.clear();
  c.index.clear();

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
  std::unordered_map<size_t, int> source_of;  // noted index -> sources index
  for (const pjrt::BufferPtr& b : p.inputs) {
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
  std::unordered_map<const engine::DeviceValue*, size_t> result_of;
  for (size_t j = 0; j < p.outputs.size(); ++j) result_of.emplace(p.outputs[j].get(), j);
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
  return std::make_shared<StepGraph>(impl);
}

void StepGraph::replay() const {
  const Impl& g = *impl_;
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
  std::vector<engine::ValuePtr> results;
  if (g.exe) {
    std::vector<pjrt::BufferPtr> args;
    args.reserve(g.source.size());
    for (size_t i = 0; i < g.source.size(); ++i)
      args.push_back(g.source[i] < 0 ? g.constants[i] : entry[g.source[i]]);
    results = e.run(*g.exe, args, g.device);
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
