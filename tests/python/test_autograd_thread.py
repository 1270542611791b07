"""Backward of tpu tensors runs on the calling thread: a thread's first tpu
tensor turns off PyTorch's per-device autograd thread for that thread
(csrc/aten/autograd_thread.h). Threads without tpu work keep PyTorch's
setting, and a thread that turns the switch back on gets PyTorch's device
thread, with the same gradients. Import itself changes nothing
(test_import_leaves_torch_unchanged.py)."""
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


def _in_thread(work):
    out = {}
    t = threading.Thread(target=lambda: out.update(work()))
    t.start()
    t.join()
    return out


def test_backward_runs_on_the_calling_thread():
    def work():
        before = torch._C._is_multithreading_enabled()
        grad, ran_on = _grads("tpu")
        return {"before": before, "after": torch._C._is_multithreading_enabled(), "grad": grad,
                "ran_on": ran_on, "me": threading.get_ident()}

    out = _in_thread(work)
    assert out["before"]  # PyTorch's default until the thread's first tpu tensor
    assert not out["after"]
    assert out["ran_on"] == out["me"]
    assert_same(out["grad"], _grads("cpu")[0], atol=1e-5, rtol=1e-5)


def test_threads_without_tpu_work_keep_pytorchs_setting():
    def work():
        _grads("cpu")
        return {"multithreading": torch._C._is_multithreading_enabled()}

    assert _in_thread(work)["multithreading"]


def test_backward_on_the_device_thread_when_turned_back_on_agrees():
    def work():
        torch.ones(1, device="tpu")  # the thread's first tpu tensor
        torch.autograd.set_multithreading_enabled(True)
        grad, ran_on = _grads("tpu")
        return {"grad": grad, "ran_on": ran_on, "me": threading.get_ident()}

    out = _in_thread(work)
    assert out["ran_on"] != out["me"]  # PyTorch's tpu autograd thread
    assert_same(out["grad"], _grads("cpu")[0], atol=1e-5, rtol=1e-5)
