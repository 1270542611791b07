"""JAX and Pallas kernels as tpu ops (torch.tpu.pallas): jax_op against CPU
PyTorch (the Pallas RMSNorm and flash attention of examples/, a jax.numpy
kernel with jax.vjp), forward and backward, in Strict and Fused Eager and
under torch.compile; a model trained with one; kernel files run where JAX cannot
be imported; Inductor's Pallas path on tpu tensors; bad kernels."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
import torch_tpu.library
from conftest import assert_same

jax = pytest.importorskip("jax", reason="JAX (the pallas extra, scripts/setup.sh) is not installed")
import jax.numpy as jnp  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _example(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Dynamo imports a traced function's module by name
    spec.loader.exec_module(module)
    return module


example = _example("pallas_rms_norm")
flash = _example("pallas_flash_attention")

MODES = ["DEFER_NEVER", "DEFER_AND_FUSE"]

rms_norm = example.register("tt_jax")
flash_attention = flash.register("tt_jax")


def softplus_and_square(x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Two results, autograd through jax.vjp."""
    return jnp.logaddexp(x, 0.0) * y, jnp.square(x - y)


softplus_square = torch.tpu.pallas.jax_op("tt_jax::softplus_square", softplus_and_square, vjp=True)


def softplus_square_reference(x, y):
    return F.softplus(x) * y, (x - y).square()


def _inputs(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) for s in shapes]


def _grads(fn, inputs, device):
    leaves = [t.detach().to(device).requires_grad_() for t in inputs]
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o * torch.arange(o.numel(), device=device).reshape(o.shape).sin()).sum() for o in outs)
    loss.backward()
    return [o.detach() for o in outs], [t.grad for t in leaves]


@pytest.mark.parametrize("mode", MODES)
def test_pallas_rms_norm_forward_and_backward_equal_cpu(mode):
    x, w = _inputs((16, 32), (32,))
    with torch_tpu.eager_mode(mode):
        outs, grads = _grads(rms_norm, (x, w), "tpu")
    ref_outs, ref_grads = _grads(example.rms_norm_reference, (x, w), "cpu")
    assert_same(outs, ref_outs, atol=1e-5, rtol=1e-5)
    assert_same(grads, ref_grads, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", ["DEFER_AND_FUSE", "compiled"])  # Strict: as RMSNorm's (CI time)
def test_pallas_flash_attention_forward_and_backward_equal_cpu(mode):
    q, k, v = _inputs((1, 2, 32, 16), (1, 2, 32, 16), (1, 2, 32, 16), seed=12)
    fn = torch.compile(flash_attention, backend="tpu") if mode == "compiled" else flash_attention
    with torch_tpu.eager_mode("DEFER_NEVER" if mode == "compiled" else mode):
        outs, grads = _grads(fn, (q, k, v), "tpu")
    ref_outs, ref_grads = _grads(flash.attention_reference, (q, k, v), "cpu")
    assert_same(outs, ref_outs, atol=1e-5, rtol=1e-5)
    assert_same(grads, ref_grads, atol=1e-4, rtol=1e-4)


def test_a_compiled_kernel_called_at_new_sizes_compiles_again():
    """A kernel has one export per input signature. Called through
    torch.compile at a second size, Dynamo makes the size dynamic on its own
    (automatic dynamic shapes; it also did when another kernel op had been
    compiled at other sizes: they share KernelOp.__call__): the kernel's fake
    function specializes it, a guard, instead of failing the call. A size the
    user marked dynamic is refused by Dynamo, naming it."""
    torch._dynamo.reset()
    fn = torch.compile(rms_norm, backend="tpu")
    w = torch.randn(32)
    for n in (8, 16, 24):
        x = torch.randn(n, 32)
        assert_same(fn(x.to("tpu"), w.to("tpu")), example.rms_norm_reference(x, w), atol=1e-5, rtol=1e-5)
    x = torch.randn(40, 32, device="tpu")
    torch._dynamo.mark_dynamic(x, 0)
    with pytest.raises(Exception, match=r"marked .*size\(\)\[0\] as dynamic"):
        fn(x, w.to("tpu"))
    torch._dynamo.reset()


@pytest.mark.parametrize("mode", MODES)
def test_jax_numpy_kernel_with_vjp_equals_cpu(mode):
    x, y = _inputs((4, 8), (4, 8), seed=1)
    with torch_tpu.eager_mode(mode):
        outs, grads = _grads(softplus_square, (x, y), "tpu")
    ref_outs, ref_grads = _grads(softplus_square_reference, (x, y), "cpu")
    assert_same(outs, ref_outs, atol=1e-5, rtol=1e-5)
    assert_same(grads, ref_grads, atol=1e-5, rtol=1e-5)


def test_kernels_inside_a_compiled_graph_equal_cpu():
    def fn(op_norm, op_pair, x, w, y):
        a, b = op_pair(op_norm(x, w), y)
        return a + b.mean()

    x, w, y = _inputs((16, 32), (32,), (16, 32), seed=2)
    compiled = torch.compile(lambda *t: fn(rms_norm, softplus_square, *t), backend="tpu")
    outs, grads = _grads(compiled, (x, w, y), "tpu")
    ref_outs, ref_grads = _grads(
        lambda *t: fn(example.rms_norm_reference, softplus_square_reference, *t), (x, w, y), "cpu")
    assert_same(outs, ref_outs, atol=1e-5, rtol=1e-5)
    assert_same(grads, ref_grads, atol=1e-4, rtol=1e-4)


def test_the_cpu_operator_runs_the_jax_function():
    x, w = _inputs((8, 32), (32,), seed=3)
    assert torch.allclose(rms_norm(x, w), example.rms_norm_reference(x, w), atol=1e-5, rtol=1e-5)


def test_bfloat16_inputs_are_their_own_signature():
    x, y = (t.bfloat16() for t in _inputs((4, 8), (4, 8), seed=11))
    a, b = softplus_square(x.to("tpu"), y.to("tpu"))
    ref_a, ref_b = softplus_square_reference(x.float(), y.float())
    assert a.dtype == torch.bfloat16
    assert_same(a, ref_a.bfloat16(), atol=3e-2, rtol=3e-2)
    assert_same(b, ref_b.bfloat16(), atol=3e-2, rtol=3e-2)
    cpu_a, _ = softplus_square(x, y)  # the CPU kernel: JAX on the host
    assert cpu_a.dtype == torch.bfloat16 and torch.allclose(cpu_a.float(), a.cpu().float())


def test_decorator_form_and_64_bit_inputs():
    @torch.tpu.pallas.jax_op("tt_jax::shifted_count")
    def shifted_count(x: jax.Array) -> jax.Array:
        return x + jnp.arange(x.shape[-1])  # int64 in, int64 out (JAX's 64-bit mode for this call)

    x = torch.arange(12).reshape(3, 4)
    assert_same(shifted_count(x.to("tpu")), x + torch.arange(4))


def scaled_power(x: jax.Array, p: int, scale: float) -> jax.Array:
    """Static arguments: one kernel per (p, scale)."""
    return x ** p * scale


power = torch.tpu.pallas.jax_op("tt_jax::scaled_power", scaled_power, vjp=True)


@pytest.mark.parametrize("mode", MODES)
def test_static_arguments_are_one_kernel_each(mode):
    x, = _inputs((4, 8), seed=13)
    with torch_tpu.eager_mode(mode):
        for p, scale in ((2, 0.5), (3, 2)):
            outs, grads = _grads(lambda t: power(t, p, scale=scale), (x,), "tpu")
            ref_outs, ref_grads = _grads(lambda t: t ** p * scale, (x,), "cpu")
            assert_same(outs, ref_outs, atol=1e-5, rtol=1e-5)
            assert_same(grads, ref_grads, atol=1e-5, rtol=1e-5)
    with pytest.raises(TypeError, match="tt_jax::scaled_power: argument 'p' is a static int, not float"):
        power(x.to("tpu"), 2.5, 1.0)
    if mode == "DEFER_NEVER":  # an existing variant traces without a graph break
        compiled = torch.compile(lambda t: power(t, 3, 2.0) + 1, backend="tpu", fullgraph=True)
        assert_same(compiled(x.to("tpu")), x ** 3 * 2 + 1, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("compiled", [False, True], ids=["fused", "compiled"])
def test_a_model_trained_with_the_kernel_equals_cpu(compiled):
    x, = _inputs((16, 32), seed=4)
    y = torch.randint(0, 4, (16,), generator=torch.Generator().manual_seed(5))
    params = {}
    for device, norm in (("cpu", example.rms_norm_reference), ("tpu", rms_norm)):
        torch.manual_seed(6)
        model = example.Block(norm).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        step = torch.compile(model, backend="tpu") if compiled and device == "tpu" else model
        with torch.tpu.precision("highest"), torch_tpu.eager_mode(
                "DEFER_NEVER" if compiled else "DEFER_AND_FUSE"):
            for _ in range(3):
                loss = F.cross_entropy(step(x.to(device)), y.to(device))
                opt.zero_grad()
                loss.backward()
                opt.step()
        params[device] = [loss.detach()] + [p.detach() for p in model.parameters()]
    assert_same(params["tpu"], params["cpu"], atol=1e-5, rtol=1e-5)


# A process where `import jax` fails (an import hook refuses it; the
# benchmark's child uses `sys.modules["jax"] = None`): it loads the kernel
# file, runs the kernel and its vjp, and checks Inductor still refuses tpu
# graphs with the clear error.
_NO_JAX = r"""
import importlib.abc, json, sys
class NoJax(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "jax" or name.startswith(("jax.", "jaxlib")):
            raise ImportError("jax is blocked in this test")
sys.meta_path.insert(0, NoJax())
import torch, torch.nn.functional as F
import torch_tpu
import torch_tpu.library
op = torch.tpu.pallas.load_kernel(sys.argv[1])
g = torch.Generator().manual_seed(7)
x, y = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
xt = x.to("tpu").requires_grad_()
a, b = op(xt, y.to("tpu"))
(a.sum() + b.sum()).backward()
xc = x.clone().requires_grad_()
(F.softplus(xc) * y + (xc - y).square()).sum().backward()
report = {"forward": float((a.cpu() - F.softplus(x) * y).abs().max()),
          "grad": float((xt.grad.cpu() - xc.grad).abs().max())}
power = torch.tpu.pallas.load_kernel(sys.argv[2])
report["static"] = float((power(x.to("tpu"), 2, 0.5).cpu() - x ** 2 * 0.5).abs().max())
try:
    power(x.to("tpu"), 5, 0.5)
except ValueError as e:
    report["unknown_static"] = str(e)
try:
    op(torch.ones(2, 2, device="tpu"), torch.ones(2, 2, device="tpu"))
except ValueError as e:
    report["unknown_shape"] = str(e)
try:
    torch.compile(lambda t: t.sin() + 1, backend="inductor")(torch.ones(4, device="tpu"))
except Exception as e:
    report["inductor"] = str(e)
report["jax_loaded"] = sorted(m for m in sys.modules if m.startswith("jax") and sys.modules[m] is not None)
print(json.dumps(report))
"""


def test_a_kernel_file_runs_where_jax_cannot_be_imported(tmp_path):
    path = tmp_path / "softplus_square.kernel"
    x, y = _inputs((4, 8), (4, 8), seed=8)
    _grads(softplus_square, (x, y), "tpu")  # exports the [4, 8] kernel and its vjp
    torch.tpu.pallas.save_kernel(softplus_square, path)
    power(x.to("tpu"), 2, 0.5)  # exports the (2, 0.5) variant
    static_path = tmp_path / "scaled_power.kernel"
    torch.tpu.pallas.save_kernel(power, static_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", _NO_JAX, str(path), str(static_path)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["forward"] < 1e-5 and report["grad"] < 1e-5 and report["static"] < 1e-5
    assert "tt_jax::scaled_power has no export for static arguments [5, 0.5]" in report["unknown_static"]
    assert "tt_jax::softplus_square has no export for inputs (float32[2, 2], float32[2, 2])" in report["unknown_shape"]
    assert 'backend="tpu"' in report["inductor"] and "No module named" not in report["inductor"]
    assert report["jax_loaded"] == []


def test_a_kernel_file_holds_the_backward_and_is_refused_on_another_platform(tmp_path):
    path = tmp_path / "k.kernel"
    torch.tpu.pallas.save_kernel(rms_norm, path)
    assert json.loads(path.read_text())["op"]["backward"]["name"] == "tt_jax::rms_norm_backward"
    torch.tpu.pallas.save_kernel(softplus_square, path)
    data = json.loads(path.read_text())
    data["platform"] = "tpu" if data["platform"] != "tpu" else "cpu"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=f"was exported for platform '{data['platform']}'"):
        torch.tpu.pallas.load_kernel(path)
    path.write_text("{}")
    with pytest.raises(ValueError, match="is not a torch_tpu kernel file"):
        torch.tpu.pallas.load_kernel(path)


def test_inductor_pallas_code_runs_on_tpu_tensors():
    def fn(x, w):
        return (x.sin() * x.sum(-1, keepdim=True)).relu() + w

    x, w = _inputs((8, 16), (16,), seed=9)
    out = torch.compile(fn, backend="inductor")(x.to("tpu"), w.to("tpu"))
    assert_same(out, fn(x, w), atol=1e-5, rtol=1e-5)
    assert any(op.startswith("tpu_pallas::") for op, _ in torch_tpu.library.stablehlo_kernels())


def test_bad_kernels_raise_errors_naming_them_and_the_process_goes_on():
    def reshapes(x: jax.Array) -> jax.Array:
        return x.reshape(3, 5)  # not for a [4, 8] input

    bad = torch.tpu.pallas.jax_op("tt_jax::bad_reshape", reshapes)
    with pytest.raises(ValueError, match=r"jax_op tt_jax::bad_reshape: jax.export .* inputs \(float32\[4, 8\]\) failed"):
        bad(torch.ones(4, 8, device="tpu"))

    def one_result(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return x * 2
    declared_two = torch.tpu.pallas.jax_op("tt_jax::declared_two", one_result)
    with pytest.raises(ValueError, match=r"tt_jax::declared_two for inputs \(float32\[4\]\) returns 1 tensors; "
                                         "the operator declares 2"):
        declared_two(torch.ones(4, device="tpu"))

    def takes_list(x: jax.Array, n: list) -> jax.Array:
        return x * n[0]
    with pytest.raises(ValueError, match="jax_op tt_jax::takes_list: parameter 'n' is annotated"):
        torch.tpu.pallas.jax_op("tt_jax::takes_list", takes_list)
    with pytest.raises(ValueError, match="tt_jax::unannotated: annotate what <lambda> returns"):
        torch.tpu.pallas.jax_op("tt_jax::unannotated", lambda x: x)
    with pytest.raises(ValueError, match="donate_argnums has 2; the function takes 2 arguments"):
        torch.tpu.pallas.jax_op("tt_jax::donates", softplus_and_square, donate_argnums=(2,))
    with pytest.raises(ValueError, match="'namespace::name'"):
        torch.tpu.pallas.jax_op("no_namespace", softplus_and_square)

    # Inductor's entry points: a body that does not parse; results unlike the declared ones.
    # (Imported here: importing it turns Pallas interpret mode on process-wide off-TPU, which
    # the tests above must not rely on.)
    from torch_tpu._internal.pallas import tpu_torch_pallas
    tpu_torch_pallas.register_custom_kernel("tt_garbage", "k", serialized_mlir_module="not stablehlo")
    with pytest.raises(ValueError, match="the kernel tpu_pallas::tt_garbage_.* defines no func.func"):
        tpu_torch_pallas.call_custom_kernel("tt_garbage", "k", inputs=[torch.ones(4, device="tpu")],
                                            output_shapes=[torch.empty(4)])
    tpu_torch_pallas.register_custom_kernel("tt_sum", "k", serialized_mlir_module="""
      func.func @main(%x: tensor<4x8xf32>) -> tensor<4xf32> {
        %z = stablehlo.constant dense<0.0> : tensor<f32>
        %r = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [1] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32>
        return %r : tensor<4xf32>
      }""")
    with pytest.raises(RuntimeError, match=r"tpu_pallas::tt_sum_.* returns tensor<4xf32> as result 0; "
                                           r"the operator's fake function says tensor<4x8xf32>"):
        tpu_torch_pallas.call_custom_kernel("tt_sum", "k", inputs=[torch.ones(4, 8, device="tpu")],
                                            output_shapes=[torch.empty(4, 8)])[0].cpu()

    x, w = _inputs((16, 32), (32,), seed=10)
    assert_same(rms_norm(x.to("tpu"), w.to("tpu")), example.rms_norm_reference(x, w), atol=1e-5, rtol=1e-5)
