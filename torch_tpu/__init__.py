"""torch_tpu: PyTorch on TPUs, eager first, through the PJRT C API.

`import torch_tpu` (or plain `import torch`, through the `torch.backends`
entry point) registers the `tpu` device; then `tensor.to("tpu")` works.
"""
import atexit
import os


def _autoload():
    """Entry point for `torch.backends`: importing this module is the work.
    Defined before `import torch`, which may itself autoload this module."""


import torch  # noqa: E402

from . import _plugin

torch.utils.rename_privateuse1_backend("tpu")

from . import _C  # noqa: E402  (registers kernels; needs the rename first)

_C._configure(_plugin.plugin_path(), _plugin.device_count_option(), _plugin.cache_dir())
# The runtime's warm-up thread (started with the client) and a background
# compile must finish before the plugin's static objects are destroyed at exit.
atexit.register(_C._stop_background)

from ._autograd_exit import drain_autograd_device_threads as _drain  # noqa: E402
atexit.register(_drain)

from . import device as _device  # noqa: E402
from .modes import EagerMode, eager_mode, get_eager_mode, set_eager_mode  # noqa: E402
from .runtime import (  # noqa: E402
    cache_stats, clear_cache, fallback_counts, metrics, metrics_report, native_ops,
    reset_metrics, set_cpu_fallback, sync, time_kernels,
    index_checks,
    set_index_checks,
)
from .async_compile import async_compile_enabled, set_async_compile  # noqa: E402

torch._register_device_module("tpu", _device)
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)

from .modes import _install_loop_boundary_hook, _mode_from_env  # noqa: E402

if _mode_from_env() is not None:
    set_eager_mode(_mode_from_env())
_install_loop_boundary_hook()

from . import compiler  # noqa: E402
from . import _fake_rules  # noqa: E402,F401  (tpu-only fake-tensor rules for torch.compile)
from .compiler import export_stablehlo  # noqa: E402

compiler.install_default_backend()

from . import _inductor_codegen  # noqa: E402

_inductor_codegen.install()

from . import distributed  # noqa: E402

distributed.register()
distributed._share_launcher_store()  # before anything makes the PJRT client

# Autograd threading is left as the user set it: a thread's first tpu tensor
# makes its backward run on it instead of on PyTorch's per-device autograd
# thread (csrc/aten/autograd_thread.h; TORCH_TPU_AUTOGRAD_THREAD=1 keeps it).

if os.environ.get("TORCH_TPU_CPU_FALLBACK", "0") == "1":
    set_cpu_fallback(True)
if os.environ.get("TORCH_TPU_LOG_OPS", "0") == "1":
    _C._set_log_ops(True)

__all__ = [
    "EagerMode", "eager_mode", "get_eager_mode", "set_eager_mode", "sync", "metrics",
    "metrics_report", "reset_metrics", "cache_stats", "clear_cache", "set_cpu_fallback",
    "fallback_counts", "native_ops", "export_stablehlo", "time_kernels",
]
