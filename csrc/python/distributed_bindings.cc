// Bindings of the `tpu_dist` c10d backend (csrc/distributed). The host
// process group comes in from Python (torch.distributed.ProcessGroupGloo):
// the torch wheel ships no Gloo headers, and PyTorch's binding creates it
// exactly as `init_process_group("gloo")` would. Splits make theirs through
// the same Python function (`make_host`).
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "../distributed/backend.h"
#include "../distributed/client_store.h"
#include "../pjrt/kv_store.h"

namespace py = pybind11;

namespace {

using torch_tpu::distributed::Backend;

std::chrono::milliseconds from_seconds(double s) {
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

// `make_host(store, rank, size, timeout_s)` as a HostFactory. The Python
// function is released under the GIL whenever the last backend holding it
// goes away (possibly on a thread without the GIL).
Backend::HostFactory host_factory(py::function make_host) {
  std::shared_ptr<py::function> fn(new py::function(std::move(make_host)), [](py::function* f) {
    py::gil_scoped_acquire gil;
    delete f;
  });
  return [fn](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
              std::chrono::milliseconds timeout) {
    py::gil_scoped_acquire gil;
    py::object host = (*fn)(store, rank, size, timeout.count() / 1000.0);
    return host.cast<c10::intrusive_ptr<c10d::Backend>>();
  };
}

// c10d's Python layer deep-copies a backend's `options` before splitting it
// (`split_group`); torch's own Options type cannot be copied from Python.
struct CopyableOptions : c10d::Backend::Options {
  using c10d::Backend::Options::Options;
};

c10::intrusive_ptr<CopyableOptions> copyable(const c10d::Backend::Options& o) {
  auto copy = c10::make_intrusive<CopyableOptions>(o.backend, o.timeout);
  copy->global_ranks_in_group = o.global_ranks_in_group;
  copy->group_name = o.group_name;
  return copy;
}

// The key-value callbacks of PJRT_Client_Create, called exactly as a plugin
// calls them (argument structs, the plugin's error maker, the value
// deleter), over a ClientStore. XLA:CPU never calls them, so this is how
// tests reach them with a real c10d store.
class KvCallbacks {
 public:
  explicit KvCallbacks(c10::intrusive_ptr<c10d::Store> store)
      : store_(std::make_shared<torch_tpu::distributed::ClientStore>(std::move(store))) {
    std::memset(&args_, 0, sizeof(args_));
    torch_tpu::pjrt::attach_kv_store(args_, store_.get());
  }
  void put(const std::string& key, const py::bytes& value) {
    std::string v = value;
    PJRT_KeyValuePutCallback_Args a{};
    a.struct_size = PJRT_KeyValuePutCallback_Args_STRUCT_SIZE;
    a.key = key.data();
    a.key_size = key.size();
    a.value = v.data();
    a.value_size = v.size();
    a.callback_error = &error_maker;
    a.user_arg = args_.kv_put_user_arg;
    check(call([&] { return args_.kv_put_callback(&a); }));
  }
  py::bytes get(const std::string& key, int timeout_ms) {
    PJRT_KeyValueGetCallback_Args a{};
    a.struct_size = PJRT_KeyValueGetCallback_Args_STRUCT_SIZE;
    a.key = key.data();
    a.key_size = key.size();
    a.timeout_in_ms = timeout_ms;
    a.callback_error = &error_maker;
    a.user_arg = args_.kv_get_user_arg;
    check(call([&] { return args_.kv_get_callback(&a); }));
    return take(a);
  }
  py::bytes try_get(const std::string& key) {
    PJRT_KeyValueTryGetCallback_Args a{};
    a.struct_size = PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE;
    a.key = key.data();
    a.key_size = key.size();
    a.callback_error = &error_maker;
    a.user_arg = args_.kv_try_get_user_arg;
    check(call([&] { return args_.kv_try_get_callback(&a); }));
    return take(a);
  }

 private:
  // The plugin's side: an error is a code and a message (what PJRT_Error
  // holds); a non-null pointer tells the callback's caller it failed.
  struct Failure {
    PJRT_Error_Code code = PJRT_Error_Code_OK;
    std::string message;
  };
  static Failure& failure() {
    static thread_local Failure f;
    return f;
  }
  static PJRT_Error* make_error(PJRT_Error_Code code, const char* message, size_t size) {
    failure() = {code, std::string(message, size)};
    return reinterpret_cast<PJRT_Error*>(&failure());
  }
  static inline PJRT_CallbackError error_maker = &make_error;

  template <class F>
  static PJRT_Error* call(F f) {
    failure() = {};
    py::gil_scoped_release no_gil;  // a get may wait for another process
    return f();
  }
  static void check(PJRT_Error* e) {
    if (!e) return;
    static const char* names[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT",
                                  "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                                  "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                  "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
                                  "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
                                  "UNAUTHENTICATED"};
    int code = static_cast<int>(failure().code);
    throw std::runtime_error(std::string(code >= 0 && code <= 16 ? names[code] : "?") + ": " +
                             failure().message);
  }
  template <class Args>
  static py::bytes take(Args& a) {
    py::bytes out(a.value, a.value_size);
    a.value_deleter_callback(a.value);  // as the plugin must, once it has copied
    return out;
  }

  std::shared_ptr<torch_tpu::distributed::ClientStore> store_;
  PJRT_Client_Create_Args args_;
};

}  // namespace

void bind_distributed(py::module& m) {
  m.def("_share_store_with_client", &torch_tpu::distributed::share_with_client,
        py::arg("store"));
  m.def("_pjrt_clients_with_kv_store", &torch_tpu::pjrt::clients_with_kv_store);
  py::class_<KvCallbacks>(m, "_PjrtKvCallbacks")
      .def(py::init<c10::intrusive_ptr<c10d::Store>>(), py::arg("store"))
      .def("put", &KvCallbacks::put, py::arg("key"), py::arg("value"))
      .def("get", &KvCallbacks::get, py::arg("key"), py::arg("timeout_ms"))
      .def("try_get", &KvCallbacks::try_get, py::arg("key"));
  // The backend's own Python type, so that what c10d's Python layer calls
  // on a splittable backend exists. `perform_nocolor_split` is what
  // `new_group` calls on ranks outside the new group once a device is bound
  // (NCCL must join the split there); tpu_dist has nothing to join.
  py::class_<CopyableOptions, c10d::Backend::Options, c10::intrusive_ptr<CopyableOptions>>(
      m, "TpuDistOptions")
      .def("__copy__", [](const CopyableOptions& o) { return copyable(o); })
      .def("__deepcopy__", [](const CopyableOptions& o, py::dict) { return copyable(o); },
           py::arg("memo"));
  py::class_<Backend, c10d::Backend, c10::intrusive_ptr<Backend>>(m, "TpuDistBackend")
      .def_property_readonly("options",
                             [](Backend& b) { return copyable(*b.getBackendOptions()); })
      .def("perform_nocolor_split", [](Backend&, const c10::Device&) {}, py::arg("device"));
  m.def(
      "_tpu_dist_backend",
      [](int rank, int size, c10::intrusive_ptr<c10d::Backend> host, py::function make_host,
         double timeout_s, bool check_signatures, c10::intrusive_ptr<c10d::Store> store,
         const std::string& transport) -> c10::intrusive_ptr<c10d::Backend> {
        TORCH_CHECK_VALUE(transport == "auto" || transport == "host" || transport == "native",
                          "tpu_dist: TORCH_TPU_DIST_TRANSPORT must be auto, host or native, got '",
                          transport, "'");
        std::shared_ptr<torch_tpu::distributed::NativeGroup> native;
        if (transport != "host" && store) {
          py::gil_scoped_release no_gil;  // the other ranks may be threads of this process
          native = torch_tpu::distributed::NativeGroup::connect(store, rank, size);
        }
        TORCH_CHECK_VALUE(native || transport != "native",
                          "tpu_dist: TORCH_TPU_DIST_TRANSPORT=native needs every rank in this "
                          "process (ranks as threads, each on its own tpu device); these ranks "
                          "are in several processes");
        return c10::make_intrusive<Backend>(rank, size, std::move(host),
                                            host_factory(std::move(make_host)),
                                            from_seconds(timeout_s), check_signatures,
                                            std::move(native));
      },
      py::arg("rank"), py::arg("size"), py::arg("host"), py::arg("make_host"),
      py::arg("timeout_s"), py::arg("check_signatures"), py::arg("store"),
      py::arg("transport") = "auto");
}
