// The key-value store a PJRT client may share between the processes of one
// job: PJRT_Client_Create's kv_get / kv_try_get / kv_put callbacks. Plugins
// that span processes (libtpu on a multi-host slice, XLA:GPU across nodes)
// exchange their topology and communicator ids through it; XLA:CPU ignores
// the callbacks (it never calls them, and has no collectives across
// processes: csrc/distributed/README.md).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "pjrt_c_api.h"

namespace torch_tpu::pjrt {

// What a store's methods throw to have the plugin see a PJRT error `code`.
class KeyValueError : public std::runtime_error {
 public:
  KeyValueError(PJRT_Error_Code code, const std::string& what)
      : std::runtime_error(what), code(code) {}
  const PJRT_Error_Code code;
};

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  // The value of `key`, waiting up to `timeout` for it to be set (then a
  // KeyValueError with DEADLINE_EXCEEDED).
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // The value of `key`, or nullopt at once when it is not set.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  virtual void put(const std::string& key, const std::string& value) = 0;
};

// Points the three callbacks of `args` at `store` (borrowed: it must outlive
// the client). A store's exception becomes the PJRT error the plugin's
// `callback_error` makes: a KeyValueError's code, else INTERNAL; a missing
// key of try_get is NOT_FOUND, as the C API asks.
void attach_kv_store(PJRT_Client_Create_Args& args, KeyValueStore* store);

// The store the clients created from now on are given (null: none). Every
// store set stays alive for the life of the process, since a client may
// call it at any time.
void set_client_kv_store(std::shared_ptr<KeyValueStore> store);
std::shared_ptr<KeyValueStore> client_kv_store();
// How many clients were created with a store attached.
int clients_with_kv_store();
void count_client_with_kv_store();

}  // namespace torch_tpu::pjrt
