"""vLLM on `tpu`: an out-of-tree platform plugin for vLLM 0.32.

vLLM discovers it through the `vllm.platform_plugins` entry point that this
package declares (setup.py); `register()` answers whether the tpu platform
applies. Nothing here is imported unless vLLM asks, and nothing here imports
vLLM at `import torch_tpu`.
"""
import os

PLATFORM = "torch_tpu.vllm.platform.TpuPlatform"


def register():
    """vLLM's platform-plugin hook: the platform's qualified name when a
    PJRT plugin is there to run it, else None (vLLM then picks its own).
    `TORCH_TPU_VLLM=0` turns the plugin off."""
    if os.environ.get("TORCH_TPU_VLLM", "1") == "0":
        return None
    from torch_tpu import _plugin

    try:
        path = _plugin.plugin_path()
    except Exception:  # no plugin found: not our platform
        return None
    return PLATFORM if path and os.path.exists(path) else None
