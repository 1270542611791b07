"""Shared helpers: every behaviour test compares tpu against CPU PyTorch."""
import os

os.environ.setdefault("TORCH_TPU_DISK_CACHE", "0")  # before torch autoloads torch_tpu

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_tpu  # noqa: E402,F401


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(v) for v in x)
    return x


def to_tpu(x):
    if isinstance(x, torch.Tensor):
        return x.to("tpu")
    if isinstance(x, (list, tuple)):
        return type(x)(to_tpu(v) for v in x)
    return x


def assert_same(actual, expected, atol=None, rtol=None, check_dtype=True):
    """tpu result `actual` equals CPU result `expected` (values, dtype, shape)."""
    if isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e, atol, rtol, check_dtype)
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected
        return
    assert actual.device.type == "tpu", f"expected a tpu tensor, got {actual.device}"
    torch.testing.assert_close(actual.cpu(), expected, atol=atol, rtol=rtol,
                               check_dtype=check_dtype, equal_nan=True)


def check(fn, *args, atol=None, rtol=None, **kwargs):
    """Runs fn on CPU args and on the same args moved to tpu; compares."""
    expected = fn(*args, **kwargs)
    actual = fn(*to_tpu(args), **{k: to_tpu(v) for k, v in kwargs.items()})
    assert_same(actual, expected, atol=atol, rtol=rtol)
    return actual


def check_grad(fn, *args, grad, atol=None, rtol=None):
    """Gradients of fn's float arguments for the output gradient `grad`."""
    def run(device):
        xs = [a.detach().to(device).requires_grad_(a.is_floating_point()) for a in args]
        fn(*xs).backward(grad.to(device))
        return [x.grad for x in xs if x.is_floating_point()]
    assert_same(run("tpu"), run("cpu"), atol=atol, rtol=rtol)


def strict_programs(forward, grad):
    """Programs Strict Eager launches for `forward()` and for the backward
    of its result with output gradient `grad` (each counted to a synchronize)."""
    with torch_tpu.eager_mode("DEFER_NEVER"):
        torch.tpu.synchronize()
        before = torch_tpu.metrics().get("executions", 0)
        out = forward()
        torch.tpu.synchronize()
        middle = torch_tpu.metrics().get("executions", 0)
        out.backward(grad)
        torch.tpu.synchronize()
        return middle - before, torch_tpu.metrics().get("executions", 0) - middle


@pytest.fixture
def highest_precision():
    """f32 matmuls at HIGHEST precision so comparisons against CPU are tight."""
    previous = torch_tpu._C._get_precision_override()
    torch_tpu._C._set_precision(2)
    yield
    torch_tpu._C._set_precision(previous)


def pytest_terminal_summary(terminalreporter, config):
    """Counts per outcome of the bad-input tier, when it ran."""
    import bad_input_cases
    counts = config.stash.get(bad_input_cases.COUNTS_KEY, None)
    if counts:
        terminalreporter.write_line("bad inputs: " + ", ".join(
            f"{k}={v}" for k, v in sorted(counts.items())))
