#include "client_store.h"

#include <c10/util/Exception.h>

#include "../engine/engine.h"

namespace torch_tpu::distributed {

namespace {

std::string what_of(const std::exception& e) {
  if (auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

}  // namespace

ClientStore::ClientStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {
  TORCH_CHECK_VALUE(store_, "tpu_dist: the PJRT client's key-value store needs a c10d store");
}

std::string ClientStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  try {
    store_->wait({key}, timeout);
  } catch (const std::exception& e) {
    throw pjrt::KeyValueError(PJRT_Error_Code_DEADLINE_EXCEEDED,
                              "tpu_dist: the key '" + key + "' was not set within " +
                                  std::to_string(timeout.count()) + " ms (c10d store: " +
                                  what_of(e) + ")");
  }
  std::vector<uint8_t> value = store_->get(key);
  return std::string(value.begin(), value.end());
}

std::optional<std::string> ClientStore::try_get(const std::string& key) {
  if (!store_->check({key})) return std::nullopt;
  std::vector<uint8_t> value = store_->get(key);
  return std::string(value.begin(), value.end());
}

void ClientStore::put(const std::string& key, const std::string& value) {
  store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

void share_with_client(const c10::intrusive_ptr<c10d::Store>& store) {
  TORCH_CHECK_VALUE(!engine::Engine::initialized(),
                    "tpu_dist: the PJRT client already exists, and reads its key-value store "
                    "only when it is created; share the store before the first use of a tpu "
                    "device (call init_process_group before moving anything to tpu)");
  pjrt::set_client_kv_store(std::make_shared<ClientStore>(store));
}

}  // namespace torch_tpu::distributed
