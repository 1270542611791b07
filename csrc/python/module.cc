// torch_tpu._C: the runtime controls the Python layer needs. Tensors never
// cross here; ops reach the backend through the dispatcher.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <ATen/core/Generator.h>
#include <c10/util/Exception.h>
#include <torch/csrc/Generator.h>

#include "../aten/autograd_exit.h"
#include "../aten/cpu_numerics.h"
#include "../aten/device.h"
#include "../aten/dispatch.h"
#include "../aten/fallback.h"
#include "../aten/generator.h"
#include "../aten/op_list.h"
#include "../aten/precision.h"
#include "../lowering/precision.h"
#include "../aten/storage.h"
#include "../aten/stream.h"
#include "../engine/xla_cpu/bf16_dots.h"
#include "../engine/engine.h"
#include "../lowering/registry.h"

namespace py = pybind11;
using torch_tpu::engine::Cache;
using torch_tpu::engine::Engine;

namespace {

torch_tpu::aten::TpuGenerator* generator(int device) {
  return torch_tpu::aten::default_generator(device).get<torch_tpu::aten::TpuGenerator>();
}

}  // namespace

void bind_capture(py::module& m);  // capture_bindings.cc
void bind_distributed(py::module& m);  // distributed_bindings.cc
void bind_compiler_options(py::module& m);  // compiler_bindings.cc
void bind_profiler(py::module& m);  // profiler_bindings.cc
void bind_batch_transfer(py::module& m);  // batch_transfer_bindings.cc
void bind_kernels(py::module& m);   // kernel_bindings.cc

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_tpu native runtime";
  bind_capture(m);
  bind_distributed(m);
  bind_compiler_options(m);
  bind_profiler(m);
  bind_batch_transfer(m);
  bind_kernels(m);
  py::register_exception<torch_tpu::pjrt::Error>(m, "RuntimeError", PyExc_RuntimeError);
  // Out of memory is torch.OutOfMemoryError, as on CUDA: the engine raises
  // it through this handler, ATen's Python bindings translate the c10 type,
  // and this module's own functions (synchronize) translate it below.
  torch_tpu::pjrt::set_out_of_memory_handler([](const std::string& message) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "tpu out of memory: ", message,
                     "\nFree tensors that are no longer needed (or use smaller batches) and "
                     "retry; the runtime stays usable.");
  });
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const torch_tpu::engine::CheckFailed& e) {
      PyErr_SetString(e.index_error ? PyExc_IndexError : PyExc_RuntimeError, e.what());
    } catch (const c10::OutOfMemoryError& e) {
      static PyObject* type =
          py::object(py::module_::import("torch").attr("OutOfMemoryError")).release().ptr();
      PyErr_SetString(type, e.what_without_backtrace());
    }
  });

  m.def("_configure", [](const std::string& plugin, int64_t cpu_devices, const std::string& cache) {
    torch_tpu::engine::Config c;
    c.plugin_path = plugin;
    c.cpu_device_count = cpu_devices;
    c.cache_dir = cache;
    c.cpu_half_conv = &torch_tpu::aten::cpu_onednn_half_conv;
    Engine::configure(c);
  });
  m.def("_init", [] { Engine::get(); });
  m.def("_is_initialized", &Engine::initialized);
  m.def("_join_warmup", [] {
    if (!Engine::initialized()) return;
    py::gil_scoped_release no_gil;
    Engine::get().join_warmup();
  });
  m.def("_stop_background", [] {
    if (!Engine::initialized()) return;
    py::gil_scoped_release no_gil;
    Engine::get().stop_background();
  });
  m.def("_drain_background_compiles", [] {
    if (!Engine::initialized()) return;
    py::gil_scoped_release no_gil;
    Engine::get().cache().drain_background();
  });
  // Tiered compilation (engine/cache.h): "off", "recompiles" or "all".
  m.def("_tiered_compile", [] {
    switch (Engine::get().cache().tiering()) {
      case Cache::Tiering::kOff: return "off";
      case Cache::Tiering::kRecompiles: return "recompiles";
      case Cache::Tiering::kAll: return "all";
    }
    return "off";
  });
  m.def("_set_tiered_compile", [](const std::string& which) {
    Cache::Tiering t;
    if (which == "off") {
      t = Cache::Tiering::kOff;
    } else if (which == "recompiles") {
      t = Cache::Tiering::kRecompiles;
    } else if (which == "all") {
      t = Cache::Tiering::kAll;
    } else {
      throw py::value_error("tiered compilation is 'off', 'recompiles' or 'all', not '" + which + "'");
    }
    Engine::get().cache().set_tiering(t);
  });
  m.def("_drain_autograd_device_threads", [] {
    py::gil_scoped_release no_gil;
    torch_tpu::aten::drain_autograd_device_threads();
  });
  m.def("_device_count", [] { return torch_tpu::aten::device_count(); });
  m.def("_current_device", &torch_tpu::aten::current_device);
  m.def("_set_device", &torch_tpu::aten::set_current_device);
  // Stream ids of this thread's current stream on a device, and setting it.
  m.def("_current_stream", [](int device) {
    torch_tpu::aten::check_device(device);
    return torch_tpu::aten::streams::current(c10::Device(c10::DeviceType::PrivateUse1, device)).id();
  });
  m.def("_set_stream", [](int device, int64_t id) {
    torch_tpu::aten::check_device(device);
    torch_tpu::aten::streams::exchange(
        c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id));
  });
  m.def("_set_async_compile", [](bool on) { Engine::get().set_async_compile(on); });
  m.def("_async_compile", [] { return Engine::get().async_compile(); });
  m.def("_set_index_checks", [](bool on) { Engine::get().set_checks(on); });
  m.def("_index_checks", [] { return Engine::get().checks(); });
  m.def("_synchronize", [] {
    py::gil_scoped_release release;
    Engine::get().synchronize();
  });
  m.def("_platform", [] {
    auto& c = Engine::get().client();
    auto info = c.device_info(0);
    return py::make_tuple(c.platform_name(), c.platform_version(), info.kind,
                          c.plugin()->path());
  });
  m.def("_set_mode", [](int mode) {
    Engine::get().set_mode(static_cast<torch_tpu::engine::Mode>(mode));
  });
  m.def("_get_mode", [] { return static_cast<int>(Engine::get().mode()); });
  m.def("_flush", [](const std::string& cause) {
    auto c = torch_tpu::engine::flush_cause_named(cause);
    if (!c) throw py::value_error("unknown flush cause '" + cause + "' (see engine/flush_cause.h)");
    Engine::get().flush(*c);
  }, py::arg("cause") = "explicit");
  // optimizer.step() begins: the hook of torch_tpu/modes.py.
  m.def("_begin_optimizer_step", [](bool creates_state) {
    Engine::get().begin_optimizer_step(creates_state);
  }, py::arg("creates_state"));
  // Flushes this thread's pending program and returns its StableHLO text
  // (empty when nothing was pending): torch.tpu.sync.computation_mlir.
  m.def("_flush_text", [] { return Engine::get().flush_program(torch_tpu::engine::FlushCause::kExplicit, /*with_text=*/true).text; });
  // Tests: the next flush of a recording with outputs fails with an internal error.
  m.def("_fail_next_flush", [] { Engine::get().fail_next_flush(); });
  m.def("_metrics", [] { return Engine::get().metrics().snapshot(); });
  m.def("_metrics_report", [] { return Engine::get().metrics().report(); });
  m.def("_reset_metrics", [] { Engine::get().metrics().reset(); });
  m.def("_set_kernel_timing", [](bool on) { Engine::get().metrics().set_kernel_timing(on); });
  m.def("_cache_stats", [] {
    auto s = Engine::get().cache().stats();
    py::dict d;
    d["hits"] = s.hits;
    d["misses"] = s.misses;
    d["disk_hits"] = s.disk_hits;
    d["entries"] = s.entries;
    d["evictions"] = s.evictions;
    d["capacity"] = Engine::get().cache().capacity();
    d["disk_bytes"] = s.disk_bytes;
    d["compile_seconds"] = s.compile_seconds;
    d["directory"] = Engine::get().cache().directory();
    return d;
  });
  m.def("_bf16_split_dots", [] { return Engine::get().target().bf16_split_dots; });
  // The target profile (hlo/target.h) the lowerings read.
  m.def("_target", [] {
    const torch_tpu::hlo::Target& t = Engine::get().target();
    py::dict d;
    d["platform"] = t.platform;
    d["device_kind"] = t.device_kind;
    d["xla_cpu"] = t.xla_cpu;
    d["bf16_split_dots"] = t.bf16_split_dots;
    d["checked_bf16_dots"] = t.checked_bf16_dots;
    d["cpu_onednn_bf16_conv"] = t.cpu_onednn_half_conv(torch_tpu::hlo::ElementType::kBF16);
    d["cpu_onednn_f16_conv"] = t.cpu_onednn_half_conv(torch_tpu::hlo::ElementType::kF16);
    return d;
  });
  // Fused Eager's deferred lowering (engine/deferred.h); on by default,
  // TORCH_TPU_DEFER_LOWERING=0 starts with it off.
  m.def("_defer_lowering", [] { return Engine::get().defer_lowering(); });
  m.def("_set_defer_lowering", [](bool on) { Engine::get().set_defer_lowering(on); });
  m.def("_bf16_split_stats", [] {
    auto s = torch_tpu::engine::xla_cpu::bf16_split_stats();
    py::dict d;
    d["fallbacks"] = s.fallbacks;  // all split dots in f32
    d["partial"] = s.partial;      // some of them in f32
    return d;
  });
  m.def("_cache_clear", [](bool disk) { Engine::get().clear_cache(disk); });
  m.def("_cache_set_capacity", [](int64_t n) {
    if (n < 1) throw py::value_error("the cache capacity must be at least 1, got " + std::to_string(n));
    Engine::get().cache().set_capacity(static_cast<size_t>(n));
  });
  m.def("_set_cpu_fallback", &torch_tpu::aten::set_cpu_fallback);
  m.def("_cpu_fallback_enabled", &torch_tpu::aten::cpu_fallback_enabled);
  m.def("_fallback_counts", &torch_tpu::aten::fallback_counts);
  m.def("_native_ops", &torch_tpu::aten::native_ops);
  m.def("_lowered_ops", [] { return torch_tpu::lowering::Registry::get().ops(); });
  // The one op list: (op, kind, family, lowering, dispatch key) per tpu kernel.
  m.def("_op_list", [] {
    std::vector<std::tuple<std::string, std::string, std::string, std::string, std::string>> rows;
    for (auto& r : torch_tpu::aten::op_list())
      rows.emplace_back(r.op, r.kind, r.family, r.lowering, r.key);
    return rows;
  });
  m.def("_set_precision", &torch_tpu::aten::set_precision_override);
  m.def("_get_precision_override", &torch_tpu::aten::precision_override);
  m.def("_current_precision", [] { return static_cast<int>(torch_tpu::aten::current_precision()); });
  m.def("_set_log_ops", &torch_tpu::aten::set_log_ops);
  m.def("_manual_seed", [](int device, uint64_t seed) {
    auto gen = torch_tpu::aten::default_generator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    generator(device)->set_current_seed(seed);
  });
  m.def("_seed", [](int device) { return generator(device)->seed(); });
  // The device's default generator as a torch.Generator (the same object
  // random ops draw from when given none).
  m.def("_default_generator", [](int device) {
    torch_tpu::aten::check_device(device);
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(torch_tpu::aten::default_generator(device)));
  });
  m.def("_initial_seed", [](int device) { return generator(device)->current_seed(); });
  m.def("_get_rng_state", [](int device) {
    auto* g = generator(device);
    return py::make_tuple(g->current_seed(), g->get_offset());
  });
  m.def("_set_rng_state", [](int device, uint64_t seed, uint64_t offset) {
    auto* g = generator(device);
    g->set_current_seed(seed);
    g->set_offset(offset);
  });
}
