"""Helion kernels with Helion's Pallas backend on tpu tensors, against the
same math in CPU PyTorch: Helion launches them through
torch_tpu._internal.pallas.pallas.JaxCallable (jax.export, Pallas in
interpret mode off-TPU) and tpu_torch_pallas.call_custom_kernel. Fixed
configs: no autotuning."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu

helion = pytest.importorskip("helion", reason="Helion (scripts/setup.sh) is not installed")
import helion.language as hl  # noqa: E402

from torch_tpu._internal.pallas import tpu_torch_pallas  # noqa: E402
from torch_tpu._internal.pallas.pallas import JaxCallable  # noqa: E402
from torch_tpu._internal.utils.hardware import get_tpu_device_name  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = ["DEFER_NEVER", "DEFER_AND_FUSE"]


@helion.kernel(backend="pallas", config=helion.Config(block_sizes=[8, 128]))
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_m, tile_n]
    return out


@helion.kernel(backend="pallas", config=helion.Config(block_sizes=[8]))
def softmax(x: torch.Tensor) -> torch.Tensor:
    n, _ = x.size()
    out = torch.empty_like(x)
    for tile_n in hl.tile(n):
        row = x[tile_n, :]
        e = torch.exp(row - torch.amax(row, dim=1, keepdim=True))
        out[tile_n, :] = e / torch.sum(e, dim=1, keepdim=True)
    return out


@helion.kernel(backend="pallas", config=helion.Config(block_sizes=[8, 128]))
def scale_(x: torch.Tensor, s: float) -> None:
    for tile_m, tile_n in hl.tile(x.size()):
        x[tile_m, tile_n] = x[tile_m, tile_n] * s


def _kernels_called():
    return len(tpu_torch_pallas._ops)


@pytest.mark.parametrize("mode", MODES)
def test_add(mode):
    x, y = torch.randn(16, 256), torch.randn(16, 256)
    with torch_tpu.eager_mode(mode):
        for _ in range(2):  # the second call takes Helion's direct call_custom_kernel path
            out = add(x.to("tpu"), y.to("tpu"))
            assert out.device.type == "tpu"
            torch.testing.assert_close(out.cpu(), x + y)
    assert any("helion_add" in op.name for op in tpu_torch_pallas._ops.values())


@pytest.mark.parametrize("mode", MODES)
def test_softmax(mode):
    x = torch.randn(32, 128)
    with torch_tpu.eager_mode(mode):
        out = softmax(x.to("tpu"))
        torch.testing.assert_close(out.cpu(), torch.softmax(x, dim=1))
        other = torch.randn(64, 128)  # another shape: a new export
        torch.testing.assert_close(softmax(other.to("tpu")).cpu(), torch.softmax(other, dim=1))


@pytest.mark.parametrize("mode", MODES)
def test_in_place(mode):
    """An output that is also an input (a Pallas input_output_alias) is
    written into the tpu tensor the caller passed."""
    a = torch.randn(16, 256)
    with torch_tpu.eager_mode(mode):
        t = a.to("tpu")
        assert scale_(t, 2.0) is None
        torch.testing.assert_close(t.cpu(), a * 2)
        scale_(t, 0.5)
        scale_(t, 3.0)
        torch.testing.assert_close(t.cpu(), a * 3)


def test_matmul_with_backend_from_environment(tmp_path):
    """HELION_BACKEND=pallas (read when Helion is imported, so in a fresh
    process) and a kernel with a reduction loop and a dot. (A script file:
    Helion reads a kernel's source.)"""
    code = textwrap.dedent("""
        import torch, torch_tpu, helion
        import helion.language as hl

        @helion.kernel(config=helion.Config(block_sizes=[128, 128, 128]))
        def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            m, k = x.size()
            _, n = y.size()
            out = torch.empty([m, n], dtype=x.dtype, device=x.device)
            for tile_m, tile_n in hl.tile([m, n]):
                acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
                for tile_k in hl.tile(k):
                    acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
                out[tile_m, tile_n] = acc.to(x.dtype)
            return out

        x, y = torch.randn(256, 384), torch.randn(384, 128)
        out = matmul(x.to("tpu"), y.to("tpu"))
        assert out.device.type == "tpu", out.device
        torch.testing.assert_close(out.cpu(), x @ y, rtol=1e-4, atol=1e-4)
        print("ok")
    """)
    env = dict(os.environ, HELION_BACKEND="pallas",
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    env.pop("HELION_PALLAS_INTERPRET", None)  # Helion's own interpret mode runs JAX on CPU arrays
    script = tmp_path / "helion_matmul.py"
    script.write_text(code)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr


def test_jax_callable_static_args_and_aliases():
    """JaxCallable on its own: static arguments are part of the export's
    key; an aliased output is written into its input."""
    import jax
    import jax.numpy as jnp

    def fn(x, y, k):
        return x * k + y, jnp.sum(x)

    call = JaxCallable(name="axpy", jit_fn=jax.jit(fn, static_argnums=2), static_argnums=(2,),
                       input_output_aliases={1: 0})
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    ty = y.to("tpu")
    out, total = call(x.to("tpu"), ty, 3.0)
    torch.testing.assert_close(out.cpu(), x * 3 + y)
    torch.testing.assert_close(ty.cpu(), x * 3 + y)
    torch.testing.assert_close(total.cpu(), x.sum())
    out, _ = call(x.to("tpu"), y.to("tpu"), 2.0)
    torch.testing.assert_close(out.cpu(), x * 2 + y)
    assert len(call.output_shapes) == len(call.kernel_key_to_mlir_fingerprint) == 2


def test_device_name():
    platform = torch_tpu._C._platform()[0].lower()
    name = get_tpu_device_name()
    if platform == "tpu":
        assert name == torch_tpu._C._platform()[2]
    else:  # interpret mode: the TPU generation Pallas kernels are planned for
        from jax._src.pallas.mosaic.tpu_info import chip_version_from_device_kind

        assert name == "TPU7x" and chip_version_from_device_kind(name) is not None
