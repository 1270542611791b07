"""StableHLO custom kernels (torch_tpu.library): a user's StableHLO function as
the tpu kernel of a torch.library operator, against the operator's CPU
kernel, in every eager mode, under torch.compile and through autograd."""
import functools

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
import torch_tpu.library

from conftest import assert_same

MODES = ["DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "DEFER_AND_FUSE"]


def _silu_text(shape):
    t = "tensor<" + "x".join(map(str, shape)) + "xf32>"
    return f"""
      func.func @main(%x: {t}) -> {t} {{
        %s = stablehlo.logistic %x : {t}
        %y = stablehlo.multiply %x, %s : {t}
        return %y : {t}
      }}"""


# A module as jax.export prints one: attributes on the module and on the
# entry's arguments and results, and a private helper function.
_SILU_GRAD_MODULE = """
module @jit_silu_grad attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4x8xf32> {mhlo.layout_mode = "default"}, %arg1: tensor<4x8xf32>) -> (tensor<4x8xf32> {jax.result_info = "result"}) {
    %0 = call @sig(%arg0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %c1 = stablehlo.constant dense<1.0> : tensor<4x8xf32>
    %1 = stablehlo.subtract %c1, %0 : tensor<4x8xf32>
    %2 = stablehlo.multiply %arg0, %1 : tensor<4x8xf32>
    %3 = stablehlo.add %c1, %2 : tensor<4x8xf32>
    %4 = stablehlo.multiply %0, %3 : tensor<4x8xf32>
    %5 = stablehlo.multiply %arg1, %4 : tensor<4x8xf32>
    return %5 : tensor<4x8xf32>
  }
  func.func private @sig(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %0 = stablehlo.logistic %x : tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}
"""

# Top-3 along the last dimension of a [4, 8] f32 tensor: values and indices
# (a sort of (value, index) pairs, descending, then a slice).
_TOPK_TEXT = """
func.func @main(%x: tensor<4x8xf32>) -> (tensor<4x3xf32>, tensor<4x3xi64>) {
  %i = stablehlo.iota dim = 1 : tensor<4x8xi64>
  %s:2 = "stablehlo.sort"(%x, %i) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i64>, %d: tensor<i64>):
    %gt = stablehlo.compare GT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %gt : tensor<i1>
  }) {dimension = 1 : i64, is_stable = true} : (tensor<4x8xf32>, tensor<4x8xi64>) -> (tensor<4x8xf32>, tensor<4x8xi64>)
  %v = stablehlo.slice %s#0 [0:4, 0:3] : (tensor<4x8xf32>) -> tensor<4x3xf32>
  %j = stablehlo.slice %s#1 [0:4, 0:3] : (tensor<4x8xi64>) -> tensor<4x3xi64>
  return %v, %j : tensor<4x3xf32>, tensor<4x3xi64>
}
"""


@torch.library.custom_op("tt_test::silu", mutates_args=())
def silu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


@silu.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("tt_test::silu_backward", mutates_args=())
def silu_backward(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(x)
    return grad * s * (1 + x * (1 - s))


@silu_backward.register_fake
def _(x, grad):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return silu_backward(x, grad)


silu.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("tt_test::top3", mutates_args=())
def top3(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    v, i = torch.topk(x, 3, dim=-1)
    return v, i


@top3.register_fake
def _(x):
    return x.new_empty(x.shape[:-1] + (3,)), x.new_empty(x.shape[:-1] + (3,), dtype=torch.long)


torch_tpu.library.register_stablehlo_kernel(silu, _silu_text((4, 8)))
torch_tpu.library.register_stablehlo_kernel(silu, _silu_text((16,)))  # a second signature
torch_tpu.library.register_stablehlo_kernel(silu_backward, _SILU_GRAD_MODULE)
torch_tpu.library.register_stablehlo_kernel("tt_test::top3", _TOPK_TEXT)


@pytest.mark.parametrize("mode", MODES)
def test_kernel_equals_the_cpu_operator_in_every_mode(mode):
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    v = torch.randn(16, generator=torch.Generator().manual_seed(1))
    with torch_tpu.eager_mode(mode):
        y = silu(x.to("tpu"))
        w = silu(v.to("tpu"))
        values, indices = top3(x.to("tpu") * 2)
    assert_same(y, silu(x), atol=1e-6, rtol=1e-6)
    assert_same(w, silu(v), atol=1e-6, rtol=1e-6)
    ref_v, ref_i = top3(x * 2)
    assert_same(values, ref_v)
    assert torch.equal(indices.cpu(), ref_i)


@pytest.mark.parametrize("mode", MODES)
def test_autograd_through_a_kernel_backward(mode):
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(2), requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    with torch_tpu.eager_mode(mode):
        silu(xt).square().sum().backward()
    silu(x).square().sum().backward()
    assert_same(xt.grad, x.grad, atol=1e-5, rtol=1e-5)


def test_a_model_trained_in_fused_eager_and_compiled_equals_cpu():
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.b = torch.nn.Linear(8, 2)

        def forward(self, x):
            return self.b(silu(self.a(x)))

    cpu = Net()
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))
    y = torch.randint(0, 2, (4,), generator=torch.Generator().manual_seed(4))
    results = {}
    for name in ("cpu", "fused", "compiled"):
        model = Net()
        model.load_state_dict(cpu.state_dict())
        device = "cpu" if name == "cpu" else "tpu"
        model.to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        fwd = torch.compile(model, backend="tpu") if name == "compiled" else model
        with torch.tpu.precision("highest"), torch_tpu.eager_mode(
                "DEFER_AND_FUSE" if name == "fused" else "DEFER_NEVER"):
            for _ in range(5):
                loss = F.cross_entropy(fwd(x.to(device)), y.to(device))
                opt.zero_grad()
                loss.backward()
                opt.step()
        results[name] = (loss.detach(), [p.detach() for p in model.parameters()])
    for name in ("fused", "compiled"):
        assert_same(results[name][0], results["cpu"][0], atol=1e-5, rtol=1e-5)
        for p, q in zip(results[name][1], results["cpu"][1]):
            assert_same(p, q, atol=1e-5, rtol=1e-5)


def test_a_call_without_a_kernel_for_its_types_raises_and_the_process_goes_on():
    with pytest.raises(RuntimeError, match=r"no StableHLO kernel of tt_test::silu takes \(tensor<3x3xf32>\)"):
        silu(torch.ones(3, 3, device="tpu")).cpu()
    assert_same(silu(torch.ones(16, device="tpu")), silu(torch.ones(16)))


def test_bad_registrations_raise_clear_errors():
    lib = torch.library.Library("tt_test_bad", "DEF")
    lib.define("scaled(Tensor x, float s) -> Tensor")
    lib.define("inplace(Tensor(a!) x) -> Tensor(a!)")
    lib.define("twice(Tensor x) -> Tensor")
    with pytest.raises(ValueError, match="takes tensors only; tt_test_bad::scaled's argument 's' is float"):
        torch_tpu.library.register_stablehlo_kernel("tt_test_bad::scaled", _silu_text((4,)))
    with pytest.raises(ValueError, match="writes its argument 'x'"):
        torch_tpu.library.register_stablehlo_kernel("tt_test_bad::inplace", _silu_text((4,)))
    with pytest.raises(ValueError, match="no operator tt_test_bad::missing is defined"):
        torch_tpu.library.register_stablehlo_kernel("tt_test_bad::missing", _silu_text((4,)))
    with pytest.raises(ValueError, match="defines no func.func"):
        torch_tpu.library.register_stablehlo_kernel("tt_test_bad::twice", "stablehlo.add")
    with pytest.raises(ValueError, match="dynamic dimension"):
        torch_tpu.library.register_stablehlo_kernel(
            "tt_test_bad::twice", "func.func @main(%x: tensor<?xf32>) -> tensor<?xf32> { return %x : tensor<?xf32> }")
    with pytest.raises(ValueError, match="takes 2 tensors; the operator takes 1"):
        torch_tpu.library.register_stablehlo_kernel("tt_test_bad::twice", _SILU_GRAD_MODULE)
    with pytest.raises(ValueError, match=r"already has a StableHLO kernel taking \(tensor<4x8xf32>\)"):
        torch_tpu.library.register_stablehlo_kernel(silu, _silu_text((4, 8)))
    with pytest.raises(TypeError, match="not int"):
        torch_tpu.library.register_stablehlo_kernel(3, _silu_text((4,)))


def test_fake_function_and_kernel_disagreeing_is_an_error():
    lib = torch.library.Library("tt_test_fake", "DEF")
    lib.define("wrong(Tensor x) -> Tensor")
    lib.impl("wrong", lambda x: x.clone(), "CPU")
    lib.impl("wrong", lambda x: x.new_empty(x.shape), "Meta")
    # The kernel returns a [4] result where the meta function says [4, 8].
    torch_tpu.library.register_stablehlo_kernel("tt_test_fake::wrong", """
      func.func @main(%x: tensor<4x8xf32>) -> tensor<4xf32> {
        %z = stablehlo.constant dense<0.0> : tensor<f32>
        %r = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [1] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32>
        return %r : tensor<4xf32>
      }""")
    with pytest.raises(RuntimeError, match=r"returns tensor<4xf32> as result 0; the operator's fake function says tensor<4x8xf32>"):
        torch.ops.tt_test_fake.wrong(torch.ones(4, 8, device="tpu")).cpu()


def test_registered_kernels_are_listed():
    listed = dict(torch_tpu.library.stablehlo_kernels())
    assert listed.get("tt_test::top3", "").startswith("tt_kernel_")


def test_kernel_is_inlined_into_the_fused_program():
    x = torch.randn(4, 8, device="tpu")
    with torch_tpu.eager_mode("DEFER_AND_FUSE"):
        torch.tpu.synchronize()
        y = silu(x + 1) * 2
        text = torch_tpu._C._flush_text()
    assert '"func.call"' in text and "func.func private @tt_kernel_" in text
    assert "stablehlo.add" in text and "stablehlo.multiply" in text  # the ops around it, one program
    assert_same(y, silu(x.cpu() + 1) * 2, atol=1e-6, rtol=1e-6)


def test_user_kernels_are_listed_apart_from_the_backends_own():
    from torch_tpu.tools import coverage
    rows = [r for r in coverage.op_list() if r["op"].startswith("tt_test::")]
    assert {r["op"] for r in rows} >= {"tt_test::silu", "tt_test::top3"}
    assert all(r["kind"] == "user" and r["family"] == "stablehlo" for r in rows)
    overloads, native = coverage.registrations()
    assert not [o for o in overloads if o.startswith("tt_test")]


@functools.lru_cache(maxsize=None)
def _example(name):
    import importlib.util
    import os

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "examples", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("mode,compiled", [("DEFER_AND_FUSE", False), ("DEFER_NEVER", True),
                                           ("DEFER_NEVER", False)])
def test_stablehlo_topk_example_routes_a_trained_moe_as_on_cpu(mode, compiled):
    """examples/stablehlo_topk.py: the StableHLO top-2 as a mixture-of-experts
    router, trained (SGD, 5 steps) in Fused Eager, compiled and Strict."""
    example = _example("stablehlo_topk")
    if not any(op == "examples::top2" for op, _ in torch_tpu.library.stablehlo_kernels()):
        example.register(rows=32, experts=4)
    cpu_loss, cpu_params = example.train("cpu")
    with torch.tpu.precision("highest"):
        loss, params = example.train("tpu", mode, compiled)
    torch.testing.assert_close(loss, cpu_loss, atol=1e-5, rtol=1e-5)
    for p, q in zip(params, cpu_params):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-5)
    # tpu runs the StableHLO kernel: a shape it has none for is refused.
    with pytest.raises(Exception, match="top2"):
        example.top2(torch.randn(5, 4).to("tpu"))
