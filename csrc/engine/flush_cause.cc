#include "flush_cause.h"

#include <iterator>

namespace torch_tpu::engine {

namespace {
struct Names {
  const char* name;
  const char* metric;
};
// In FlushCause's order.
constexpr Names kNames[] = {
    {"op", "flush_op"},
    {"loop_boundary", "flush_loop_boundary"},
    {"size_cap", "flush_size_cap"},
    {"device_change", "flush_device_change"},
    {"mode_change", "flush_mode_change"},
    {"other_thread", "flush_other_thread"},
    {"thread_exit", "flush_thread_exit"},
    {"host_read", "flush_host_read"},
    {"synchronize", "flush_synchronize"},
    {"stream_event", "flush_stream_event"},
    {"optimizer_step_begin", "flush_optimizer_step_begin"},
    {"optimizer_step", "flush_optimizer_step"},
    {"explicit", "flush_explicit"},
    {"capture_begin", "flush_capture_begin"},
    {"capture_end", "flush_capture_end"},
    {"graph_input", "flush_graph_input"},
    {"collective", "flush_collective"},
    {"send", "flush_send"},
    {"recv", "flush_recv"},
    {"async_eager", "flush_async_eager"},
    {"new_op", "flush_new_op"},
};
static_assert(std::size(kNames) == kNumFlushCauses,
              "a name per FlushCause");
}  // namespace

const char* name(FlushCause c) { return kNames[static_cast<size_t>(c)].name; }
const char* metric(FlushCause c) { return kNames[static_cast<size_t>(c)].metric; }

std::optional<FlushCause> flush_cause_named(std::string_view n) {
  for (size_t i = 0; i < std::size(kNames); ++i)
    if (n == kNames[i].name) return static_cast<FlushCause>(i);
  return std::nullopt;
}

bool requested(FlushCause c) {
  switch (c) {
    case FlushCause::kOptimizerStepBegin:
    case FlushCause::kOptimizerStep:
    case FlushCause::kHostRead:
    case FlushCause::kSynchronize:
    case FlushCause::kExplicit:
      return true;
    default:
      return false;
  }
}

}  // namespace torch_tpu::engine
