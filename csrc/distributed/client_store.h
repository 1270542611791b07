// The PJRT client's key-value store (pjrt/kv_store.h) fed by a c10d store,
// so that a plugin spanning processes (libtpu on a multi-host slice)
// exchanges what it needs through the job's own rendezvous (torchrun's
// TCPStore, or any store init_process_group was given). Keys are written
// as given: pass a PrefixStore to keep them apart from other users.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "../pjrt/kv_store.h"

namespace torch_tpu::distributed {

class ClientStore final : public pjrt::KeyValueStore {
 public:
  explicit ClientStore(c10::intrusive_ptr<c10d::Store> store);
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  void put(const std::string& key, const std::string& value) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

// Makes `store` the one the PJRT client is created with. Raises when the
// client already exists (it reads the store only when it is created).
void share_with_client(const c10::intrusive_ptr<c10d::Store>& store);

}  // namespace torch_tpu::distributed
