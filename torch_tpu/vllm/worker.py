"""vLLM's worker and model runner on `tpu`.

vLLM's GPU worker and runner do the scheduling-side work (persistent input
batch, block tables, sampling metadata) in device-neutral PyTorch; what is
CUDA in them is memory profiling, CUDA graphs, streams and events. The tpu
worker replaces those parts: the KV cache is sized from the device's free
memory after the weights are loaded, the model runs eagerly (Fused Eager
fuses each step's ops into programs that stay cached), and there are no
graphs to capture.
"""
import contextlib
import dataclasses
import os
import types
import warnings

import torch
import torch_tpu
from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.worker_base import CompilationTimes

from .attention import HOST_COPY, padded_tokens

logger = init_logger(__name__)

# Variables by which a user picks the eager mode (torch_tpu/modes.py); with
# none set the worker runs Fused Eager.
MODE_VARIABLES = ("TORCH_TPU_DEFER_AND_FUSE", "TPU_LAUNCH_BLOCKING", "TORCH_TPU_LAUNCH_BLOCKING")


class _NoStream:
    """Stands in for torch.cuda.Stream: tpu work is ordered on one queue."""

    def __init__(self, *args, **kwargs):
        self.device = torch.device("tpu")

    def wait_stream(self, *args, **kwargs):
        pass


@contextlib.contextmanager
def _no_cuda_streams():
    saved = torch.cuda.Stream
    torch.cuda.Stream = _NoStream
    try:
        yield
    finally:
        torch.cuda.Stream = saved


def _compute_slot_mapping(self, num_reqs: int, query_start_loc: torch.Tensor,
                          positions: torch.Tensor) -> None:
    """BlockTable.compute_slot_mapping in tensor ops (vLLM's is a Triton
    kernel): token t of request r at position p goes to slot
    block_table[r, p // block_size] * block_size + p % block_size; the rest of
    the buffer is padding (-1)."""
    from vllm.v1.worker.block_table import PAD_SLOT_ID, SlotMappingMode

    if self.slot_mapping_mode == SlotMappingMode.NONE:
        return
    num_tokens = positions.shape[0]
    token = torch.arange(num_tokens, device=positions.device)
    request = torch.searchsorted(query_start_loc[1:num_reqs + 1], token, right=True)
    positions = positions.to(torch.int64)
    block = self.block_table.gpu[request, positions // self.block_size].to(torch.int64)
    out = self.slot_mapping.gpu
    out[:num_tokens] = block * self.block_size + positions % self.block_size
    out[num_tokens:] = PAD_SLOT_ID


def _device_table_with_host_copy(self, num_reqs: int) -> torch.Tensor:
    """BlockTable.get_device_tensor, carrying the host rows it was copied from
    so that the attention metadata is built without reading the device."""
    table = self.block_table.gpu[:num_reqs]
    setattr(table, HOST_COPY, self.block_table.cpu[:num_reqs])
    return table


class TpuModelRunner(GPUModelRunner):
    def __init__(self, vllm_config, device: torch.device):
        with _no_cuda_streams():
            super().__init__(vllm_config, device)
        self.use_cuda_graph = False
        self._adapt_block_tables()

    def _adapt_block_tables(self) -> None:
        for table in self.input_batch.block_table.block_tables:
            if table.dcp_world_size != 1:
                raise NotImplementedError("decode context parallelism is not supported on tpu")
            table.compute_slot_mapping = types.MethodType(_compute_slot_mapping, table)
            table.get_device_tensor = types.MethodType(_device_table_with_host_copy, table)

    def _determine_batch_execution_and_padding(self, num_tokens, *args, **kwargs):
        """Pads each step's token count to a power of two (attention.py): the
        step's programs are then compiled once per bucket, not per count."""
        mode, batch, *rest = super()._determine_batch_execution_and_padding(
            num_tokens, *args, **kwargs)
        padded = padded_tokens(num_tokens, self.max_num_tokens)
        return (mode, dataclasses.replace(batch, num_tokens=padded), *rest)

    def initialize_kv_cache(self, *args, **kwargs):
        super().initialize_kv_cache(*args, **kwargs)
        self._adapt_block_tables()  # the input batch may have been rebuilt

    def _sync_device(self) -> None:
        torch.tpu.synchronize()

    def _to_list(self, sampled_token_ids: torch.Tensor) -> list[list[int]]:
        return sampled_token_ids.tolist()

    def initialize_kv_cache_tensors(self, kv_cache_config, kernel_block_sizes,
                                    kv_cache_allocation_context=None):
        """One tensor per layer, `[num_blocks, block_size, kv_heads, 2 * head_size]`
        (attention.py), instead of CUDA's views into one shared byte buffer: each
        layer's cache is its own device buffer, written in place every step."""
        from vllm.v1.kv_cache_interface import AttentionSpec
        from vllm.v1.worker.utils import bind_kv_cache

        kv_caches = {}
        for group in kv_cache_config.kv_cache_groups:
            spec = group.kv_cache_spec
            if not isinstance(spec, AttentionSpec):
                raise NotImplementedError(
                    f"torch_tpu's vLLM runner serves attention KV caches only; this model "
                    f"needs a {type(spec).__name__} cache.")
            shape = (kv_cache_config.num_blocks, spec.block_size, spec.num_kv_heads,
                     2 * spec.head_size)
            for name in group.layer_names:
                kv_caches[name] = torch.zeros(shape, dtype=spec.dtype, device=self.device)
        for layer_name, target in self.shared_kv_cache_layers.items():
            kv_caches[layer_name] = kv_caches[target]
        bind_kv_cache(kv_caches, self.compilation_config.static_forward_context, self.kv_caches,
                      kv_cache_groups=kv_cache_config.kv_cache_groups)
        return kv_caches

    def _zero_block_ids(self, block_ids: list[int]) -> None:
        # Blocks handed out again start as zeros, as CUDA's runner leaves them.
        if not block_ids:
            return
        index = torch.tensor(block_ids, dtype=torch.long).to(self.device)
        seen = set()
        for kv in self.kv_caches:
            if isinstance(kv, torch.Tensor) and id(kv) not in seen:
                seen.add(id(kv))
                kv.index_fill_(0, index, 0)


class TpuWorker(Worker):
    def init_device(self):
        self.device = torch.device("tpu", self.local_rank)
        torch.tpu.set_device(self.device)
        # Fused Eager unless the environment chose a mode: a step's ops become
        # one program per step shape (benchmarks/vllm_serve.py: 1.2-1.4x Strict).
        if not any(v in os.environ for v in MODE_VARIABLES):
            torch_tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE)
        # The step shapes vary over a bounded set of buckets by design; the
        # recompilation warning's advice (mark_dynamic) does not apply here.
        warnings.filterwarnings("ignore", message=r"torch_tpu: .* has compiled new programs")
        init_worker_distributed_environment(
            self.vllm_config, self.rank, self.distributed_init_method, self.local_rank,
            current_platform.dist_backend)
        set_random_seed(self.model_config.seed)
        self.model_runner = TpuModelRunner(self.vllm_config, self.device)

    def _maybe_get_memory_pool_context(self, tag: str):
        return contextlib.nullcontext()  # no sleep-mode memory pools on tpu

    @torch.no_grad()
    def determine_available_memory(self) -> int:
        explicit = self.cache_config.kv_cache_memory_bytes
        if explicit:
            return explicit
        free, total = torch.tpu.mem_get_info(self.device)
        used = total - free
        budget = int(total * self.cache_config.gpu_memory_utilization) - used
        if budget <= 0:
            raise ValueError(
                f"No tpu memory is left for the KV cache: the device has {total / 2**30:.2f} GiB, "
                f"{used / 2**30:.2f} GiB are in use after loading the model, and "
                f"gpu_memory_utilization={self.cache_config.gpu_memory_utilization} allows "
                f"{total * self.cache_config.gpu_memory_utilization / 2**30:.2f} GiB. Raise "
                "gpu_memory_utilization or set kv_cache_memory_bytes.")
        return budget

    def compile_or_warm_up_model(self) -> CompilationTimes:
        set_random_seed(self.model_config.seed)
        return CompilationTimes(language_model=0.0, encoder=0.0)

    def sleep(self, level: int = 1) -> None:
        logger.warning("sleep mode is not supported on tpu; ignored.")

    def wake_up(self, tags=None) -> None:
        logger.warning("sleep mode is not supported on tpu; ignored.")
