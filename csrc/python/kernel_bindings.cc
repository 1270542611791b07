// Bindings of the custom-kernel registry (torch_tpu/library.py).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <c10/util/Exception.h>

#include "../aten/custom_kernels.h"

namespace py = pybind11;

void bind_kernels(py::module& m) {
  m.def("_register_stablehlo_kernel", [](const std::string& name, const std::string& text) {
    try {
      torch_tpu::aten::register_stablehlo_kernel(name, text);
    } catch (const c10::ValueError& e) {
      throw py::value_error(e.what_without_backtrace());
    }
  });
  m.def("_serve_stablehlo_operator", [](const std::string& name) {
    try {
      torch_tpu::aten::serve_stablehlo_operator(name);
    } catch (const c10::ValueError& e) {
      throw py::value_error(e.what_without_backtrace());
    }
  });
  m.def("_stablehlo_kernels", &torch_tpu::aten::stablehlo_kernels);
}
