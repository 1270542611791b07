// Bindings of the `tpu_dist` c10d backend (csrc/distributed). The host
// process group comes in from Python (torch.distributed.ProcessGroupGloo):
// the torch wheel ships no Gloo headers, and PyTorch's binding creates it
// exactly as `init_process_group("gloo")` would. Splits make theirs through
// the same Python function (`make_host`).
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <memory>

#include "../distributed/backend.h"

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

}  // namespace

void bind_distributed(py::module& m) {
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
