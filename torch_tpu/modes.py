"""Eager modes: how recorded ops become device programs."""
import contextlib
import enum
import os

from . import _C


class EagerMode(enum.IntEnum):
    # Strict Eager: one cached program per op, launched asynchronously.
    DEFER_NEVER = 0
    # Debug Eager: like DEFER_NEVER but waits for each op, so errors surface
    # at their line.
    DEFER_NEVER_AND_LAUNCH_BLOCKING = 1
    # Fused Eager: ops are deferred and fused into larger programs, flushed at
    # host reads and synchronization points.
    DEFER_AND_FUSE = 2
    # Tracing (torch.compile): nothing is flushed until asked.
    DEFER_ALL = 3


def get_eager_mode() -> EagerMode:
    return EagerMode(_C._get_mode())


def set_eager_mode(mode) -> None:
    """Sets the eager mode; pending work is flushed first."""
    if isinstance(mode, str):
        try:
            mode = EagerMode[mode.upper()]
        except KeyError:
            raise ValueError(f"unknown eager mode {mode!r}; choose one of "
                             f"{[m.name for m in EagerMode]}") from None
    if not isinstance(mode, EagerMode):
        try:
            mode = EagerMode(mode)
        except ValueError:
            raise ValueError(f"unknown eager mode {mode!r}; choose one of "
                             f"{[m.name for m in EagerMode]}") from None
    _C._set_mode(int(mode))


@contextlib.contextmanager
def eager_mode(mode):
    """Runs the block in `mode`, restoring the previous mode afterwards."""
    previous = get_eager_mode()
    set_eager_mode(mode)
    try:
        yield
    finally:
        set_eager_mode(previous)


def _mode_from_env():
    if os.environ.get("TPU_LAUNCH_BLOCKING", "0") == "1":
        return EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
    if os.environ.get("TORCH_TPU_DEFER_AND_FUSE", "0") == "1":
        return EagerMode.DEFER_AND_FUSE
    return None


def _install_loop_boundary_hook():
    """In Fused Eager, an optimizer step ends a training iteration: flushing
    there makes every iteration the same program, found in the cache."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    def flush_after_step(optimizer, args, kwargs):
        if torch.compiler.is_compiling():  # a compiled step is one program already
            return
        if _C._is_initialized() and _C._get_mode() == EagerMode.DEFER_AND_FUSE:
            _C._flush("optimizer_step")

    register_optimizer_step_post_hook(flush_after_step)
