// Programs that run on several devices at once, one replica per device: the
// cross-device collectives (all_reduce, all_gather, ...) of a client whose
// plugin runs them (XLA:CPU across the devices of one client, libtpu).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "client.h"

namespace torch_tpu::pjrt {

// The serialized CompileOptionsProto for `device_ids.size()` replicas, one
// partition, replica i on the device with global id device_ids[i].
std::string replicated_compile_options(const std::vector<int64_t>& device_ids);

// Compiles MLIR text for one replica per device: replica i runs on device
// `devices[i]` (indices into the client's addressable devices, distinct).
ExecutablePtr compile_replicated(const Client& client, const std::string& mlir,
                                 const std::vector<int>& devices);

struct ReplicatedResult {
  std::vector<std::vector<BufferPtr>> outputs;  // [replica][output]
  std::vector<std::shared_ptr<Event>> done;     // per replica; may hold nulls
};

// Launches every replica at once (args[i] for replica i) without waiting.
ReplicatedResult execute_replicated(const Executable& exe,
                                    const std::vector<std::vector<PJRT_Buffer*>>& args);

}  // namespace torch_tpu::pjrt
