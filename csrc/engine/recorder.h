// One thread's recording: the ops recorded since its last flush, as
// deferred ops (a trace) or lowered into a builder, with the loop detection
// that decides where Fused Eager cuts them into programs. Each thread that
// records ops has its own (Engine keeps them), so two threads in Fused Eager
// each build the program of their own loop instead of interleaving their ops
// into one recording that never repeats.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "../hlo/builder.h"
#include "../pjrt/buffer.h"
#include "deferred.h"
#include "loop_detector.h"
#include "mode.h"
#include "value.h"

namespace torch_tpu::engine {

struct Recorder {
  // Empty, deferred ops only, or lowered into the builder.
  enum class State { kEmpty, kTrace, kBuilder };
  State state = State::kEmpty;
  std::unique_ptr<hlo::Builder> builder = std::make_unique<hlo::Builder>();
  // Identifies the recording a pending value belongs to: unique across
  // recorders and renewed at every flush.
  uint64_t epoch = 0;
  int device = 0;
  size_t ops = 0;
  // The last ops recorded that join their consumer's program in Strict
  // Eager (Engine::end's joins_consumer), counted back to the last that
  // does not.
  size_t joining_ops = 0;
  std::vector<pjrt::BufferPtr> inputs;                        // parameter i's buffer
  std::unordered_map<const pjrt::Buffer*, hlo::Value> bound;  // buffer → parameter
  std::vector<std::weak_ptr<DeviceValue>> produced;           // candidates for outputs

  // Deferred lowering (deferred.cc): the ops, their external inputs (each
  // buffer once, in order of first use), the placeholders' nodes once
  // lowered, the running key.
  std::vector<DeferredPtr> deferred;
  std::vector<int64_t> deferred_tags;  // the op index of each deferred op
  std::vector<pjrt::BufferPtr> externals;
  std::vector<hlo::TensorType> external_types;
  // Host scalars (and a compiled graph's constants: trace_constant) are
  // externals of their own at every use, equal values too (values must never
  // decide the program); their parameter, once bound.
  std::vector<bool> external_scalar;
  std::vector<hlo::Value> external_nodes;
  // Parameter i's external index (-1: bound outside the trace).
  std::vector<int64_t> input_externals;
  // Whether parameter i is a host scalar or a graph's constant: never donated
  // (its buffer is shared by the scalar cache or the graph, and when the
  // cache starts over a donation bit would otherwise flip and make another
  // program).
  std::vector<bool> input_scalar;
  std::unordered_map<const pjrt::Buffer*, uint32_t> external_index;
  std::vector<hlo::Value> trace_nodes;
  uint64_t trace_key = 0;
  // The deferred ops a flush lowered, kept for a run op by op (Fused Eager's
  // asynchronous compiles, async_eager.cc), and per external the last of
  // them that read it (-1: none), so that run can let go of each in time and
  // keep a value read only by its own op out of that op's results.
  std::vector<DeferredPtr> lowered;
  std::vector<int32_t> external_last_use;
  std::vector<int32_t> trace_last_use;  // per trace index (placeholder), the same
  int32_t lowering_op = -1;  // the deferred op to_builder is lowering

  // The recording's ops and where they came from, for messages.
  std::vector<OpSite> op_sites;
  // The site of the last op recorded (a new one starts a run of code, see
  // Engine::run_).
  const std::string* last_site = nullptr;
  // Where Fused Eager cuts this thread's loop into programs.
  LoopDetector loop;
  // Inside optimizer.step() in Strict Eager: the step's ops are recorded as
  // one program (flushed at the step's end) instead of one program each.
  // Any flush but the size cap's ends it (the step's end, a host read,
  // synchronize, a mode change), so a step that raises before its end leaves
  // at most the ops up to the next such flush in one program.
  bool step_open = false;
  // Inside an optimizer's first step (it creates the optimizer's state), in
  // Strict or Fused Eager: its programs run once (the next step's update is
  // another program), so they compile quickly (the cache's quick tier) and
  // are never upgraded. Set by Engine::begin_optimizer_step,
  // cleared by the step's end or the next step's beginning.
  bool first_step = false;
  // The thread that recorded into it has ended: flushed and dropped by the
  // next recording thread.
  bool orphaned = false;
};

}  // namespace torch_tpu::engine
