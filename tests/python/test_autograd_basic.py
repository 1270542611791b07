"""Autograd on tpu through PyTorch's own derivative formulas, against CPU."""
import pytest
import torch

from conftest import assert_same


def needs_lowering(fn):
    """Runs fn; skips (with the op named) when a backward op is not lowered yet."""
    try:
        return fn()
    except NotImplementedError as e:
        pytest.skip(f"needs a lowering: {str(e).splitlines()[0]}")


def grads(fn, inputs, grad_out, device):
    """d(fn)/d(inputs) · grad_out, computed on `device`; grads returned as is."""
    leaves = [x.detach().clone().to(device).requires_grad_() for x in inputs]
    out = fn(*leaves)
    out.backward(grad_out.to(device))
    return out, [x.grad for x in leaves]


def positive(*shape):
    return torch.rand(*shape) + 0.5


ELEMENTWISE = {
    "add": (lambda a, b: a + b * 2, [torch.randn(3, 4), torch.randn(3, 4)]),
    "add_broadcast": (lambda a, b: a + b, [torch.randn(3, 4), torch.randn(4)]),  # needs sum
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=-3), [torch.randn(3, 4), torch.randn(3, 4)]),
    "mul": (lambda a, b: a * b, [torch.randn(3, 4), torch.randn(3, 4)]),
    "mul_broadcast": (lambda a, b: a * b, [torch.randn(3, 4), torch.randn(3, 1)]),
    "div": (lambda a, b: a / b, [torch.randn(3, 4), positive(3, 4)]),
    "exp": (lambda a: torch.exp(a) * a, [torch.randn(3, 4)]),
    "tanh": (lambda a: torch.tanh(a), [torch.randn(3, 4)]),
    "sigmoid": (lambda a: torch.sigmoid(a), [torch.randn(3, 4)]),
    "where": (lambda a, b: torch.where(a > 0, a * 2, b), [torch.randn(3, 4), torch.randn(3, 4)]),
    "clamp": (lambda a: torch.clamp(a, -0.5, 0.5), [torch.randn(3, 4)]),
    "chain": (lambda a, b: (a * b + 1) / b - a, [torch.randn(2, 3), positive(2, 3)]),
}


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_backward_matches_cpu(name):
    fn, inputs = ELEMENTWISE[name]
    grad_out = torch.randn(fn(*inputs).shape)
    out_cpu, expected = grads(fn, inputs, grad_out, "cpu")
    out_tpu, actual = needs_lowering(lambda: grads(fn, inputs, grad_out, "tpu"))
    assert_same(out_tpu.detach(), out_cpu.detach())
    for a, e in zip(actual, expected):
        assert a.device.type == "tpu"
        assert_same(a, e, atol=1e-5, rtol=1e-5)


def test_grad_accumulates_across_backward_calls():
    x = torch.randn(3).to("tpu").requires_grad_()
    g = torch.tensor([1.0, 2.0, 3.0])
    (x * 2).backward(g.to("tpu"))
    (x * 3).backward(g.to("tpu"))
    assert x.grad.device.type == "tpu"
    assert_same(x.grad, g * 5)


def test_grad_flows_back_to_cpu_leaf():
    x = torch.randn(4, requires_grad=True)
    y = x.to("tpu")
    assert y.grad_fn is not None
    (y * y).backward(torch.ones(4).to("tpu"))
    assert x.grad.device.type == "cpu"
    torch.testing.assert_close(x.grad, 2 * x.detach())


def test_inplace_on_leaf_and_leaf_view_errors_like_cpu():
    for device in ("cpu", "tpu"):
        x = torch.randn(3, 4).to(device).requires_grad_()
        with pytest.raises(RuntimeError) as leaf:
            x.add_(1)
        with pytest.raises(RuntimeError) as view:
            x[0].mul_(2)
        if device == "cpu":
            expected = (str(leaf.value), str(view.value))
    assert (str(leaf.value), str(view.value)) == expected
    assert "leaf Variable" in expected[1] and "view" in expected[1]


def test_inplace_on_non_leaf_view_backward():
    def fn(a):
        y = a * 1
        y[1:].mul_(3)
        return y

    x = torch.randn(3, 2)
    g = torch.randn(3, 2)
    _, expected = grads(fn, [x], g, "cpu")
    _, actual = needs_lowering(lambda: grads(fn, [x], g, "tpu"))
    assert_same(actual[0], expected[0])


def test_retain_grad():
    x = torch.randn(3).to("tpu").requires_grad_()
    y = x * 2
    y.retain_grad()
    z = y * y
    g = torch.tensor([1.0, -1.0, 0.5])
    z.backward(g.to("tpu"))
    assert y.grad.device.type == "tpu"
    y_cpu = x.detach().cpu() * 2
    assert_same(y.grad, 2 * y_cpu * g)
    assert_same(x.grad, 4 * y_cpu * g)


def test_no_grad():
    x = torch.randn(3).to("tpu").requires_grad_()
    with torch.no_grad():
        y = x * 2 + 1
        x.mul_(2)  # allowed on a leaf under no_grad
    assert not y.requires_grad and y.grad_fn is None
    assert x.requires_grad and x.is_leaf
    assert (x * 1).requires_grad


def test_inference_mode():
    x = torch.randn(3).to("tpu")
    w = torch.randn(3).to("tpu").requires_grad_()
    with torch.inference_mode():
        y = x * w
        assert y.is_inference()
        assert not y.requires_grad
    assert not x.is_inference()
    with pytest.raises(RuntimeError, match="[Ii]nference tensors"):
        (y * w).backward(torch.ones(3).to("tpu"))


def test_detach_shares_storage():
    x = torch.randn(3).to("tpu").requires_grad_()
    d = x.detach()
    assert not d.requires_grad
    assert d.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    with torch.no_grad():
        d.add_(1)
    assert_same(x.detach(), d.cpu())
