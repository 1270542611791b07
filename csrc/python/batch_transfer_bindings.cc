// Batched host<->device copies (csrc/aten/batch_transfer.h): TransferFuture
// and the functions behind torch.tpu.batch_to_device / batch_to_host and
// torch_tpu._internal.batch_transfer. Issuing runs with the GIL (ops may be
// recorded); waiting releases it.
#include <torch/csrc/utils/pybind.h>

#include "../aten/batch_transfer.h"

namespace py = pybind11;
namespace aten = torch_tpu::aten;

void bind_batch_transfer(py::module& m) {
  py::class_<aten::TransferFuture, aten::TransferFuturePtr>(
      m, "TransferFuture",
      "Copies between host and tpu in flight. wait() blocks until all are done and "
      "raises the first error (again at every later wait()); done() asks without blocking.")
      .def(
          "wait",
          [](aten::TransferFuture& f) -> py::object {
            {
              py::gil_scoped_release no_gil;
              f.wait();
            }
            if (!f.has_results()) return py::none();
            return py::cast(f.results());
          },
          "Waits for every copy; returns the new tensors of torch.tpu.batch_to_device / "
          "batch_to_host, None for copies into given tensors.")
      .def("done", &aten::TransferFuture::done, "Whether every copy has finished.");
  m.def("_batch_to_device", &aten::batch_to_device, py::arg("tensors"), py::arg("device"));
  m.def("_batch_to_host", &aten::batch_to_host, py::arg("tensors"), py::arg("pin_memory"));
  m.def("_batch_transfer_h2d", &aten::copy_rows_to_device, py::arg("src_arrs"),
        py::arg("dst_arrs"), py::arg("src_offsets_major_dim"), py::arg("dst_offsets_major_dim"),
        py::arg("copy_sizes_major_dim"));
  m.def("_batch_transfer_d2h", &aten::copy_rows_to_host, py::arg("src_arrs"), py::arg("dst_arrs"),
        py::arg("src_offsets_major_dim"), py::arg("dst_offsets_major_dim"),
        py::arg("copy_sizes_major_dim"));
  m.def("_await_all", [](const std::vector<aten::TransferFuturePtr>& futures) {
    py::gil_scoped_release no_gil;
    aten::await_all(futures);
  });
}
