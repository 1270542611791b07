#include "kv_store.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

namespace torch_tpu::pjrt {

namespace {

std::string text(const char* data, size_t size) { return std::string(data, size); }

// A copy of `value` the plugin frees through `deleter` once it has copied it.
template <class Args>
void hand_over(Args* a, const std::string& value) {
  char* copy = new char[value.size() + 1];
  std::memcpy(copy, value.data(), value.size());
  copy[value.size()] = '\0';
  a->value = copy;
  a->value_size = value.size();
  a->value_deleter_callback = [](char* v) { delete[] v; };
}

PJRT_Error* fail(PJRT_CallbackError* make, PJRT_Error_Code code, const std::string& what) {
  return make && *make ? (*make)(code, what.data(), what.size()) : nullptr;
}

// Runs `body`; a store's exception becomes the plugin's error.
template <class Body>
PJRT_Error* guarded(PJRT_CallbackError* make, const char* op, const std::string& key,
                    Body body) {
  try {
    return body();
  } catch (const KeyValueError& e) {
    return fail(make, e.code, e.what());
  } catch (const std::exception& e) {
    return fail(make, PJRT_Error_Code_INTERNAL,
                std::string("key-value store: ") + op + " '" + key + "' failed: " + e.what());
  }
}

PJRT_Error* kv_get(PJRT_KeyValueGetCallback_Args* a) {
  const std::string key = text(a->key, a->key_size);
  return guarded(a->callback_error, "get", key, [&]() -> PJRT_Error* {
    auto* store = static_cast<KeyValueStore*>(a->user_arg);
    hand_over(a, store->get(key, std::chrono::milliseconds(a->timeout_in_ms)));
    return nullptr;
  });
}

PJRT_Error* kv_try_get(PJRT_KeyValueTryGetCallback_Args* a) {
  const std::string key = text(a->key, a->key_size);
  return guarded(a->callback_error, "try_get", key, [&]() -> PJRT_Error* {
    auto* store = static_cast<KeyValueStore*>(a->user_arg);
    std::optional<std::string> value = store->try_get(key);
    if (!value)
      return fail(a->callback_error, PJRT_Error_Code_NOT_FOUND,
                  "key-value store: '" + key + "' is not set");
    hand_over(a, *value);
    return nullptr;
  });
}

PJRT_Error* kv_put(PJRT_KeyValuePutCallback_Args* a) {
  const std::string key = text(a->key, a->key_size);
  return guarded(a->callback_error, "put", key, [&]() -> PJRT_Error* {
    static_cast<KeyValueStore*>(a->user_arg)->put(key, text(a->value, a->value_size));
    return nullptr;
  });
}

std::mutex stores_mu;
std::vector<std::shared_ptr<KeyValueStore>>& stores() {
  static std::vector<std::shared_ptr<KeyValueStore>> all;  // the last is current
  return all;
}
std::atomic<int> clients{0};

}  // namespace

void attach_kv_store(PJRT_Client_Create_Args& args, KeyValueStore* store) {
  args.kv_get_callback = store ? &kv_get : nullptr;
  args.kv_get_user_arg = store;
  args.kv_try_get_callback = store ? &kv_try_get : nullptr;
  args.kv_try_get_user_arg = store;
  args.kv_put_callback = store ? &kv_put : nullptr;
  args.kv_put_user_arg = store;
}

void set_client_kv_store(std::shared_ptr<KeyValueStore> store) {
  std::lock_guard<std::mutex> lock(stores_mu);
  stores().push_back(std::move(store));
}

std::shared_ptr<KeyValueStore> client_kv_store() {
  std::lock_guard<std::mutex> lock(stores_mu);
  return stores().empty() ? nullptr : stores().back();
}

int clients_with_kv_store() { return clients.load(); }
void count_client_with_kv_store() { ++clients; }

}  // namespace torch_tpu::pjrt
