"""The unboxed entry points of the lowered kernel (csrc/aten/unboxed.cc):
arguments are borrowed, so results, aliasing and refcounts must be exactly
as through the boxed path, and errors must leave the arguments intact."""
import sys

import pytest
import torch

import torch_tpu


@pytest.fixture(params=["DEFER_NEVER", "DEFER_AND_FUSE"])
def mode(request):
    with torch_tpu.eager_mode(request.param):
        yield request.param


def pair():
    x, y = torch.randn(5, 3), torch.randn(5, 3)
    return x, y, x.to("tpu"), y.to("tpu")


def test_functional_signatures_match_cpu(mode):
    x, y, a, b = pair()
    w = torch.rand(5, 3)
    c = w.to("tpu")
    cases = [
        (lambda p, q, r: p + q, "T,T,S"),
        (lambda p, q, r: torch.sub(p, q, alpha=0.5), "T,T,S alpha"),
        (lambda p, q, r: p * 2.5, "T,wrapped"),
        (lambda p, q, r: torch.tanh(p), "T"),
        (lambda p, q, r: torch.add(p, 3, alpha=2), "T,S,S"),
        (lambda p, q, r: torch.where(r > 0.5, p, q), "T,T,T"),
        (lambda p, q, r: torch.addcmul(p, q, r, value=0.3), "T,T,T,S"),
        (lambda p, q, r: torch.lerp(p, q, 0.25), "lerp"),
    ]
    for fn, what in cases:
        torch.testing.assert_close(fn(a, b, c).cpu(), fn(x, y, w), msg=what)


def test_inplace_returns_self_and_out_returns_out(mode):
    x, y, a, b = pair()
    r = a.add_(b, alpha=2)
    assert r is a
    x.add_(y, alpha=2)
    torch.testing.assert_close(a.cpu(), x)
    r = a.mul_(0.5)
    assert r is a
    x.mul_(0.5)
    torch.testing.assert_close(a.cpu(), x)
    out = torch.empty(5, 3, device="tpu")
    r = torch.add(a, b, out=out)
    assert r is out
    torch.testing.assert_close(out.cpu(), x + y)


def test_inplace_on_a_view_writes_the_base(mode):
    x, y, a, b = pair()
    a[1:3].add_(b[1:3])
    x[1:3].add_(y[1:3])
    torch.testing.assert_close(a.cpu(), x)


def test_refcounts_unchanged(mode):
    _, _, a, b = pair()
    before = (sys.getrefcount(a), sys.getrefcount(b))
    for _ in range(10):
        c = a + b
        a.add_(b)
        torch.add(a, b, out=c)
    torch_tpu.sync()
    assert (sys.getrefcount(a), sys.getrefcount(b)) == before


def test_errors_leave_arguments_usable(mode):
    x, y, a, b = pair()
    before = sys.getrefcount(a)
    with pytest.raises(RuntimeError, match="broadcast|must match"):
        a + torch.randn(4, device="tpu")
    with pytest.raises(RuntimeError, match="same device"):
        a + y
    assert sys.getrefcount(a) == before
    torch.testing.assert_close((a + b).cpu(), x + y)


def test_autograd_through_unboxed_ops(mode):
    x = torch.randn(4, 4, requires_grad=True)
    a = x.detach().to("tpu").requires_grad_()
    (torch.tanh(a * 3.0) + a).sum().backward()
    (torch.tanh(x * 3.0) + x).sum().backward()
    torch.testing.assert_close(a.grad.cpu(), x.grad)


def test_kernel_timing_counts_only_when_on():
    _, _, a, b = pair()
    torch_tpu.reset_metrics()
    a + b
    assert "kernel_calls" not in torch_tpu.metrics()
    torch_tpu.time_kernels(True)
    try:
        for _ in range(5):
            a + b
    finally:
        torch_tpu.time_kernels(False)
    m = torch_tpu.metrics()
    assert m["kernel_calls"] == 5
    assert m["kernel_s"] > 0
    a + b
    assert torch_tpu.metrics()["kernel_calls"] == 5
