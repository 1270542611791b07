// The key-value callbacks of PJRT_Client_Create (pjrt/kv_store.h): values
// handed over with their deleter, store failures turned into the plugin's
// errors with the C API's codes, and what the XLA:CPU plugin does with them.
#include "../../csrc/pjrt/kv_store.h"

#include <map>
#include <string>

#include "test_support.h"

namespace torch_tpu::pjrt {
namespace {

// A store in memory that counts its calls.
class MemoryStore : public KeyValueStore {
 public:
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    ++calls;
    if (key == "broken") throw std::runtime_error("the disk is on fire");
    auto it = values.find(key);
    if (it == values.end())
      throw KeyValueError(PJRT_Error_Code_DEADLINE_EXCEEDED,
                          key + " not set within " + std::to_string(timeout.count()) + " ms");
    return it->second;
  }
  std::optional<std::string> try_get(const std::string& key) override {
    ++calls;
    auto it = values.find(key);
    if (it == values.end()) return std::nullopt;
    return it->second;
  }
  void put(const std::string& key, const std::string& value) override {
    ++calls;
    values[key] = value;
  }
  std::map<std::string, std::string> values;
  int calls = 0;
};

// What the plugin's error maker saw (a PJRT_Error is opaque: any non-null
// pointer tells the callback's caller it failed).
struct Seen {
  PJRT_Error_Code code = PJRT_Error_Code_OK;
  std::string message;
} seen;
PJRT_Error* make_error(PJRT_Error_Code code, const char* message, size_t size) {
  seen = {code, std::string(message, size)};
  return reinterpret_cast<PJRT_Error*>(&seen);
}
PJRT_CallbackError error_maker = &make_error;

PJRT_Client_Create_Args attached(MemoryStore& store) {
  PJRT_Client_Create_Args args{};
  args.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  attach_kv_store(args, &store);
  return args;
}

PJRT_Error* put(PJRT_Client_Create_Args& args, const std::string& key, const std::string& value) {
  PJRT_KeyValuePutCallback_Args a{};
  a.struct_size = PJRT_KeyValuePutCallback_Args_STRUCT_SIZE;
  a.key = key.data();
  a.key_size = key.size();
  a.value = value.data();
  a.value_size = value.size();
  a.callback_error = &error_maker;
  a.user_arg = args.kv_put_user_arg;
  return args.kv_put_callback(&a);
}

TEST(PjrtKvStore, PutThenGetHandsOverACopyWithItsDeleter) {
  MemoryStore store;
  auto args = attached(store);
  const std::string value("binary\0value", 12);
  ASSERT_EQ(put(args, "k", value), nullptr);
  EXPECT_EQ(store.values["k"], value);

  PJRT_KeyValueGetCallback_Args g{};
  g.struct_size = PJRT_KeyValueGetCallback_Args_STRUCT_SIZE;
  g.key = "k";
  g.key_size = 1;
  g.timeout_in_ms = 10;
  g.callback_error = &error_maker;
  g.user_arg = args.kv_get_user_arg;
  ASSERT_EQ(args.kv_get_callback(&g), nullptr);
  EXPECT_EQ(std::string(g.value, g.value_size), value);
  ASSERT_NE(g.value_deleter_callback, nullptr);
  g.value_deleter_callback(g.value);

  PJRT_KeyValueTryGetCallback_Args t{};
  t.struct_size = PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE;
  t.key = "k";
  t.key_size = 1;
  t.callback_error = &error_maker;
  t.user_arg = args.kv_try_get_user_arg;
  ASSERT_EQ(args.kv_try_get_callback(&t), nullptr);
  EXPECT_EQ(std::string(t.value, t.value_size), value);
  t.value_deleter_callback(t.value);
}

TEST(PjrtKvStore, FailuresBecomeThePluginsErrorsWithTheirCodes) {
  MemoryStore store;
  auto args = attached(store);
  PJRT_KeyValueTryGetCallback_Args t{};
  t.struct_size = PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE;
  t.key = "absent";
  t.key_size = 6;
  t.callback_error = &error_maker;
  t.user_arg = args.kv_try_get_user_arg;
  EXPECT_NE(args.kv_try_get_callback(&t), nullptr);
  EXPECT_EQ(seen.code, PJRT_Error_Code_NOT_FOUND);
  EXPECT_NE(seen.message.find("'absent' is not set"), std::string::npos) << seen.message;

  PJRT_KeyValueGetCallback_Args g{};
  g.struct_size = PJRT_KeyValueGetCallback_Args_STRUCT_SIZE;
  g.key = "absent";
  g.key_size = 6;
  g.timeout_in_ms = 25;
  g.callback_error = &error_maker;
  g.user_arg = args.kv_get_user_arg;
  EXPECT_NE(args.kv_get_callback(&g), nullptr);
  EXPECT_EQ(seen.code, PJRT_Error_Code_DEADLINE_EXCEEDED);
  EXPECT_EQ(seen.message, "absent not set within 25 ms");

  g.key = "broken";
  EXPECT_NE(args.kv_get_callback(&g), nullptr);
  EXPECT_EQ(seen.code, PJRT_Error_Code_INTERNAL);
  EXPECT_NE(seen.message.find("get 'broken' failed: the disk is on fire"), std::string::npos)
      << seen.message;
}

TEST(PjrtKvStore, NullStoreClearsTheCallbacks) {
  MemoryStore store;
  auto args = attached(store);
  attach_kv_store(args, nullptr);
  EXPECT_EQ(args.kv_get_callback, nullptr);
  EXPECT_EQ(args.kv_try_get_callback, nullptr);
  EXPECT_EQ(args.kv_put_callback, nullptr);
}

// XLA:CPU accepts a client with the callbacks and never calls them (it runs
// no collectives across processes: csrc/distributed/README.md). When a new
// plugin version starts to, this fails: update that README.
TEST(PjrtKvStore, XlaCpuCreatesAClientWithTheStoreAndNeverCallsIt) {
  TPU_REQUIRE_CLIENT(shared);
  if (testing::plugin_path().find("xla_cpu") == std::string::npos)
    GTEST_SKIP() << "not the XLA:CPU plugin";
  auto store = std::make_shared<MemoryStore>();
  set_client_kv_store(store);
  const int before = clients_with_kv_store();
  {
    Client client(Plugin::load(testing::plugin_path()),
                  {{"cpu_device_count", int64_t{2}}, {"process_id", int64_t{1}},
                   {"num_nodes", int64_t{2}}});
    EXPECT_EQ(client.device_count(), 2);
    EXPECT_EQ(client.device_info(1).id, 1);  // process_id changes nothing
  }
  set_client_kv_store(nullptr);
  EXPECT_EQ(clients_with_kv_store(), before + 1);
  EXPECT_EQ(store->calls, 0);
}

}  // namespace
}  // namespace torch_tpu::pjrt
