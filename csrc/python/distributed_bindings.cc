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
         bool check_signatures) -> c10::intrusive_ptr<c10d::Backend> {
        auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
        return c10::make_intrusive<torch_tpu::distributed::Backend>(
            rank, size, std::move(host), timeout, check_signatures);
      },
      py::arg("rank"), py::arg("size"), py::arg("host"), py::arg("timeout_s"),
      py::arg("check_signatures") = true);
}
