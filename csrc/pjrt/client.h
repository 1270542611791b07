// A PJRT client: the devices of one plugin, host transfers, compilation.
#pragma once

#include <atomic>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "buffer.h"
#include "compile_options.h"
#include "event.h"
#include "executable.h"
#include "plugin.h"

namespace torch_tpu::pjrt {

struct DeviceInfo {
  int id = 0;
  std::string kind;
  std::string description;
};

class Client {
 public:
  // `options` become PJRT_NamedValue create options (e.g. cpu_device_count).
  Client(std::shared_ptr<Plugin> plugin,
         const std::map<std::string, Attribute>& options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::shared_ptr<Plugin>& plugin() const { return plugin_; }
  PJRT_Client* get() const { return client_; }  // borrowed (collective.h)
  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }
  int device_count() const { return static_cast<int>(devices_.size()); }
  PJRT_Device* device(int index) const;
  DeviceInfo device_info(int index) const;
  // The bytes of memory device `index` may allocate, as the plugin reports
  // it; -1 when it does not (XLA:CPU: the host's memory).
  int64_t memory_limit(int index) const;

  // Copies `data` (dense, row-major) into a new buffer on device `index`.
  // The host memory may be reused as soon as this returns.
  BufferPtr buffer_from_host(const void* data, PJRT_Buffer_Type type,
                             const std::vector<int64_t>& dims, int index) const;
  // The same without waiting: the plugin may read `data` until `host_done`
  // fires (null: it already has), so the caller keeps it alive and unchanged
  // until then. Many uploads issued this way run concurrently; the buffer is
  // usable at once (programs reading it wait for its contents).
  struct Upload {
    BufferPtr buffer;
    std::shared_ptr<Event> host_done;
  };
  Upload buffer_from_host_async(const void* data, PJRT_Buffer_Type type,
                                const std::vector<int64_t>& dims, int index) const;

  // Compiles MLIR text (StableHLO) for one replica, one partition. `quick`:
  // with the backend's (LLVM's) optimizations off — about half the compile
  // time on XLA:CPU, slower code (tiered compilation, engine/cache.h).
  // `overrides` (the caller's options) are applied over ours; an unknown
  // name or a wrong value type fails in the plugin (an INVALID_ARGUMENT
  // pjrt::Error naming the option).
  ExecutablePtr compile(const std::string& mlir, bool quick = false,
                        const CompileOverrides& overrides = {}) const;
  // Compiles MLIR text under serialized `options` (an xla.CompileOptionsProto:
  // compile_options.h), e.g. for several replicas (collective.h).
  ExecutablePtr compile_with_options(const std::string& mlir, const std::string& options) const;
  ExecutablePtr deserialize(const std::string& bytes) const;

 private:
  Upload upload(const void* data, PJRT_Buffer_Type type, const std::vector<int64_t>& dims,
                int index, PJRT_HostBufferSemantics semantics) const;

  std::shared_ptr<Plugin> plugin_;  // keeps the API table loaded
  const PJRT_Api* api_;
  PJRT_Client* client_ = nullptr;
  std::vector<PJRT_Device*> devices_;  // borrowed from client_
  std::string platform_name_, platform_version_;
};

// The serialized xla.CompileOptionsProto for one replica and one partition,
// hand-encoded so that no protobuf library is needed.
std::string default_compile_options();
// The same with the backend's optimizations off (Client::compile's `quick`).
std::string quick_compile_options();

}  // namespace torch_tpu::pjrt
