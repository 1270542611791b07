"""Runtime controls: synchronization, metrics, the compile cache, fallback."""
from . import _C


def sync():
    """Flushes pending work and waits for the device (torch.tpu.synchronize)."""
    _C._synchronize()


def metrics() -> dict:
    return dict(_C._metrics())


def metrics_report() -> str:
    """The engine's counters, then the compiles of each bucketed graph of
    torch.compile per bucket (torch_tpu/dynamic_shapes.py)."""
    report = _C._metrics_report()
    from .compiler import compile_metrics

    per_graph = compile_metrics().get("bucket_compiles")
    if per_graph:
        lines = ["", "compiles per bucket (torch.compile, bucketed dynamic sizes):"]
        for graph, per_bucket in per_graph.items():
            for bucket, n in per_bucket.items():
                lines.append(f"  {graph} [{bucket}]: {n}")
        report = report.rstrip("\n") + "\n".join(lines) + "\n"
    return report


def reset_metrics() -> None:
    _C._reset_metrics()


def time_kernels(on: bool = True) -> None:
    """Adds ``kernel_s`` and ``kernel_calls`` to :func:`metrics`: host time spent
    inside torch_tpu's op kernel (argument checks, then recording in Fused
    Eager or launching in Strict Eager), without Python, PyTorch's dispatcher
    and autograd. Off by default: it reads the clock twice per op."""
    _C._set_kernel_timing(bool(on))


def cache_stats() -> dict:
    return dict(_C._cache_stats())


def clear_cache(disk: bool = False) -> None:
    _C._cache_clear(disk)


def set_cpu_fallback(enabled: bool) -> None:
    """Runs ops without a tpu lowering on the CPU (one warning per op)."""
    _C._set_cpu_fallback(bool(enabled))


def fallback_counts() -> dict:
    return dict(_C._fallback_counts())


def native_ops() -> list:
    """ATen operators served natively by tpu lowerings."""
    return list(_C._native_ops())


def set_index_checks(enabled: bool) -> None:
    """Turns the device-side index checks on or off (on by default;
    TORCH_TPU_INDEX_CHECKS=0 starts with them off). An index out of range in
    gather, scatter, index_select, embedding, advanced indexing or a loss's
    targets raises IndexError at the next host read or synchronize, naming
    the op and its line; off, such indices are clamped or dropped silently,
    and the programs are a little faster."""
    _C._set_index_checks(bool(enabled))


def index_checks() -> bool:
    return _C._index_checks()
