// Bindings of the `tpu_dist` c10d backend (csrc/distributed). The host
// process group comes in from Python (torch.distributed.ProcessGroupGloo):
// the torch wheel ships no Gloo headers, and PyTorch's binding creates it
// exactly as `init_process_group("gloo")` would.
#include <torch/csrc/utils/pybind.h>

#include <chrono>

#include "../distributed/backend.h"

namespace py = pybind11;

void bind_distributed(py::module& m) {
  m.def(
      "_tpu_dist_backend",
      [](int rank, int size, c10::intrusive_ptr<c10d::Backend> host, double timeout_s,
         bool check_signatures, c10::intrusive_ptr<c10d::Store> store,
         const std::string& transport) -> c10::intrusive_ptr<c10d::Backend> {
        auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
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
        return c10::make_intrusive<torch_tpu::distributed::Backend>(
            rank, size, std::move(host), timeout, check_signatures, std::move(native));
      },
      py::arg("rank"), py::arg("size"), py::arg("host"), py::arg("timeout_s"),
      py::arg("check_signatures"), py::arg("store"),
      py::arg("transport") = "auto");
}
