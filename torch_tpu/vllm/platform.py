"""The `tpu` platform as vLLM sees it: device names, the dispatch key, which
worker, attention backend and compile backend serve it, and the config
defaults its runner needs (no CUDA graphs, no custom all-reduce)."""
import os

import torch
from vllm.platforms.interface import Platform, PlatformEnum

import torch_tpu  # noqa: F401  (registers the tpu device)

WORKER = "torch_tpu.vllm.worker.TpuWorker"
ATTENTION = "torch_tpu.vllm.attention.TpuAttentionBackend"


def _register_attention_backend() -> None:
    """Names the backend in vLLM's registry (layers look their backend up by
    name); once per process."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from .attention import TpuAttentionBackend

    if TpuAttentionBackend.get_name() not in AttentionBackendEnum._member_map_:
        register_backend(TpuAttentionBackend.get_name(), ATTENTION)


class TpuPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "tpu"
    device_type: str = "tpu"
    dispatch_key: str = "PrivateUse1"
    ray_device_key: str = ""
    device_control_env_var: str = "TPU_VISIBLE_DEVICES"
    # torch.compile(backend="tpu") for vLLM's own small compiled helpers.
    simple_compile_backend: str = "tpu"
    dist_backend: str = "tpu_dist"

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    @classmethod
    def get_device_uuid(cls, device_id: int = 0) -> str:
        return f"tpu-{device_id}"

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return torch.tpu.mem_get_info(device_id)[1]

    @classmethod
    def get_current_memory_usage(cls, device=None) -> float:
        return float(torch.tpu.memory_allocated(device))

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.tpu.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.manual_seed(seed)

    @classmethod
    def inference_mode(cls):
        # no_grad rather than inference_mode: the KV cache and the persistent
        # input buffers are written in place across steps.
        return torch.no_grad()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return False

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
        _register_attention_backend()
        if attn_selector_config.use_mla or attn_selector_config.use_sparse:
            raise NotImplementedError(
                "torch_tpu's vLLM platform serves standard multi-head / grouped-query "
                "attention; MLA and sparse attention models are not supported on tpu yet.")
        return ATTENTION

    @classmethod
    def verify_quantization(cls, quant: str) -> None:
        raise ValueError(
            f"{quant} quantization is not supported on tpu yet: torch_tpu's vLLM platform serves "
            "unquantized float32, bfloat16 and float16 checkpoints.")

    @classmethod
    def get_punica_wrapper(cls) -> str:
        raise NotImplementedError("LoRA is not supported by torch_tpu's vLLM platform yet.")

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        from vllm.config import CompilationMode
        from vllm.config.compilation import CUDAGraphMode

        parallel = vllm_config.parallel_config
        if parallel.worker_cls == "auto":
            parallel.worker_cls = WORKER
        if parallel.world_size > 1:
            raise NotImplementedError(
                f"torch_tpu's vLLM platform runs one device per engine for now; got "
                f"tensor_parallel_size * pipeline_parallel_size = {parallel.world_size}. "
                "Use tensor_parallel_size=1.")
        parallel.disable_custom_all_reduce = True
        parallel.enable_dbo = False

        cache = vllm_config.cache_config
        if cache.block_size is None or not cache.user_specified_block_size:
            cache.block_size = 16

        scheduler = vllm_config.scheduler_config
        scheduler.async_scheduling = False

        compilation = vllm_config.compilation_config
        compilation.cudagraph_mode = CUDAGraphMode.NONE
        compilation.cudagraph_capture_sizes = []
        # vLLM's own compile pipeline (Inductor passes, piecewise CUDA graphs)
        # is for CUDA: the runner runs the model eagerly on tpu.
        compilation.mode = CompilationMode.NONE
        if vllm_config.model_config is not None:
            vllm_config.model_config.enforce_eager = True

        # Each engine-core or worker process starts its own PJRT client; a
        # forked child would inherit the parent's.
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        os.environ.setdefault("VLLM_DISABLE_SHARED_EXPERTS_STREAM", "1")
