// Bindings of torch.tpu.compiler.custom_compiler_options: the calling
// thread's compile options (engine::Cache::set_thread_overrides), each set
// checked once by the plugin on a one-line program before any op uses it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>

#include "../engine/engine.h"

namespace py = pybind11;
using torch_tpu::engine::Cache;
using torch_tpu::engine::Engine;
using torch_tpu::pjrt::CompileOverrides;

namespace {

// The option values a CompileOptionsProto can carry: str, bool, int, float.
CompileOverrides parse(const py::dict& options) {
  CompileOverrides out;
  for (auto item : options) {
    if (!py::isinstance<py::str>(item.first))
      throw py::type_error("compiler option names are str, got " +
                           std::string(py::str(py::type::of(item.first).attr("__name__"))));
    std::string name = item.first.cast<std::string>();
    py::handle v = item.second;
    try {
      if (py::isinstance<py::bool_>(v))
        out.set(name, v.cast<bool>());
      else if (py::isinstance<py::int_>(v))
        out.set(name, v.cast<int64_t>());
      else if (py::isinstance<py::float_>(v))
        out.set(name, v.cast<double>());
      else if (py::isinstance<py::str>(v))
        out.set(name, v.cast<std::string>());
      else
        throw py::type_error("compiler option '" + name + "' must be a str, bool, int or float, got " +
                             std::string(py::str(py::type::of(v).attr("__name__"))));
    } catch (const std::invalid_argument& e) {
      throw py::value_error(e.what());
    }
  }
  return out;
}

const char kProbe[] =
    "module @compile_options_probe {\n"
    "  func.func public @main(%arg0: tensor<f32>) -> tensor<f32> {\n"
    "    return %arg0 : tensor<f32>\n"
    "  }\n"
    "}\n";

// Compiles the probe under `options` once per distinct set: an unknown
// option or a value the plugin cannot take is a ValueError naming it here,
// not an error at some later op.
void check(const CompileOverrides& options) {
  static std::mutex mu;
  static std::set<std::string> accepted;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (accepted.count(options.text())) return;
  }
  try {
    Engine::get().client().compile(kProbe, /*quick=*/false, options);
  } catch (const torch_tpu::pjrt::Error& e) {
    throw py::value_error(std::string("the tpu compiler rejected these compiler options: ") +
                          e.what() +
                          "\nSee https://openxla.org/xla/flags_guidance for XLA's option names; "
                          "'xla_optimization_level' and 'xla_memory_fitting_level' take 'O0'-'O3'.");
  }
  std::lock_guard<std::mutex> lock(mu);
  accepted.insert(options.text());
}

}  // namespace

void bind_compiler_options(py::module& m) {
  // Checks and sets the calling thread's options (None: back to the
  // process's default options).
  m.def("_set_compile_options", [](const std::optional<py::dict>& options) {
    if (!options) return Cache::set_thread_overrides(nullptr);
    CompileOverrides parsed = parse(*options);
    if (!parsed.empty()) check(parsed);
    Cache::set_thread_overrides(std::make_shared<const CompileOverrides>(std::move(parsed)));
  });
  // Checks and sets the options of every thread that set none.
  m.def("_set_default_compile_options", [](const py::dict& options) {
    CompileOverrides parsed = parse(options);
    if (!parsed.empty()) check(parsed);
    Cache::set_default_overrides(
        parsed.empty() ? nullptr : std::make_shared<const CompileOverrides>(std::move(parsed)));
  });
  m.def("_compile_options_key", [] {
    auto o = Cache::thread_overrides();
    return o ? o->text() : std::string();
  });
}
