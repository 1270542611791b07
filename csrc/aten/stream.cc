#include "stream.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include <c10/util/Exception.h>

#include "../engine/engine.h"
#include "../pjrt/event.h"
#include "device.h"

namespace torch_tpu::aten::streams {

namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

// This thread's current stream id per device index (0, the default, beyond).
thread_local std::vector<c10::StreamId> t_current;
std::atomic<c10::StreamId> g_next_stream{1};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// When the programs an event captured had all finished: each one's
// completion callback (a plugin thread) lowers `remaining` and raises `done`.
struct Timing {
  std::mutex mu;
  std::condition_variable cv;
  int remaining = 0;
  int64_t done_ns = 0;

  void finished_one() {
    std::lock_guard<std::mutex> g(mu);
    done_ns = std::max(done_ns, now_ns());
    if (--remaining == 0) cv.notify_all();
  }
  int64_t wait() {
    std::unique_lock<std::mutex> g(mu);
    cv.wait(g, [&] { return remaining == 0; });
    return done_ns;
  }
};

struct EventState {
  std::vector<std::shared_ptr<pjrt::Event>> pending;  // the programs it waits for
  std::shared_ptr<Timing> timing;                      // null without enable_timing
};

void check_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == kType, "expected a tpu stream, got a stream of ",
              stream.device());
}

// Programs launched so far that have not finished.
std::vector<std::shared_ptr<pjrt::Event>> unfinished() {
  auto pending = engine::Engine::get().mark();
  pending.erase(std::remove_if(pending.begin(), pending.end(),
                               [](const auto& e) { return e->is_ready(); }),
                pending.end());
  return pending;
}

// Waits for `events`; a program's failure is left to the next host read or
// synchronize, which names its ops (the engine still tracks it).
void await_all(const std::vector<std::shared_ptr<pjrt::Event>>& events) {
  for (const auto& e : events) {
    try {
      e->await();
    } catch (const pjrt::Error&) {
    }
  }
}

}  // namespace

c10::Stream current(c10::Device device) {
  auto index = static_cast<size_t>(std::max<c10::DeviceIndex>(device.index(), 0));
  c10::StreamId id = index < t_current.size() ? t_current[index] : 0;
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, static_cast<c10::DeviceIndex>(index)),
                     id);
}

c10::Stream default_stream(c10::Device device) {
  return c10::Stream(c10::Stream::DEFAULT,
                     c10::Device(kType, std::max<c10::DeviceIndex>(device.index(), 0)));
}

c10::Stream create(c10::Device device) {
  if (device.index() >= 0) check_device(device.index());
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(kType, std::max<c10::DeviceIndex>(device.index(), 0)),
                     g_next_stream.fetch_add(1));
}

c10::Stream exchange(c10::Stream stream) {
  check_stream(stream);
  if (stream.device_index() >= 0) check_device(stream.device_index());
  c10::Stream old = current(stream.device());
  auto index = static_cast<size_t>(std::max<c10::DeviceIndex>(stream.device_index(), 0));
  if (t_current.size() <= index) t_current.resize(index + 1, 0);
  t_current[index] = stream.id();
  return old;
}

bool query() { return unfinished().empty(); }

void synchronize() { engine::Engine::get().synchronize(); }

void record(void** event, const c10::Stream& stream, c10::EventFlag flag) {
  check_stream(stream);
  if (*event == nullptr) *event = new EventState();
  auto* state = static_cast<EventState*>(*event);
  state->pending = unfinished();
  state->timing.reset();
  if (flag != c10::EventFlag::BACKEND_DEFAULT) return;  // enable_timing=False
  auto timing = std::make_shared<Timing>();
  timing->done_ns = now_ns();
  timing->remaining = static_cast<int>(state->pending.size());
  for (const auto& e : state->pending) {
    try {
      e->on_ready([timing] { timing->finished_one(); });
    } catch (const pjrt::Error&) {
      timing->finished_one();  // a plugin without completion callbacks: the record's time
    }
  }
  state->timing = std::move(timing);
}

bool query(void* event) {
  auto* state = static_cast<EventState*>(event);
  auto& p = state->pending;
  // Programs finish mostly in order: drop the finished ones from the front.
  while (!p.empty() && p.front()->is_ready()) p.erase(p.begin());
  return std::all_of(p.begin(), p.end(), [](const auto& e) { return e->is_ready(); });
}

void synchronize(void* event) {
  auto* state = static_cast<EventState*>(event);
  await_all(state->pending);
  state->pending.clear();
}

double elapsed_ms(void* start, void* end) {
  auto* a = static_cast<EventState*>(start);
  auto* b = static_cast<EventState*>(end);
  TORCH_CHECK(a->timing && b->timing,
              "Both events must be recorded with enable_timing=True to measure elapsed time.");
  return static_cast<double>(b->timing->wait() - a->timing->wait()) / 1e6;
}

void destroy(void* event) noexcept { delete static_cast<EventState*>(event); }

}  // namespace torch_tpu::aten::streams
