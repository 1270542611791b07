// Sends and receives on the device-native transport (native.h): a mailbox
// of posted, unmatched transfers per group. A send matches the oldest
// receive posted at its destination for its tag whose source is the sender
// or any rank, and a receive the oldest such send, so messages between two
// ranks with one tag arrive in the order they were sent. The second of the
// pair to be posted runs one program over both devices — a
// `collective_permute` from replica 0 (the sender) to replica 1 (the
// receiver), or a copy when both ends share a device — and both Works
// complete. The receiver brings its own tensors as its operands (a program
// takes the same arguments on every replica) and writes the result into
// them on wait(), on its own thread.
#include <c10/util/Exception.h>

#include <set>
#include <sstream>

#include "../aten/storage.h"
#include "../aten/tensor_io.h"
#include "../engine/engine.h"
#include "../pjrt/collective.h"
#include "native.h"

namespace torch_tpu::distributed {

struct NativeGroup::Transfer {
  bool sends = false;
  int rank = -1;   // who posted it
  int peer = -1;   // the destination of a send; the source of a receive (-1: any)
  int tag = 0;
  int device = -1;
  hlo::ElementType dtype = hlo::ElementType::kF32;
  std::vector<int64_t> numels;
  std::string invalid;                    // non-empty: this end's call is wrong
  std::vector<pjrt::BufferPtr> operands;  // this end's replica's arguments
  // Set when the pair ran (under the group's mutex):
  bool matched = false, done = false;
  int source = -1;  // the sender's rank (a receive from any source learns it here)
  std::string error;
  std::vector<pjrt::BufferPtr> received;  // a receive's results

  std::string describe() const {
    std::ostringstream s;
    s << (sends ? "send from rank " : "recv at rank ") << rank
      << (sends ? " to rank " : " from ");
    if (sends || peer >= 0) s << (sends ? "" : "rank ") << peer;
    else s << "any rank";
    s << " (tag " << tag << ") of " << hlo::mlir_name(dtype) << " [";
    for (size_t i = 0; i < numels.size(); ++i) s << (i ? ", " : "") << numels[i];
    s << "] elements";
    return s.str();
  }
};

namespace {

[[noreturn]] void raise(const char* op, const std::string& what) {
  C10_THROW_ERROR(DistBackendError, c10::str("tpu_dist: ", op, " (device-native): ", what));
}

bool matches(const NativeGroup::Transfer& send, const NativeGroup::Transfer& recv) {
  return send.peer == recv.rank && (recv.peer < 0 || recv.peer == send.rank) &&
         send.tag == recv.tag;
}

int64_t bytes_of(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel() * t.element_size();
  return n;
}

// The Work of one end. A receive writes its tensors when first found done.
class P2PWork final : public c10d::Work {
 public:
  P2PWork(std::shared_ptr<NativeGroup> group, std::shared_ptr<NativeGroup::Transfer> t,
          std::vector<at::Tensor> tensors, std::chrono::milliseconds timeout, bool sends)
      : c10d::Work(t->rank, sends ? c10d::OpType::SEND : c10d::OpType::RECV),
        group_(std::move(group)),
        t_(std::move(t)),
        tensors_(std::move(tensors)),
        timeout_(timeout) {}

  bool isCompleted() override {
    if (!written_ && group_->finished(*t_)) complete();
    return written_;
  }
  bool isSuccess() const override { return written_; }
  bool wait(std::chrono::milliseconds timeout) override {
    if (!written_) {
      group_->await(*t_, timeout == kNoTimeout ? timeout_ : timeout);
      complete();
    }
    return true;
  }
  int sourceRank() const override { return t_->source; }
  std::vector<at::Tensor> result() override { return tensors_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    wait(kNoTimeout);
    auto future = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()));
    future->markCompleted(c10::IValue(tensors_));
    return future;
  }

 private:
  void complete() {
    const char* op = t_->sends ? "send" : "recv";
    if (!t_->error.empty()) raise(op, t_->error);
    auto& e = engine::Engine::get();
    if (!t_->sends) {
      for (size_t i = 0; i < tensors_.size(); ++i)
        aten::assign(tensors_[i],
                     e.adopt(std::move(t_->received.at(i)), tensors_[i].device().index()));
      t_->received.clear();
    }
    e.metrics().count("collectives_native");
    e.metrics().count("collective_bytes_native", bytes_of(tensors_));
    written_ = true;
  }

  std::shared_ptr<NativeGroup> group_;
  std::shared_ptr<NativeGroup::Transfer> t_;
  std::vector<at::Tensor> tensors_;
  std::chrono::milliseconds timeout_;
  bool written_ = false;
};

// This end's transfer: its call, and its operands when the call is valid.
std::shared_ptr<NativeGroup::Transfer> describe(bool sends, int rank, int peer, int tag,
                                                const std::vector<at::Tensor>& tensors) {
  auto t = std::make_shared<NativeGroup::Transfer>();
  t->sends = sends;
  t->rank = rank;
  t->peer = peer;
  t->tag = tag;
  t->source = sends ? rank : peer;
  if (tensors.empty()) {
    t->invalid = "no tensors";
    return t;
  }
  const at::Tensor& first = tensors[0];
  t->dtype = aten::to_hlo(first.scalar_type());
  t->device = first.device().index();
  for (const auto& x : tensors) {
    t->numels.push_back(x.numel());
    if (x.scalar_type() != first.scalar_type())
      t->invalid = c10::str("its tensors mix ", first.scalar_type(), " and ", x.scalar_type());
    else if (x.device() != first.device())
      t->invalid = "its tensors are on several devices";
  }
  if (t->invalid.empty())
    for (const auto& x : tensors)
      t->operands.push_back(engine::Engine::get().buffer(
          aten::flat_value(x), sends ? engine::FlushCause::kSend : engine::FlushCause::kRecv));
  return t;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> NativeGroup::send(int rank, int dst, int tag,
                                                 const std::vector<at::Tensor>& tensors,
                                                 std::chrono::milliseconds timeout) {
  return post(describe(true, rank, dst, tag, tensors), tensors, timeout);
}

c10::intrusive_ptr<c10d::Work> NativeGroup::recv(int rank, int src, int tag,
                                                 const std::vector<at::Tensor>& tensors,
                                                 std::chrono::milliseconds timeout) {
  return post(describe(false, rank, src, tag, tensors), tensors, timeout);
}

c10::intrusive_ptr<c10d::Work> NativeGroup::post(std::shared_ptr<Transfer> t,
                                                 std::vector<at::Tensor> tensors,
                                                 std::chrono::milliseconds timeout) {
  const bool sends = t->sends;
  std::shared_ptr<Transfer> other;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!broken_.empty()) raise(sends ? "send" : "recv", broken_);
    auto& theirs = sends ? recvs_ : sends_;
    for (auto it = theirs.begin(); it != theirs.end(); ++it) {
      if (sends ? matches(*t, **it) : matches(**it, *t)) {
        other = *it;
        theirs.erase(it);
        break;
      }
    }
    if (other) {
      t->matched = other->matched = true;
    } else {
      (sends ? sends_ : recvs_).push_back(t);
    }
  }
  if (other) {
    if (sends) transfer(*t, *other);
    else transfer(*other, *t);
  }
  return c10::make_intrusive<P2PWork>(shared_from_this(), std::move(t), std::move(tensors),
                                      timeout, sends);
}

void NativeGroup::transfer(Transfer& send, Transfer& recv) {
  std::string error;
  std::vector<pjrt::BufferPtr> received;
  if (!send.invalid.empty() || !recv.invalid.empty() || send.dtype != recv.dtype ||
      send.numels != recv.numels) {
    std::ostringstream msg;
    msg << "the " << send.describe();
    if (!send.invalid.empty()) msg << " (invalid: " << send.invalid << ")";
    msg << " and the matching " << recv.describe();
    if (!recv.invalid.empty()) msg << " (invalid: " << recv.invalid << ")";
    msg << " differ; a receive needs tensors of the sender's dtype and sizes";
    error = msg.str();
  } else {
    try {
      CollectiveSpec spec;
      spec.op = Collective::kPermute;
      spec.dtype = send.dtype;
      spec.size = send.device == recv.device ? 1 : 2;
      spec.in_numels = spec.out_numels = send.numels;
      std::vector<int> devices{send.device};
      std::vector<std::vector<PJRT_Buffer*>> args(spec.size);
      for (const auto& b : send.operands) args[0].push_back(b->get());
      if (spec.size == 2) {
        devices.push_back(recv.device);
        for (const auto& b : recv.operands) args[1].push_back(b->get());
      }
      pjrt::ReplicatedResult result =
          pjrt::execute_replicated(*native_program(spec, devices), args);
      for (auto& done : result.done)
        if (done) done->await();
      received = std::move(result.outputs.back());
    } catch (const std::exception& err) {
      error = c10::str("the program of the ", send.describe(), " failed: ", err.what());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  send.operands.clear();
  recv.operands.clear();
  send.error = recv.error = error;
  recv.received = std::move(received);
  recv.source = send.rank;
  send.done = recv.done = true;
  cv_.notify_all();
}

bool NativeGroup::finished(const Transfer& t) {
  std::lock_guard<std::mutex> lock(mu_);
  return t.done;
}

void NativeGroup::await(Transfer& t, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!t.done) {
    if (t.matched) {  // the pair's program is running: it ends on its own
      cv_.wait(lock);
      continue;
    }
    if (cv_.wait_until(lock, deadline) != std::cv_status::timeout || t.done || t.matched)
      continue;
    auto& mine = t.sends ? sends_ : recvs_;
    for (auto it = mine.begin(); it != mine.end(); ++it)
      if (it->get() == &t) {
        mine.erase(it);
        break;
      }
    t.error = c10::str("the ", t.describe(), " timed out after ", timeout.count(),
                       " ms: no matching ", t.sends ? "recv" : "send", " was posted");
    t.done = true;
  }
}

}  // namespace torch_tpu::distributed
