// Where Fused Eager cuts a stream of recorded ops into programs, so that
// every iteration of a loop becomes the same (cached) program. Ops are
// identified by a 64-bit id (the address of their stable name). Two rules:
//
//  1. Repeat of the last body. A recording that repeats the op sequence of
//     the last program (or of the last loop body found by rule 2) is cut at
//     the same length. If that program ended at a flush the host asked for
//     (optimizer step, host read, synchronize), the repeat waits for that
//     request or the next op instead: cutting inside the step would keep
//     more temporaries alive and change the outputs.
//  2. A period of its own. A recording whose ops, from its start, repeat
//     with a period of at least kMinBody ops is cut after the second
//     repeat, and the period becomes the body rule 1 matches. A loop is
//     found this way whatever ended the program before it (a warm-up that
//     ended with another host read, a size cap).
//
// Rule 2 compares rolling hashes of the two halves at every even length
// (constant time per op) and confirms a match op by op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace torch_tpu::engine {

class LoopDetector {
 public:
  static constexpr size_t kMinBody = 16;

  enum class Cut {
    kNone,       // keep recording
    kNow,        // the op ended an iteration: flush
    kAtRequest,  // an iteration ended: flush at the host's request or the next op
  };
  // Appends an op of the recording; says whether it ends an iteration.
  Cut record(uint64_t op);
  // The recording is being flushed; `requested`: the host asked for it.
  void flushing(bool requested);
  // The recording was flushed or dropped: the next op starts a new one.
  void restart();
  // A cut waits for the host's request (or the next op).
  bool cut_pending() const { return pending_; }
  // Rule 2 found the period this recording is cut at.
  bool found() const { return found_ != 0; }
  // While held (inside optimizer.step(), which the hooks flush at both
  // ends), no op ends an iteration: the per-parameter pattern of a first
  // step's state creation is no loop, and cutting it made three programs
  // that never ran again. The held recording still becomes the last body.
  void hold(bool on) { held_ = on; }
  bool held() const { return held_; }

 private:
  size_t period() const;  // rule 2: a period of current_ ending now, or 0

  std::vector<uint64_t> body_, current_;
  // prefix_[i]: the polynomial hash of current_[0, i); pow_[i] = base^i.
  std::vector<uint64_t> prefix_{0}, pow_{1};
  bool matching_ = false;         // current_ is a prefix of body_
  bool body_by_request_ = false;  // body_'s program ended at a request
  bool pending_ = false;
  bool held_ = false;
  size_t found_ = 0;  // the period rule 2 found in this recording (0: none)
};

}  // namespace torch_tpu::engine
