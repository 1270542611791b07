// Engine host transfers: one array at a time (waiting) and batches (every
// copy issued before any is awaited).
#include "transfers.h"

#include <cstring>
#include <optional>
#include <string>

#include "engine.h"
#include "trace.h"

namespace torch_tpu::engine {

bool Transfers::ready() const {
  for (const auto& d : done)
    if (d && !d->is_ready()) return false;
  return true;
}

void Transfers::drain() noexcept {
  for (size_t i = 0; i < done.size(); ++i) {
    bool failed = false;
    if (done[i]) {
      try {
        done[i]->await();
      } catch (...) {
        failed = true;
      }
    }
    if (i < direct.size() && direct[i].src && !failed) {
      try {
        copy_direct(direct[i]);
      } catch (...) {
      }
    }
  }
  direct.clear();
  awaited = true;
}

void Transfers::copy_direct(const Direct& d) {
  const void* memory = d.src->device_memory();
  if (memory == nullptr) throw pjrt::Error("internal: a host-memory buffer without an address");
  if (d.dst.bytes > 0) std::memcpy(d.dst.data, memory, d.dst.bytes);
}

namespace {

// Host-memory buffers up to this size are read on the calling thread (a
// thread hand-off costs more than such a copy); larger ones keep the
// plugin's copy, whose thread pool copies a batch's arrays side by side.
// Measured (benchmarks/transfers.py, XLA:CPU, 2 cores): 64 x 1 KiB read one
// by one 6.2 -> 0.6 ms, batched 0.96 -> 0.47 ms; 16 x 4 MiB batched on the
// reading thread 13.8 -> 28.2 ms, hence the bound.
constexpr size_t kDirectReadMax = size_t{1} << 20;

std::string copying(int64_t bytes, int device) {
  return "\n  (copying " + std::to_string(bytes) + " bytes to tpu:" + std::to_string(device) + ")";
}

}  // namespace

ValuePtr Engine::from_host(const void* data, const hlo::TensorType& type, int device) {
  auto guard = lock();
  auto v = std::make_shared<DeviceValue>(type, device);
  int64_t bytes = type.numel() * static_cast<int64_t>(element_size(type.dtype));
  int64_t traced = trace::on() ? trace::now_ns() : 0;
  try {
    v->buffer_ = client_->buffer_from_host(data, buffer_type(type.dtype), type.shape, device);
  } catch (const pjrt::Error& err) {
    pjrt::raise(std::string(err.what()) + copying(bytes, device), err.code());
  }
  metrics_.count("transfers_to_device");
  metrics_.count("bytes_to_device", bytes);
  if (traced) trace::transfer(trace::Kind::kToDevice, device, bytes, traced);
  return v;
}

void Engine::to_host(const ValuePtr& v, void* dst, size_t bytes) {
  Transfers t = download({v}, {HostSpan{dst, bytes}});
  await(t);
}

Transfers Engine::upload(const std::vector<HostArray>& arrays, std::vector<ValuePtr>* values) {
  auto guard = lock();
  Transfers t;
  t.start = std::chrono::steady_clock::now();
  t.traced_ns = trace::on() ? trace::now_ns() : 0;
  values->clear();
  values->reserve(arrays.size());
  for (const HostArray& a : arrays) {
    int device = a.device;
    auto v = std::make_shared<DeviceValue>(a.type, device);
    int64_t bytes = a.type.numel() * static_cast<int64_t>(element_size(a.type.dtype));
    pjrt::Client::Upload up;
    try {
      // XLA:CPU's "transfer" is a memcpy: under the asynchronous semantics it
      // hands large ones to its thread pool, which made a batch of 64 x 256
      // KiB 1.4-2.8x slower than copying each on this thread (2 busy cores,
      // benchmarks/transfers.py); a TPU's or GPU's DMA overlaps.
      if (target_.xla_cpu)
        up.buffer = client_->buffer_from_host(a.data, buffer_type(a.type.dtype), a.type.shape, device);
      else
        up = client_->buffer_from_host_async(a.data, buffer_type(a.type.dtype), a.type.shape, device);
    } catch (const pjrt::Error& err) {
      t.drain();  // the uploads issued so far still read their host memory
      pjrt::raise(std::string(err.what()) + copying(bytes, device), err.code());
    }
    v->buffer_ = std::move(up.buffer);
    t.done.push_back(std::move(up.host_done));
    t.bytes.push_back(bytes);
    t.devices.push_back(device);
    values->push_back(std::move(v));
  }
  return t;
}

Transfers Engine::download(const std::vector<ValuePtr>& values, const std::vector<HostSpan>& dsts) {
  if (values.size() != dsts.size())
    throw pjrt::Error("internal: download of " + std::to_string(values.size()) + " values into " +
                      std::to_string(dsts.size()) + " host spans");
  watcher_.new_run();
  // The first pending value flushes its recording; the others of it are
  // materialized by then.
  std::vector<pjrt::BufferPtr> buffers;
  buffers.reserve(values.size());
  for (const auto& v : values) buffers.push_back(buffer(v, FlushCause::kHostRead));
  Transfers t;
  t.to_host = true;
  t.start = std::chrono::steady_clock::now();
  t.traced_ns = trace::on() ? trace::now_ns() : 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    std::shared_ptr<pjrt::Event> done;
    Transfers::Direct direct;
    try {
      if (target_.host_memory_buffers && dsts[i].bytes <= kDirectReadMax &&
          buffers[i]->on_device_size() == dsts[i].bytes) {
        done = buffers[i]->ready_event();
        direct = {buffers[i], dsts[i]};
      } else {
        done = buffers[i]->to_host_async(dsts[i].data, dsts[i].bytes);
      }
    } catch (const pjrt::Error& err) {
      t.drain();  // the copies issued so far still write their host memory
      raise_failure(err.what(), err.code());
    }
    t.done.push_back(std::move(done));
    t.direct.push_back(std::move(direct));
    if (t.traced_ns) t.sources.push_back(buffers[i]->get());
    t.bytes.push_back(static_cast<int64_t>(dsts[i].bytes));
    t.devices.push_back(values[i]->device_);
  }
  return t;
}

void Engine::await(Transfers& t) {
  if (t.awaited) return;
  t.awaited = true;
  std::optional<pjrt::Error> first;
  size_t failed = 0;
  for (size_t i = 0; i < t.done.size(); ++i) {
    if (!t.done[i]) continue;
    try {
      t.done[i]->await();  // a download waits for its producer; raises its error
    } catch (const pjrt::Error& err) {
      if (!first) {
        first = err;
        failed = i;
      }
    }
  }
  if (!first)
    for (const void* source : t.sources) trace::read_ready(source);
  for (size_t i = 0; i < t.direct.size() && !first; ++i) {
    const Transfers::Direct& d = t.direct[i];
    if (!d.src) continue;
    try {
      Transfers::copy_direct(d);
    } catch (const pjrt::Error& err) {
      first = err;
      failed = i;
    }
  }
  t.direct.clear();  // the buffers are read
  if (first) {
    if (t.to_host) raise_failure(first->what(), first->code());
    pjrt::raise(std::string(first->what()) + copying(t.bytes[failed], t.devices[failed]),
                first->code());
  }
  const char* dir = t.to_host ? "host" : "device";
  int64_t total = 0;
  for (size_t i = 0; i < t.bytes.size(); ++i) {
    total += t.bytes[i];
    if (t.traced_ns)
      trace::transfer(t.to_host ? trace::Kind::kToHost : trace::Kind::kToDevice, t.devices[i],
                      t.bytes[i], t.traced_ns);
  }
  metrics_.count(std::string("transfers_to_") + dir, static_cast<int64_t>(t.bytes.size()));
  metrics_.count(std::string("bytes_to_") + dir, total);
  if (t.to_host) {
    metrics_.time("transfer_to_host", std::chrono::duration<double>(
                                          std::chrono::steady_clock::now() - t.start).count());
    verify_checks();
  }
}

}  // namespace torch_tpu::engine
