"""nn.Linear on tpu as one op each way (aten::linear and linear_backward
through tpu's autograd kernel, aten/linear_ops.cc), against CPU: outputs
and every gradient, ranks, bias or not, 16-bit, double backward, the
composite for other forms, torch.compile, and the programs a Strict
step launches."""
import pytest
import torch
import torch.nn.functional as F
from torch.autograd.forward_ad import dual_level, make_dual, unpack_dual

import torch_tpu
from conftest import assert_same, strict_programs


def grads_of(device, x, w, b, g, requires=(True, True, True)):
    xs = [t.detach().to(device).requires_grad_(r) if t is not None else None
          for t, r in zip((x, w, b), requires)]
    y = F.linear(*xs)
    y.backward(g.to(device))
    return [y.detach()] + [t.grad for t in xs if t is not None and t.requires_grad]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(8,), (4, 8), (2, 3, 8), (2, 2, 3, 8)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_and_its_gradients_equal_cpu(shape, bias, dtype, highest_precision):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen).to(dtype)
    w = torch.randn(6, 8, generator=gen).to(dtype)
    b = torch.randn(6, generator=gen).to(dtype) if bias else None
    g = torch.randn(shape[:-1] + (6,), generator=gen).to(dtype)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    assert_same(grads_of("tpu", x, w, b, g), grads_of("cpu", x, w, b, g), **tol)


def test_only_the_requested_gradients(highest_precision):
    gen = torch.Generator().manual_seed(1)
    x, w, b, g = (torch.randn(s, generator=gen) for s in [(5, 8), (6, 8), (6,), (5, 6)])
    for requires in [(False, True, True), (True, False, False), (False, False, True)]:
        assert_same(grads_of("tpu", x, w, b, g, requires), grads_of("cpu", x, w, b, g, requires),
                    atol=1e-5, rtol=1e-5)


def test_double_backward_equals_cpu(highest_precision):
    gen = torch.Generator().manual_seed(2)
    x, w, b = (torch.randn(s, generator=gen) for s in [(3, 4), (5, 4), (5,)])

    def run(device):
        xs = [t.detach().to(device).requires_grad_() for t in (x, w, b)]
        gx, = torch.autograd.grad(F.linear(*xs).tanh().sum(), xs[0], create_graph=True)
        gx.square().sum().backward()
        return [t.grad for t in xs]

    assert_same(run("tpu"), run("cpu"), atol=1e-5, rtol=1e-5)


def test_forward_mode_ad_and_mismatched_dtypes_keep_the_composite(highest_precision):
    gen = torch.Generator().manual_seed(3)
    x, t, w = (torch.randn(s, generator=gen) for s in [(3, 4), (3, 4), (5, 4)])

    def jvp(device):
        with dual_level():
            y = F.linear(make_dual(x.to(device), t.to(device)), w.to(device))
            return unpack_dual(y).tangent

    assert_same(jvp("tpu"), jvp("cpu"), atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError) as cpu:
        F.linear(x, w.double())
    with pytest.raises(RuntimeError) as tpu:
        F.linear(x.to("tpu"), w.double().to("tpu"))
    assert type(tpu.value) is type(cpu.value)


def test_compiled_linear_training_equals_cpu(highest_precision):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    ref = [p.detach().clone() for p in model.parameters()]
    x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))

    def train(device, compiled):
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
        with torch.no_grad():
            for p, r in zip(m.parameters(), ref):
                p.copy_(r)
        m.to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        step = torch.compile(m, backend="tpu") if compiled else m
        for _ in range(3):
            loss = F.cross_entropy(step(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
        return [p.detach() for p in m.parameters()]

    expected = train("cpu", False)
    assert_same(train("tpu", True), expected, atol=1e-5, rtol=1e-5)
    assert_same(train("tpu", False), expected, atol=1e-5, rtol=1e-5)


def test_a_strict_layer_is_one_program_forward_and_one_backward(highest_precision):
    layer = torch.nn.Linear(8, 6).to("tpu")
    x = torch.randn(4, 8).to("tpu").requires_grad_()
    forward, backward = strict_programs(lambda: layer(x), torch.randn(4, 6).to("tpu"))
    assert forward == 1
    assert backward == 1  # input, weight and bias gradients together
