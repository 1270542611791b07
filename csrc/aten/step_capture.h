// Step capture: `torch.tpu.graph` / `torch.accelerator.Graph` on tpu. A step
// (forward, backward, optimizer update, zero_grad) runs once with nothing
// flushed (the engine in DEFER_ALL) and becomes ONE program. Which tensors
// it reads and which it writes is not declared: the storages the step reads
// or writes are noted as it records (tensor_io calls note_storage), so the
// program's inputs are the contents of the storages it read and its outputs
// the storages it rewrote. Replay passes their current device buffers and
// points the rewritten storages at the results (static addresses, as with
// CUDA graphs), with no PyTorch dispatch. As with CUDA graphs, capture
// records the step without applying it: the storages it rewrote get their
// contents from before the capture back, and the generators it drew from
// their offsets. Random ops read their generator's (seed, offset) as program
// inputs; each replay passes the generator's state at that replay and
// advances its host offset by what the step draws, so a replay draws what
// the same eager step would.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Storage.h>
#include <c10/macros/Macros.h>

#include <atomic>
#include <memory>
#include <string>

#include "../engine/engine.h"
#include "../hlo/builder.h"

namespace torch_tpu::aten {

namespace step_capture_detail {
// Whether a capture runs (on some thread; the slow paths check which).
extern std::atomic<bool> capturing;
void note(const c10::Storage& storage);
void refuse_host_read(const char* op);  // returns off the capturing thread
bool generator_inputs(const at::Generator& gen, uint64_t seed, uint64_t offset,
                      hlo::Value* seed_value, hlo::Value* offset_value);
}  // namespace step_capture_detail

inline bool any_capture() {
  return C10_UNLIKELY(step_capture_detail::capturing.load(std::memory_order_relaxed));
}

// Called where a storage's contents are read or replaced (engine lock held),
// before the change: a branch outside a capture. Only the capturing
// thread's reads and writes are the step's.
inline void note_storage(const c10::Storage& storage) {
  if (any_capture()) step_capture_detail::note(storage);
}
// Called before a device value is read on the host for `op`: on the
// capturing thread it raises, naming the op and its Python file:line.
inline void check_host_read(const char* op) {
  if (any_capture()) step_capture_detail::refuse_host_read(op);
}

// Called as a random op takes `gen`'s state (`seed`, `offset`: what it draws
// from) as program inputs. On the capturing thread it sets the two values
// the op reads and returns true: the seed and the offset become the step's
// generator inputs (the offset as the generator's offset on entry to the
// step plus what the step drew before this op), so each replay draws from
// the generator's state at that replay. Otherwise it returns false.
inline bool captured_generator_inputs(const at::Generator& gen, uint64_t seed, uint64_t offset,
                                      hlo::Value* seed_value, hlo::Value* offset_value) {
  return any_capture() &&
         step_capture_detail::generator_inputs(gen, seed, offset, seed_value, offset_value);
}

// One captured step.
class StepGraph {
 public:
  // Starts capturing (pending work is flushed first). Throws if a capture is
  // already running.
  static void begin();
  // Ends the capture begun here: compiles the step into one program, restores
  // the storages it rewrote, and returns the graph.
  static std::shared_ptr<StepGraph> end();
  // Abandons the capture (after an exception): what was recorded runs
  // eagerly, so the process is as if the step's ops ran without capture.
  static void abort();
  static bool active();

  // Launches the program on the current contents of the step's inputs and
  // points the storages it writes at the results.
  void replay() const;
  // The program's StableHLO text; its parameter and result counts; how many
  // storages replay updates.
  const std::string& text() const;
  size_t num_inputs() const;
  size_t num_updates() const;

  // Donation on replay (on by default; read at capture end): a step's
  // program is also compiled with the parameters of the storages it rewrites
  // with its own results donated, and a replay runs that program when
  // nothing but those storages holds their buffers, so the results may take
  // their memory. Off: results are always fresh allocations.
  static void set_donation(bool on);
  static bool donation();

  struct Impl;
  explicit StepGraph(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

 private:
  static void add_donating_program(engine::Engine& e, Impl& g);
  std::shared_ptr<Impl> impl_;
};

}  // namespace torch_tpu::aten

namespace torch_tpu::aten {

// Registers the tpu implementation of PyTorch's accelerator graph interface
// (`torch.accelerator.Graph`, `torch.tpu.TPUGraph`): step capture and replay
// (graph_impl.cc). Called once the device type is named `tpu`.
void register_graph_impl();

}  // namespace torch_tpu::aten
