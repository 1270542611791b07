// The launcher: runs compiled programs on the devices and follows them until
// they finish. A launched program's input buffers stay referenced until it
// is done (a buffer whose last reference drops while a program reads it
// makes PJRT_Buffer_Destroy wait); programs that fail after their launch
// (XLA:CPU allocates temporaries then) are named at the next host read or
// synchronize; the run-time checks' results wait here to be read. Callers
// hold the engine's lock, except where a method says otherwise.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../pjrt/client.h"
#include "deferred.h"
#include "metrics.h"
#include "mode.h"
#include "value.h"

namespace torch_tpu::engine {

// A run-time check of a launched program failed (an index out of range):
// reported at the next host read or synchronize, naming the op and its line.
struct CheckFailed : pjrt::Error {
  CheckFailed(std::string message, bool index_error)
      : pjrt::Error(std::move(message)), index_error(index_error) {}
  bool index_error;  // PyTorch raises IndexError for it, else RuntimeError
};

class Launcher {
 public:
  // `memory_limits[d]`: the bytes a program may allocate on device d (-1:
  // unknown). A program that needs more fails before launch, while its
  // inputs are intact: an asynchronous failure would find the buffers it
  // was donated gone.
  Launcher(pjrt::Client& client, Metrics& metrics, std::vector<int64_t> memory_limits)
      : client_(client), metrics_(metrics), memory_limits_(std::move(memory_limits)) {}

  // Launches `exe` on `inputs` on `device`; returns its output buffers.
  // `ops` (optional) are named if it fails after its launch; `blocking`
  // (Debug Eager) waits for it. A program the plugin ran inside the call
  // (XLA:CPU runs small ones on the calling thread) is done at return: its
  // outcome is noted at once and nothing of it is followed.
  std::vector<pjrt::BufferPtr> launch(const pjrt::Executable& exe,
                                      const std::vector<pjrt::BufferPtr>& inputs, int device,
                                      const std::vector<OpSite>* ops, Mode mode, bool blocking);
  // launch(), its outputs as materialized values.
  std::vector<ValuePtr> run(const pjrt::Executable& exe, const std::vector<pjrt::BufferPtr>& inputs,
                            int device, const std::vector<OpSite>* ops, Mode mode, bool blocking);

  // The references that launched, unfinished programs hold on `buffer`.
  // They are no reason not to donate it (PJRT orders a donation after the
  // reads already launched); counting them made donation — part of the
  // program — depend on whether earlier programs had finished.
  long in_flight_refs(const pjrt::Buffer* buffer) const {
    auto it = in_flight_refs_.find(buffer);
    return it == in_flight_refs_.end() ? 0 : it->second;
  }

  // A launched program's check results (`code`, an i32: the first violated
  // check or -1), read by verify(). Returns whether enough are pending that
  // the oldest should be read now (a long loop without host reads).
  bool add_checks(pjrt::BufferPtr code, CheckListPtr checks, std::vector<OpSite> sites);
  struct PendingCheck {
    pjrt::BufferPtr code;
    CheckListPtr checks;
    std::vector<OpSite> sites;
  };
  std::deque<PendingCheck> take_checks() { return std::exchange(pending_checks_, {}); }
  // Reads `pending` (waiting for their programs; call without the lock);
  // throws CheckFailed for the first violated check.
  static void verify(std::deque<PendingCheck>& pending, Metrics& metrics);

  // The completion events of the programs not known to be done.
  std::vector<std::shared_ptr<pjrt::Event>> unfinished();

  // synchronize(): take every launched program, wait for them without the
  // lock, then settle() them under it; a failure found is raised by
  // failure_context's caller.
  struct InFlight {
    std::shared_ptr<pjrt::Event> done;
    std::vector<pjrt::BufferPtr> inputs;
    std::vector<OpSite> ops;  // named if it fails (asynchronously)
    Mode mode;
  };
  std::deque<InFlight> take_in_flight() { return std::exchange(in_flight_, {}); }
  // Waits for each (no lock held); returns which failed.
  static std::vector<bool> await(const std::deque<InFlight>& launches);
  void settle(std::deque<InFlight>& launches, const std::vector<bool>& failed);
  bool failed() const { return !failures_.empty(); }
  // The first unreported failure's message and code.
  std::pair<std::string, int> first_failure() const {
    return {failures_.front().message, failures_.front().code};
  }
  // What to add to an error found at a host read or synchronize: the ops of
  // the first program that failed after its launch; clears the failures.
  std::string failure_context();

 private:
  // Programs finish mostly in launch order: releases the inputs of the
  // finished ones at the front of the queue (one readiness query each).
  void release_finished();
  // Drops `l`'s references to its inputs (and their counts).
  void retire(InFlight& l);
  // Records `l`'s error if it failed; `l.done` must be ready.
  void note_failure(const InFlight& l);
  void note_failure(const pjrt::Event& done, const std::vector<OpSite>* ops, Mode mode);

  pjrt::Client& client_;
  Metrics& metrics_;
  std::vector<int64_t> memory_limits_;
  std::deque<InFlight> in_flight_;
  std::unordered_map<const pjrt::Buffer*, long> in_flight_refs_;
  std::deque<PendingCheck> pending_checks_;
  struct Failure {
    std::string message, ops;
    int code;
  };
  std::vector<Failure> failures_;
};

}  // namespace torch_tpu::engine
