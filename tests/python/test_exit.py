"""A process that ends right after a tpu backward exits cleanly: PyTorch's
autograd device thread must not release its last graph task (and the Python
context in it) during interpreter shutdown (torch_tpu/_autograd_exit.py); and
one that ends while a launched program still runs waits for it
(Engine::stop_background) rather than crash in the plugin's exit handlers."""
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


RUNNING_AT_EXIT = """
import ctypes, torch, torch_tpu
torch_tpu.set_eager_mode("DEFER_AND_FUSE")
a = torch.randn(2048, 2048).to("tpu")
assert a[0, 0].item() == a.cpu()[0, 0].item()
x = a
for _ in range(28):
    x = torch.tanh(x @ a)
torch_tpu._C._flush("explicit")  # launched (seconds of work); nothing reads it
# Held past the interpreter's end, as a compiled step's parameters and
# optimizer state can be: their buffers are never freed, so no buffer
# deletion waits for the program either.
ctypes.pythonapi.Py_IncRef(ctypes.py_object(x))
print("launched", flush=True)
"""


def test_a_program_running_at_exit_is_waited_for():
    # Before the wait, 2 runs in 3 died of SIGSEGV (-11) after their last
    # line: the program's threads ran on while the plugin's exit handlers
    # tore down what they were using (a compiled training step's backward and
    # optimizer programs, still running after a script read its final loss,
    # did the same).
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", RUNNING_AT_EXIT], capture_output=True,
                             text=True, env=dict(os.environ, TORCH_TPU_DISK_CACHE="0"))
        assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
        assert run.stdout.strip() == "launched"


def test_drain_passes_through_the_device_thread_without_programs():
    x = torch.ones(3, device="tpu", requires_grad=True)
    (x * 2).sum().backward()
    assert _device_threads_started()
    torch_tpu.sync()
    before = torch_tpu.cache_stats()
    drain_autograd_device_threads()
    after = torch_tpu.cache_stats()
    assert (after["hits"], after["misses"]) == (before["hits"], before["misses"])
