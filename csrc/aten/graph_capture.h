// Whole-graph capture for torch.compile: a graph runs once on real tpu
// tensors with nothing flushed (DEFER_ALL), becoming one program; later calls
// replay that program directly, passing only device buffers.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../engine/value.h"

namespace torch_tpu::aten {

class CapturedGraph {
 public:
  // Flushes pending work and starts recording everything until end().
  static void begin(const std::vector<at::Tensor>& inputs);
  // Ends the recording started by begin(): runs it (compiling once) and
  // returns a replayable graph, or null with `why` when the graph cannot be
  // replayed by buffer substitution (the caller then runs it eagerly).
  // `in_background`: the recording is neither compiled nor run (its results
  // and the inputs it rewrote get no values: capture on stand-ins); its
  // compile is queued on the cache's background worker and the graph
  // replays once that is done (ready()).
  static std::shared_ptr<CapturedGraph> end(const std::vector<at::Tensor>& inputs,
                                            const std::vector<at::Tensor>& outputs,
                                            std::string* why, bool in_background = false);
  // Abandons a capture (after an exception), restoring the eager mode.
  static void abort();

  // Whether `inputs` have the layout the graph was captured with.
  bool matches(const std::vector<at::Tensor>& inputs) const;
  // The background compile: "ready" (or compiled at once), "pending", or
  // "failed" (then error() holds the compiler's message).
  std::string status() const;
  std::string error() const;
  // Replays on `inputs` when they match (checked once) and the program is
  // ready, else nullopt.
  std::optional<std::vector<at::Tensor>> try_run(const std::vector<at::Tensor>& inputs) const;
  const std::string& text() const;
  // How a replay in Fused Eager relates to the thread's recording:
  // kTrain joins it (a training graph, forward with grad or backward: its
  // surroundings repeat every step); kFollow joins it only when it holds a
  // training graph's call already (the optimizer's no_grad update of that
  // step), else launches alone, as kNever always does (inference graphs,
  // whose eager surroundings change with every generated token, and bucketed
  // graphs, whose padding does: joining them would compile the graph again
  // inside each new program).
  enum class Fusion { kNever, kFollow, kTrain };
  void set_fusion(Fusion fusion);

  struct Impl;
  explicit CapturedGraph(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

 private:
  // In Fused Eager, records the replay into the calling thread's recording
  // (its results pending there) instead of launching it; false in the other
  // modes, or for a program that cannot be called as a function.
  bool record_call(const std::vector<at::Tensor>& inputs,
                   std::vector<engine::ValuePtr>* values) const;
  std::shared_ptr<Impl> impl_;
};

}  // namespace torch_tpu::aten
