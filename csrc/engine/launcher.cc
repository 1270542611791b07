#include "launcher.h"

#include <chrono>

#include "element_types.h"
#include "trace.h"

namespace torch_tpu::engine {

namespace {
// Check results pending past this many are read at the next launch.
constexpr size_t kMaxPendingChecks = 256;
}  // namespace

std::vector<pjrt::BufferPtr> Launcher::launch(const pjrt::Executable& exe,
                                              const std::vector<pjrt::BufferPtr>& inputs,
                                              int device, const std::vector<OpSite>* ops,
                                              Mode mode, bool blocking) {
  std::vector<PJRT_Buffer*> args;
  args.reserve(inputs.size());
  for (const auto& b : inputs) args.push_back(b->get());
  release_finished();  // before this launch allocates
  int64_t needed = exe.run_bytes(), limit = memory_limits_.at(device);
  if (needed >= 0 && limit > 0 && needed > limit)
    throw pjrt::Error("RESOURCE_EXHAUSTED: out of memory on tpu:" + std::to_string(device) +
                          ": the program needs " + std::to_string(needed) +
                          " bytes for its results and temporaries; the device has " +
                          std::to_string(limit),
                      PJRT_Error_Code_RESOURCE_EXHAUSTED);
  auto start = std::chrono::steady_clock::now();
  int64_t traced = trace::on() ? trace::now_ns() : 0;
  pjrt::ExecuteResult result = exe.execute(args, client_.device(device));
  metrics_.count(Hot::kExecutions);
  if (traced)
    trace::launched(ops, static_cast<int>(mode), &exe, device, traced, result.done, result.outputs);
  if (result.done) {
    if (blocking) {
      result.done->await();
    } else if (result.done->is_ready()) {
      // Ran inside the call: as if released at once (a failure is named at
      // the next host read, as for any launched program).
      note_failure(*result.done, ops, mode);
    } else {
      for (const auto& b : inputs) ++in_flight_refs_[b.get()];
      in_flight_.push_back(
          InFlight{std::move(result.done), inputs, ops ? *ops : std::vector<OpSite>{}, mode});
    }
  }
  metrics_.time_launch(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return std::move(result.outputs);
}

std::vector<ValuePtr> Launcher::run(const pjrt::Executable& exe,
                                    const std::vector<pjrt::BufferPtr>& inputs, int device,
                                    const std::vector<OpSite>* ops, Mode mode, bool blocking) {
  std::vector<pjrt::BufferPtr> buffers = launch(exe, inputs, device, ops, mode, blocking);
  std::vector<ValuePtr> values;
  values.reserve(buffers.size());
  for (auto& buffer : buffers) {
    hlo::TensorType type = storage_type(*buffer);
    values.push_back(std::make_shared<DeviceValue>(std::move(type), device, std::move(buffer)));
  }
  return values;
}

bool Launcher::add_checks(pjrt::BufferPtr code, CheckListPtr checks, std::vector<OpSite> sites) {
  pending_checks_.push_back(PendingCheck{std::move(code), std::move(checks), std::move(sites)});
  return pending_checks_.size() > kMaxPendingChecks;
}

void Launcher::verify(std::deque<PendingCheck>& pending, Metrics& metrics) {
  // Every code's read is issued before any is awaited (a loop without host
  // reads leaves up to kMaxPendingChecks): one wait for all, not one each.
  // A code whose read fails belongs to a program that failed: its own error
  // is reported where its results are read.
  std::vector<int32_t> codes(pending.size(), -1);
  std::vector<std::shared_ptr<pjrt::Event>> reads(pending.size());
  std::vector<char> read(pending.size(), 1);
  for (size_t i = 0; i < pending.size(); ++i) {
    try {
      reads[i] = pending[i].code->to_host_async(&codes[i], sizeof(int32_t));
    } catch (const pjrt::Error&) {
      read[i] = 0;
    }
  }
  for (size_t i = 0; i < pending.size(); ++i) {
    try {
      if (read[i] && reads[i]) reads[i]->await();
    } catch (const pjrt::Error&) {
      read[i] = 0;
    }
  }
  for (size_t i = 0; i < pending.size(); ++i) {
    if (!read[i]) continue;
    const PendingCheck& c = pending[i];
    const int32_t code = codes[i];
    if (code < 0 || static_cast<size_t>(code) >= c.checks->messages.size()) continue;
    int64_t op = c.checks->ops[code];
    std::string where;
    if (op >= 0 && static_cast<size_t>(op) < c.sites.size()) {
      where = " (in " + std::string(c.sites[op].op);
      std::string site = c.sites[op].where();
      where += site.empty() ? ")" : " at " + site + ")";
    }
    metrics.count("check_failures");
    throw CheckFailed("tpu: device-side check failed: " + c.checks->messages[code] + where +
                          ". Checks run on the device and are reported at the next host read or "
                          "synchronize; torch_tpu.set_index_checks(False) or "
                          "TORCH_TPU_INDEX_CHECKS=0 turns them off.",
                      c.checks->index_errors[code]);
  }
}

std::vector<std::shared_ptr<pjrt::Event>> Launcher::unfinished() {
  release_finished();
  std::vector<std::shared_ptr<pjrt::Event>> pending;
  pending.reserve(in_flight_.size());
  for (const auto& l : in_flight_) pending.push_back(l.done);
  return pending;
}

std::vector<bool> Launcher::await(const std::deque<InFlight>& launches) {
  std::vector<bool> failed(launches.size(), false);
  for (size_t i = 0; i < launches.size(); ++i) {
    try {
      launches[i].done->await();
    } catch (const pjrt::Error&) {
      failed[i] = true;
    }
  }
  return failed;
}

void Launcher::settle(std::deque<InFlight>& launches, const std::vector<bool>& failed) {
  for (size_t i = 0; i < launches.size(); ++i) {
    if (failed[i]) note_failure(launches[i]);
    retire(launches[i]);
  }
}

std::string Launcher::failure_context() {
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (!it->done->is_ready()) {
      ++it;
      continue;
    }
    note_failure(*it);
    retire(*it);
    it = in_flight_.erase(it);
  }
  std::string context;
  if (!failures_.empty()) {
    context = "\n  it failed asynchronously, after its launch:\n" + failures_.front().ops;
    if (failures_.size() > 1)
      context += "\n  (" + std::to_string(failures_.size() - 1) + " later program(s) failed too)";
  }
  failures_.clear();
  return context;
}

void Launcher::release_finished() {
  while (!in_flight_.empty() && in_flight_.front().done->is_ready()) {
    note_failure(in_flight_.front());
    retire(in_flight_.front());
    in_flight_.pop_front();
  }
}

void Launcher::retire(InFlight& l) {
  for (auto& b : l.inputs) {
    auto it = in_flight_refs_.find(b.get());
    if (--it->second == 0) in_flight_refs_.erase(it);
  }
  l.inputs.clear();
}

void Launcher::note_failure(const InFlight& l) { note_failure(*l.done, &l.ops, l.mode); }

void Launcher::note_failure(const pjrt::Event& done, const std::vector<OpSite>* ops, Mode mode) {
  try {
    done.check_ready();
  } catch (const pjrt::Error& err) {
    std::string where = !ops || ops->empty() ? "  (in a program launched earlier)"
                                             : describe_ops(*ops, mode);
    if (failures_.size() < 8)
      failures_.push_back(Failure{err.what(), std::move(where), err.code()});
  }
}

}  // namespace torch_tpu::engine
