"""Backward of tpu tensors runs on the calling thread (torch_tpu turns off
PyTorch's per-device autograd thread for the importing thread); other
threads keep PyTorch's default and must give the same gradients."""
import threading

import torch

from conftest import assert_same


def _grads(device):
    """w's gradient, and the thread the backward of w ran on."""
    torch.manual_seed(0)
    w = torch.randn(4, 3).to(device).requires_grad_()
    x = torch.randn(5, 4).to(device)
    ran_on = []
    w.register_hook(lambda g: ran_on.append(threading.get_ident()))
    with torch.tpu.precision("highest"):
        (x @ w).tanh().sum().backward()
    return w.grad, ran_on[0]


def test_backward_runs_on_the_calling_thread():
    assert not torch._C._is_multithreading_enabled()
    grad, ran_on = _grads("tpu")
    assert ran_on == threading.get_ident()
    assert_same(grad, _grads("cpu")[0], atol=1e-5, rtol=1e-5)


def test_backward_from_another_thread_uses_the_device_thread_and_agrees():
    out = {}

    def work():
        out["multithreading"] = torch._C._is_multithreading_enabled()
        out["grad"], out["ran_on"] = _grads("tpu")
        out["me"] = threading.get_ident()

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert out["multithreading"]  # PyTorch's default in a new thread
    assert out["ran_on"] != out["me"]  # PyTorch's tpu autograd thread
    assert_same(out["grad"], _grads("cpu")[0], atol=1e-5, rtol=1e-5)
