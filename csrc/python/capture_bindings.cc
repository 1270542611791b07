// Bindings that pass tensors: graph capture for the torch.compile backend;
// step capture (torch.tpu.graph) registers PyTorch's accelerator graph.
// Kept apart from module.cc so only this file pays for torch's pybind casters.
#include <torch/csrc/utils/pybind.h>

#include "../aten/graph_capture.h"
#include "../aten/step_capture.h"
#include "../engine/engine.h"

namespace py = pybind11;
using torch_tpu::aten::CapturedGraph;

void bind_capture(py::module& m) {
  torch_tpu::aten::register_graph_impl();
  m.def("_step_capture_active", &torch_tpu::aten::StepGraph::active);
  m.def("_step_capture_abort", &torch_tpu::aten::StepGraph::abort);
  m.def("_set_step_graph_donation", &torch_tpu::aten::StepGraph::set_donation);
  m.def("_step_graph_donation", &torch_tpu::aten::StepGraph::donation);
  py::class_<CapturedGraph, std::shared_ptr<CapturedGraph>>(m, "CapturedGraph")
      .def("matches", &CapturedGraph::matches)
      .def("try_run", &CapturedGraph::try_run)
      .def_property_readonly("status", &CapturedGraph::status)
      .def_property_readonly("error", &CapturedGraph::error)
      .def_property_readonly("text", &CapturedGraph::text);
  m.def("_capture_begin", &CapturedGraph::begin);
  m.def("_capture_abort", &CapturedGraph::abort);
  m.def("_capture_end", [](const std::vector<at::Tensor>& inputs,
                           const std::vector<at::Tensor>& outputs, bool in_background) {
    std::string why;
    auto graph = CapturedGraph::end(inputs, outputs, &why, in_background);
    return py::make_tuple(graph, why);
  }, py::arg("inputs"), py::arg("outputs"), py::arg("in_background") = false);
  // Test hook for asynchronous compiles: holds the background worker.
  m.def("_break_next_background_compile", &CapturedGraph::break_next_background_compile);
  m.def("_hold_background_compiles", [](bool on) {
    torch_tpu::engine::Engine::get().cache().hold_background(on);
  });
}
