#include "native.h"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <map>
#include <random>
#include <set>
#include <sstream>

#include "../aten/storage.h"
#include "../aten/tensor_io.h"
#include "../engine/engine.h"
#include "../engine/trace.h"
#include "../pjrt/collective.h"

namespace torch_tpu::distributed {

namespace {

// Identifies this process among the ranks' processes (pids repeat across
// machines and containers).
const std::string& process_token() {
  static const std::string token = [] {
    std::random_device rd;
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    return std::string(host) + "/" + std::to_string(getpid()) + "/" + std::to_string(rd()) +
           std::to_string(rd());
  }();
  return token;
}

// The groups of this process by id, as rank 0 published them on the store.
std::mutex registry_mu;
std::map<uint64_t, std::weak_ptr<NativeGroup>>& registry() {
  static std::map<uint64_t, std::weak_ptr<NativeGroup>> groups;
  return groups;
}

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string string_of(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

[[noreturn]] void raise(const char* op, const std::string& what) {
  C10_THROW_ERROR(DistBackendError, c10::str("tpu_dist: ", op, " (device-native): ", what));
}

}  // namespace

pjrt::ExecutablePtr native_program(const CollectiveSpec& spec, const std::vector<int>& devices) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::vector<int>>, pjrt::ExecutablePtr> cache;
  const std::string text = collective_program(spec);
  std::lock_guard<std::mutex> lock(mu);
  auto& exe = cache[{text, devices}];
  if (!exe) {
    auto& e = engine::Engine::get();
    int64_t traced = engine::trace::on() ? engine::trace::now_ns() : 0;
    exe = pjrt::compile_replicated(e.client(), text, devices);
    e.metrics().count("collective_programs_compiled");
    if (traced) engine::trace::compiled(engine::Cache::hash(text), "compiled", traced, text.size());
  }
  return exe;
}

NativeGroup::NativeGroup(int size) : size_(size), calls_(size) {}

std::shared_ptr<NativeGroup> NativeGroup::connect(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int size) {
  return offer(store, rank, size)();
}

NativeGroup::Join NativeGroup::offer(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size) {
  if (!store || size < 1) return [] { return std::shared_ptr<NativeGroup>(); };
  const std::string prefix = "tpu_dist_native/";
  store->set(prefix + "process/" + std::to_string(rank), bytes_of(process_token()));
  // Rank 0 makes the group before knowing whether the ranks are local (it
  // must not wait here); it is dropped when they are not.
  std::shared_ptr<NativeGroup> made;
  if (rank == 0) {
    made = std::make_shared<NativeGroup>(size);
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(registry_mu);
      static uint64_t next_id = 0;
      id = next_id++;
      registry()[id] = made;
    }
    store->set(prefix + "group", bytes_of(process_token() + " " + std::to_string(id)));
  }
  return [store, rank, size, made, prefix]() -> std::shared_ptr<NativeGroup> {
    for (int r = 0; r < size; ++r)
      if (string_of(store->get(prefix + "process/" + std::to_string(r))) != process_token())
        return nullptr;
    if (made) return made;
    std::string published = string_of(store->get(prefix + "group"));
    uint64_t id = std::stoull(published.substr(published.rfind(' ') + 1));
    std::lock_guard<std::mutex> lock(registry_mu);
    auto it = registry().find(id);
    return it == registry().end() ? nullptr : it->second.lock();
  };
}

bool NativeGroup::run(const char* op, int rank, std::chrono::milliseconds timeout,
                      Collective kind, const std::vector<at::Tensor>& inputs,
                      const std::vector<at::Tensor>& outputs, int64_t reduce, int64_t root,
                      const char* host_reason) {
  Call call;
  if (host_reason) call.host_reason = host_reason;
  CollectiveSpec& spec = call.spec;
  spec.op = kind;
  spec.reduce = reduce;
  spec.root = root;
  spec.size = size_;
  const at::Tensor& first = inputs.empty() ? outputs.at(0) : inputs[0];
  spec.dtype = aten::to_hlo(first.scalar_type());
  call.device = first.device().index();
  for (const auto& t : inputs) spec.in_numels.push_back(t.numel());
  for (const auto& t : outputs) spec.out_numels.push_back(t.numel());
  // The ranks that keep nothing bring sizes that match the root's call: a
  // gather's outputs, a scatter's inputs (its output tensor, `size` times).
  std::vector<at::Tensor> brought = inputs;
  if (kind == Collective::kGather && outputs.empty())
    spec.out_numels.assign(size_, spec.in_numels.empty() ? 0 : spec.in_numels[0]);
  if (kind == Collective::kScatter && inputs.empty() && !outputs.empty()) {
    brought.assign(size_, outputs[0]);
    spec.in_numels.assign(size_, outputs[0].numel());
  }
  for (const auto* list : {&inputs, &outputs}) {
    for (const auto& t : *list) {
      if (t.scalar_type() != first.scalar_type())
        call.invalid = c10::str("its tensors mix ", first.scalar_type(), " and ", t.scalar_type());
      else if (t.device() != first.device())
        call.host_reason = "tensors on several devices";
    }
  }
  if (call.invalid.empty() && call.host_reason.empty()) call.invalid = bad_sizes(spec);
  if (call.host_reason.empty()) call.host_reason = unsupported(spec);
  if (call.invalid.empty() && call.host_reason.empty())
    for (const auto& t : brought) call.inputs.push_back(
        engine::Engine::get().buffer(aten::flat_value(t), engine::FlushCause::kCollective));

  auto mine = meet(op, rank, std::move(call), timeout);
  if (!mine) return false;
  auto& e = engine::Engine::get();
  const bool keeps = kind != Collective::kReduce || rank == root;  // a reduce: the root only
  for (size_t i = 0; keeps && i < outputs.size(); ++i)
    aten::assign(outputs[i], e.adopt(std::move((*mine)[i]), outputs[i].device().index()));
  int64_t bytes = 0;
  for (const auto& t : inputs) bytes += t.numel() * t.element_size();
  e.metrics().count("collectives_native");
  e.metrics().count("collective_bytes_native", bytes);
  return true;
}

std::optional<std::vector<pjrt::BufferPtr>> NativeGroup::meet(const char* op, int rank,
                                                              Call call,
                                                              std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.empty()) raise(op, broken_);
  const uint64_t generation = generation_;
  calls_[rank] = std::move(call);
  if (++arrived_ == size_) {
    std::vector<Call> calls(size_);
    calls.swap(calls_);
    arrived_ = 0;
    launching_ = true;
    lock.unlock();
    Outcome outcome = launch(op, calls);
    calls.clear();  // the inputs are released before the others resume
    lock.lock();
    outcome_ = std::move(outcome);
    launching_ = false;
    ++generation_;
    cv_.notify_all();
  } else {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (generation_ == generation && broken_.empty()) {
      if (cv_.wait_until(lock, deadline) != std::cv_status::timeout || launching_) continue;
      if (generation_ != generation || !broken_.empty()) break;
      std::ostringstream msg;
      msg << "timed out after " << timeout.count() << " ms waiting for rank(s)";
      for (int r = 0; r < size_; ++r)
        if (calls_[r].spec.size == 0) msg << " " << r;
      msg << " of " << size_ << " (rank " << rank << " called " << calls_[rank].spec.str()
          << "); the group cannot run collectives any more";
      broken_ = msg.str();
      cv_.notify_all();
    }
    if (generation_ == generation) raise(op, broken_);
  }
  if (!outcome_.error.empty()) raise(op, outcome_.error);
  if (outcome_.host) return std::nullopt;
  return std::move(outcome_.outputs[rank]);
}

NativeGroup::Outcome NativeGroup::launch(const char* op, std::vector<Call>& calls) {
  Outcome out;
  // A rank that asks for host-staged decides for all (the host path checks
  // that the calls agree); else every rank must make the same call.
  bool same = true, host = false;
  std::ostringstream msg;
  for (int r = 0; r < size_; ++r) {
    same = same && calls[r].spec == calls[0].spec && calls[r].invalid.empty();
    host = host || !calls[r].host_reason.empty();
  }
  if (host) {
    out.host = true;
    return out;
  }
  if (!same) {
    msg << "the ranks called different collectives or shapes; every rank must make the same "
           "call (same collective, dtype and sizes). ";
    for (int r = 0; r < size_; ++r) {
      msg << (r ? "; " : "") << "rank " << r << ": " << calls[r].spec.str();
      if (!calls[r].invalid.empty()) msg << " (invalid: " << calls[r].invalid << ")";
    }
    out.error = msg.str();
    return out;
  }
  std::vector<int> devices;
  std::set<int> distinct;
  for (const Call& c : calls) {
    devices.push_back(c.device);
    distinct.insert(c.device);
  }
  if (static_cast<int>(distinct.size()) != size_) {
    out.host = true;  // e.g. ranks that share a device: host-staged
    return out;
  }
  try {
    auto exe = native_program(calls[0].spec, devices);
    std::vector<std::vector<PJRT_Buffer*>> args(size_);
    for (int r = 0; r < size_; ++r)
      for (const auto& b : calls[r].inputs) args[r].push_back(b->get());
    int64_t traced = engine::trace::on() ? engine::trace::now_ns() : 0;
    pjrt::ReplicatedResult result = pjrt::execute_replicated(*exe, args);
    if (traced) engine::trace::launched_replicated(calls[0].spec.str(), devices, traced, result.done);
    for (auto& done : result.done)
      if (done) done->await();
    out.outputs = std::move(result.outputs);
  } catch (const std::exception& err) {
    out.error = c10::str("the program failed: ", err.what(), " (", calls[0].spec.str(), ")");
  }
  return out;
}

}  // namespace torch_tpu::distributed
