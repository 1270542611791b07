"""Lets PyTorch's autograd device threads finish with their last graph task
before the interpreter shuts down.

The autograd engine runs the backward of `tpu` ops on a device thread
(`pt_autograd_N`), as it does for CUDA. That thread drops its reference to a
finished graph task a moment after `backward()` has returned, and the graph
task holds a Python object: the `contextvars` context that
`torch.autograd` stashes in its thread-local state. When a script ends inside
that moment, the decref asks for the GIL while the interpreter is shutting
down; Python then ends the thread with `pthread_exit`, whose forced unwind
through a noexcept destructor calls `std::terminate` ("terminate called
without an active exception", exit code 134).

At exit, one trivial task, built in C++ (no Python object in it, no tpu
program), is passed through each device thread: a thread takes a new task only
after letting go of the previous one.
"""
import os

from . import _C


def _device_threads_started() -> bool:
    """Whether the engine has started its device threads (Linux names them)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().startswith("pt_autograd_"):
                    return True
        except OSError:
            continue
    return False


def drain_autograd_device_threads() -> None:
    if _device_threads_started():
        _C._drain_autograd_device_threads()
