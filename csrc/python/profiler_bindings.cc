// Bindings of the profiler adapter (csrc/profiler): whether torch.profiler
// sees the tpu's activities in this build, and whether a profile listens to
// the engine now.
#include <pybind11/pybind11.h>

#include "../engine/trace.h"
#include "../profiler/kineto_profiler.h"

namespace py = pybind11;

void bind_profiler(py::module& m) {
  m.def("_profiler_registered", &torch_tpu::profiler::registered);
  m.def("_profiler_listening", [] { return torch_tpu::engine::trace::on(); });
}
