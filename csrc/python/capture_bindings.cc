// Bindings that pass tensors: graph capture for the torch.compile backend;
// step capture (torch.tpu.graph) registers PyTorch's accelerator graph.
// Kept apart from module.cc so only this file pays for torch's pybind casters.
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include "../aten/graph_capture.h"
#include "../aten/step_capture.h"
#include "../engine/engine.h"

namespace py = pybind11;
using torch_tpu::aten::CapturedGraph;

namespace {

// A compiled graph's arguments: its tpu tensors, and the key of everything
// else (each tpu tensor a "t", any other value ("v", value)) that picks the
// captured program. None when an argument is a tensor on another device:
// compiler.py's _split decides those (small host tensors baked in by value).
py::object split_graph_args(const py::tuple& args) {
  static const py::str tensor_mark("t");
  static const py::str value_mark("v");
  py::list tensors;
  py::tuple key(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    py::handle a = args[i];
    if (THPVariable_Check(a.ptr())) {
      if (THPVariable_Unpack(a.ptr()).device().type() != c10::DeviceType::PrivateUse1)
        return py::none();
      tensors.append(a);
      key[i] = tensor_mark;
    } else {
      key[i] = py::make_tuple(value_mark, a);
    }
  }
  return py::make_tuple(tensors, key);
}

// A captured graph with the layout of the Python graph's outputs, as
// compiler.py's capture found them: a program result ("t", index), a view of
// an input ("a", (input, size, stride, offset)), or a value ("v", value).
// Calling it replays the program and builds the outputs, or returns None
// when the program cannot run these inputs (not matching, not ready).
class GraphReplay {
 public:
  GraphReplay(std::shared_ptr<CapturedGraph> graph, const py::list& outputs)
      : graph_(std::move(graph)) {
    for (py::handle o : outputs) {
      auto entry = o.cast<py::tuple>();
      const std::string kind = entry[0].cast<std::string>();
      Output out;
      out.kind = kind.at(0);
      if (out.kind == 't') {
        out.index = entry[1].cast<int64_t>();
      } else if (out.kind == 'a') {
        auto v = entry[1].cast<py::tuple>();
        out.index = v[0].cast<int64_t>();
        out.size = v[1].cast<std::vector<int64_t>>();
        out.stride = v[2].cast<std::vector<int64_t>>();
        out.offset = v[3].cast<int64_t>();
      } else {
        out.value = py::reinterpret_borrow<py::object>(entry[1]);
      }
      outputs_.push_back(std::move(out));
    }
  }

  py::object operator()(const std::vector<at::Tensor>& inputs) const {
    std::optional<std::vector<at::Tensor>> results = graph_->try_run(inputs);
    if (!results) return py::none();
    py::list out(outputs_.size());
    for (size_t i = 0; i < outputs_.size(); ++i) {
      const Output& o = outputs_[i];
      if (o.kind == 't')
        out[i] = py::cast(results->at(o.index));
      else if (o.kind == 'a')
        out[i] = py::cast(inputs.at(o.index).as_strided(o.size, o.stride, o.offset));
      else
        out[i] = o.value;
    }
    return out;
  }

 private:
  struct Output {
    char kind = 'v';
    int64_t index = 0, offset = 0;
    std::vector<int64_t> size, stride;
    py::object value;
  };
  std::shared_ptr<CapturedGraph> graph_;
  std::vector<Output> outputs_;
};

}  // namespace

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
      .def_property_readonly("text", &CapturedGraph::text)
      .def("set_fusion", [](CapturedGraph& g, const std::string& fusion) {
        using F = CapturedGraph::Fusion;
        TORCH_CHECK_VALUE(fusion == "never" || fusion == "follow" || fusion == "train",
                          "graph fusion is 'never', 'follow' or 'train', not '", fusion, "'");
        g.set_fusion(fusion == "train" ? F::kTrain : fusion == "follow" ? F::kFollow : F::kNever);
      });
  py::class_<GraphReplay>(m, "GraphReplay")
      .def(py::init<std::shared_ptr<CapturedGraph>, const py::list&>())
      .def("__call__", &GraphReplay::operator());
  m.def("_split_graph_args", &split_graph_args);
  m.def("_capture_begin", &CapturedGraph::begin);
  m.def("_capture_abort", &CapturedGraph::abort);
  m.def("_capture_end", [](const std::vector<at::Tensor>& inputs,
                           const std::vector<at::Tensor>& outputs, bool in_background) {
    std::string why;
    auto graph = CapturedGraph::end(inputs, outputs, &why, in_background);
    return py::make_tuple(graph, why);
  }, py::arg("inputs"), py::arg("outputs"), py::arg("in_background") = false);
  // Test hook for asynchronous compiles: holds the background worker.
  // Test hook: the next background compile is handed a module the compiler
  // rejects (how a failed compile falls back is tested with it).
  m.def("_break_next_background_compile", [] {
    torch_tpu::engine::Engine::get().cache().break_next_background_compile();
  });
  m.def("_hold_background_compiles", [](bool on) {
    torch_tpu::engine::Engine::get().cache().hold_background(on);
  });
}
