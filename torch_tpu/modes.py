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


def _parse(mode) -> EagerMode:
    if isinstance(mode, str):
        try:
            return EagerMode[mode.upper()]
        except KeyError:
            pass
    elif isinstance(mode, enum.Enum) and type(mode).__name__ == "EagerMode":
        # the reference's EagerMode (same names) from a package written for it
        mode = EagerMode.__members__.get(mode.name, mode)
    try:
        return EagerMode(mode)
    except ValueError:
        raise ValueError(f"unknown eager mode {mode!r}; choose one of "
                         f"{[m.name for m in EagerMode]}") from None


class set_eager_mode:
    """Sets the eager mode now (pending work is flushed first). Used as a
    context manager, the previous mode comes back when the block ends:

        torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_AND_FUSE)
        with torch.tpu.set_eager_mode("defer_never_and_launch_blocking"):
            ...
    """

    def __init__(self, mode):
        mode = _parse(mode)
        self._previous = get_eager_mode()
        self.mode = mode
        _C._set_mode(int(mode))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _C._set_mode(int(self._previous))
        return False

    def __repr__(self):
        return f"torch.tpu.set_eager_mode({self.mode.name})"


@contextlib.contextmanager
def eager_mode(mode):
    """Runs the block in `mode`, restoring the previous mode afterwards
    (`torch_tpu.eager_mode`; `torch.tpu.eager_mode` is the reference's
    property, and `with torch.tpu.set_eager_mode(mode):` does this)."""
    with set_eager_mode(mode):
        yield


def _mode_from_env():
    # TORCH_TPU_LAUNCH_BLOCKING is the reference's name for TPU_LAUNCH_BLOCKING.
    if "1" in (os.environ.get("TPU_LAUNCH_BLOCKING"), os.environ.get("TORCH_TPU_LAUNCH_BLOCKING")):
        return EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
    if os.environ.get("TORCH_TPU_DEFER_AND_FUSE", "0") == "1":
        return EagerMode.DEFER_AND_FUSE
    return None


def _install_loop_boundary_hook():
    """An optimizer step is one program in Strict and Fused Eager (not in
    Debug Eager, which runs each op by itself). In Fused Eager its start and
    end cut a training iteration into its forward-backward program and its
    update program: the same two programs every iteration, found in the
    cache. Cut at the start too, the first iteration's update (which creates
    the optimizer's state) is a program of its own, and the second iteration
    compiles only the steady update, not a second whole step. Between the
    two, the engine looks for no loop (the first step's per-parameter state
    creation is none). In Strict Eager the step's ops are recorded between
    the two flushes instead of each launching its own program, as a fused
    optimizer kernel (`fused=True`) runs them: an AdamW step over N tensors
    is one launch, not ten."""
    import torch
    from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                       register_optimizer_step_pre_hook)

    def steps_are_programs():
        # A compiled step is one program already; Debug Eager runs op by op.
        return (not torch.compiler.is_compiling() and _C._is_initialized() and
                _C._get_mode() in (EagerMode.DEFER_NEVER, EagerMode.DEFER_AND_FUSE))

    def begin(optimizer, args, kwargs):
        if steps_are_programs():
            # No state yet: this step creates it, and its update program runs
            # once (the engine compiles it quickly).
            _C._begin_optimizer_step(creates_state=not optimizer.state)

    def end(optimizer, args, kwargs):
        if steps_are_programs():
            _C._flush("optimizer_step")

    register_optimizer_step_pre_hook(begin)
    register_optimizer_step_post_hook(end)
