"""A process that ends right after a tpu backward exits cleanly: PyTorch's
autograd device thread must not release its last graph task (and the Python
context in it) during interpreter shutdown (torch_tpu/_autograd_exit.py)."""
import os
import subprocess
import sys

import torch

import torch_tpu
from torch_tpu._autograd_exit import _device_threads_started, drain_autograd_device_threads

SCRIPT = """
import torch, torch_tpu
m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to("tpu")
opt = torch.optim.AdamW(m.parameters())
for _ in range(3):
    loss = m(torch.randn(8, 16, device="tpu")).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_scripts_ending_after_backward_exit_cleanly():
    # Before the drain, about 1 run in 5 died with std::terminate (134).
    env = dict(os.environ, TORCH_TPU_DEFER_AND_FUSE="1")
    for _ in range(8):
        run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-2000:]


def test_drain_passes_through_the_device_thread_without_programs():
    x = torch.ones(3, device="tpu", requires_grad=True)
    (x * 2).sum().backward()
    assert _device_threads_started()
    torch_tpu.sync()
    before = torch_tpu.cache_stats()
    drain_autograd_device_threads()
    after = torch_tpu.cache_stats()
    assert (after["hits"], after["misses"]) == (before["hits"], before["misses"])
