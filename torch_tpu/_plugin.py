"""Finding the PJRT plugin and the runtime's settings from the environment."""
import glob
import importlib.util
import os

ENV_PLUGIN = "TORCH_TPU_PJRT_PLUGIN"


def _cpu_plugin():
    spec = importlib.util.find_spec("xla_plugins.xla_cpu_pjrt")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "xla_cpu_pjrt.so")
    return path if os.path.exists(path) else None


def _libtpu_plugin():
    # Only where a TPU is attached: libtpu on a machine without one fails.
    if not (glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*")):
        return None
    spec = importlib.util.find_spec("libtpu")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "libtpu.so")
    return path if os.path.exists(path) else None


def plugin_path():
    """The plugin .so: $TORCH_TPU_PJRT_PLUGIN, else libtpu on a TPU VM, else
    XLA:CPU from the xla-cpu-pjrt wheel. Empty when none is installed; the
    runtime then raises an error that says what to install."""
    explicit = os.environ.get(ENV_PLUGIN)
    if explicit:
        return explicit
    return _libtpu_plugin() or _cpu_plugin() or ""


def uses_kv_store():
    """Whether the PJRT client is created with the job's key-value store
    (PJRT_Client_Create's kv callbacks fed by the c10d store of the first
    process group): $TORCH_TPU_PJRT_KV_STORE ("1" or "0") when set, else for
    every plugin but XLA:CPU, which never calls the callbacks and runs no
    collectives across processes (csrc/distributed/README.md)."""
    explicit = os.environ.get("TORCH_TPU_PJRT_KV_STORE")
    if explicit in ("0", "1"):
        return explicit == "1"
    if explicit:
        raise ValueError(f"TORCH_TPU_PJRT_KV_STORE must be 0 or 1, got {explicit!r}")
    return "xla_cpu" not in os.path.basename(plugin_path())


def device_count_option():
    value = os.environ.get("TORCH_TPU_NUM_DEVICES", "1")
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"TORCH_TPU_NUM_DEVICES must be an integer, got {value!r}") from None
    if n < 1:
        raise ValueError(f"TORCH_TPU_NUM_DEVICES must be at least 1, got {n}")
    return n


def cache_dir():
    if os.environ.get("TORCH_TPU_DISK_CACHE", "1") == "0":
        return ""
    default = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                           "torch_tpu")
    return os.environ.get("TORCH_TPU_CACHE_DIR", default)
