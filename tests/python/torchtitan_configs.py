"""TorchTitan config functions for tests/python/test_torchtitan.py, selected
with TorchTitan's own `--module torchtitan_configs --config NAME` (its
ConfigManager imports any module on the path that defines them)."""
from torchtitan.models.llama3.config_registry import llama3_debugmodel_varlen_attn


def llama3_debugmodel_varlen_attn_2layers():
    """TorchTitan's llama3 debug model with varlen attention, cut from 6 to 2
    layers to fit a 2-core machine's test budget (dims, heads, vocabulary as
    TorchTitan ships them)."""
    config = llama3_debugmodel_varlen_attn()
    config.model_spec.model.layers = config.model_spec.model.layers[:2]
    return config
