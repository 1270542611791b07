"""Importing torch_tpu registers the tpu device and nothing else: CPU
results, meta tensors and PyTorch's kernels for other devices, and the
autograd threading switch are what they were before the import."""
import json
import os
import subprocess
import sys
import threading

import torch

from conftest import assert_same

# Ops whose meta kernels the tpu kernels bring (csrc/aten/*_meta.cc).
PRIVATE_META_OPS = [
    "aten::convolution_overrideable", "aten::convolution_backward_overrideable",
    "aten::geqrf", "aten::linalg_lstsq", "aten::multi_margin_loss_backward",
    "aten::multilabel_margin_loss_backward", "aten::histogram.bins_tensor",
    "aten::histogram.bin_ct", "aten::_histogramdd_bin_edges",
    "aten::_histogramdd_from_bin_tensors", "aten::_histogramdd_from_bin_cts",
    "aten::_ctc_loss_backward", "aten::_fused_adam_.tensor_lr", "aten::_fused_adamw_.tensor_lr",
    "aten::_fused_sgd_", "aten::_fused_sgd_.tensor_lr", "aten::_fused_adagrad_",
    "aten::_fused_adagrad_.tensor_lr",
]

SCRIPT = """
import json, sys, threading, torch
OPS = json.loads(sys.argv[1])

def outcome(f):
    try:
        r = f()
    except Exception as e:
        return ["raised", type(e).__name__]
    return ["ok", [list(t.shape) for t in (r if isinstance(r, tuple) else (r,))]]

def state():
    m = lambda *shape: torch.empty(*shape, device="meta")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 5, 5, generator=g).bfloat16()
    w = torch.randn(4, 2, 3, 3, generator=g).bfloat16()
    a = torch.randn(48, 48, generator=g)
    return {
        "meta_kernels": {op: torch._C._dispatch_has_kernel_for_dispatch_key(op, "Meta")
                         for op in OPS},
        "multithreading": torch._C._is_multithreading_enabled(),
        "meta_histogram": outcome(lambda: torch.histogram(m(10), bins=m(5))),
        "meta_geqrf": outcome(lambda: torch.geqrf(m(4, 3))),
        "meta_conv": outcome(lambda: torch.ops.aten.convolution_overrideable(
            m(1, 2, 5, 5), m(3, 2, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)),
        "cpu_conv_transpose": torch.nn.functional.conv_transpose2d(x, w, stride=2)
                              .float().flatten().tolist(),
        "cpu_mm": (a @ a).flatten().tolist(),
        "cpu_histogram": torch.histogram(a.flatten(), bins=torch.linspace(-3, 3, 7)).hist.tolist(),
        # PyTorch's fake rule for _grouped_mm (bf16 only) still decides off tpu.
        "fake_grouped_mm": fake_grouped_mm(torch.float32),
        "fake_grouped_mm_bf16": fake_grouped_mm(torch.bfloat16),
    }

def fake_grouped_mm(dtype):
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode()
    a, b = mode.from_tensor(torch.empty(8, 8, dtype=dtype)), mode.from_tensor(torch.empty(3, 8, 8, dtype=dtype))
    offs = mode.from_tensor(torch.tensor([2, 5, 8], dtype=torch.int32))
    try:
        with mode:
            return ["ok", list(torch._grouped_mm(a, b, offs).shape)]
    except Exception as e:
        return ["raised", type(e).__name__, str(e).splitlines()[0]]

before = state()
import torch_tpu
after = state()
# tpu work on this thread turns its autograd hand-off off; another thread's
# CPU work keeps PyTorch's switch.
torch.ones(2, device="tpu")
other = []
t = threading.Thread(target=lambda: other.append(torch._C._is_multithreading_enabled()))
t.start(); t.join()
print(json.dumps({"before": before, "after": after, "tpu_thread":
                  torch._C._is_multithreading_enabled(), "other_thread": other[0]}))
"""


def _run(**env):
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", **env)
    run = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(PRIVATE_META_OPS)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_import_changes_no_cpu_result_meta_kernel_or_autograd_switch():
    r = _run()
    # PyTorch has no meta kernel for some of these: the test can see one appear.
    assert not all(r["before"]["meta_kernels"].values())
    assert r["before"] == r["after"]
    assert r["after"]["fake_grouped_mm"][0] == "raised" and "BF16" in r["after"]["fake_grouped_mm"][2]
    assert r["after"]["fake_grouped_mm_bf16"] == ["ok", [8, 8]]
    assert r["after"]["multithreading"]
    assert not r["tpu_thread"]
    assert r["other_thread"]


def test_autograd_thread_switch_kept_with_the_opt_out():
    r = _run(TORCH_TPU_AUTOGRAD_THREAD="1")
    assert r["before"] == r["after"]
    assert r["tpu_thread"]


def test_tpu_kernels_still_use_their_private_meta_kernels():
    # histogram.bin_ct and geqrf have no meta kernel in PyTorch: the tpu
    # kernels' meta step uses theirs.
    x = torch.randn(50)
    hist, edges = torch.histogram(x.to("tpu"), bins=7)
    ref_hist, ref_edges = torch.histogram(x, bins=7)
    assert_same(hist, ref_hist)
    assert_same(edges, ref_edges)
    a = torch.randn(5, 3)
    qr, tau = torch.geqrf(a.to("tpu"))
    ref_qr, ref_tau = torch.geqrf(a)
    assert qr.shape == ref_qr.shape and tau.shape == ref_tau.shape
