"""Step capture and replay: `torch.tpu.TPUGraph`, `torch.tpu.graph`,
`torch.tpu.make_graphed_callables` (as torch.cuda's).

A step (forward, `loss.backward()`, `optimizer.step()`, `zero_grad`) runs
once under capture and becomes ONE program; `replay()` launches it on the
current contents of the tensors the step read and points the tensors it
wrote at the results, with no PyTorch dispatch. The work is C++
(csrc/aten/step_capture.h) behind PyTorch's accelerator graph interface, so
`torch.accelerator.Graph` works on tpu too; this module is the torch.cuda
spelling and the checks that need Python (optimizers' `capturable`).
"""
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from . import _C


class TPUGraph(torch.accelerator.Graph):
    """A captured step (torch.cuda.CUDAGraph's API).

    As with CUDA graphs, capturing records the step without applying it, and
    addresses are static: copy new data into the tensors the step read
    (`static_x.copy_(x)`) before `replay()`; results land in the tensors the
    step wrote (parameters, optimizer state, `static_loss`). There are no
    memory pools: `pool` is accepted and ignored."""

    def __new__(cls, keep_graph: bool = False):
        return super().__new__(cls, keep_graph)

    def __init__(self, keep_graph: bool = False):
        super().__init__(keep_graph)

    def capture_begin(self, pool=None, capture_error_mode: str = "global") -> None:
        """Starts capturing: what the calling thread runs on tpu until
        capture_end() is recorded (pending work is flushed first)."""
        torch._C._acceleratorGraph.capture_begin(self, pool=pool,
                                                 capture_error_mode=capture_error_mode)

    # C++ directly: a replay runs no Python of ours.
    replay = torch._C._acceleratorGraph.replay


def is_current_stream_capturing() -> bool:
    """Whether a step is being captured (torch.cuda's name)."""
    return _C._step_capture_active()


def graph_pool_handle():
    """A memory-pool token (torch.cuda's API); tpu graphs have no pools."""
    return (0, 0)


class graph:
    """`with torch.tpu.graph(g): step()` captures `step` into `g`
    (torch.cuda.graph's API; `pool` and `stream` are accepted and ignored: one
    execution order serves a device). If the block raises, the capture is
    abandoned: the ops recorded so far run eagerly and `g` stays empty."""

    def __init__(self, tpu_graph: TPUGraph, pool=None, stream=None,
                 capture_error_mode: str = "global"):
        self.tpu_graph = tpu_graph
        self.pool = pool
        self.capture_error_mode = capture_error_mode

    def __enter__(self):
        if not _C._step_capture_active():  # else capture_begin says why not
            torch.accelerator.synchronize()
        self.tpu_graph.capture_begin(self.pool, self.capture_error_mode)

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.tpu_graph.reset()
            return False
        self.tpu_graph.capture_end()
        return False


def _refuse_host_side_optimizer(optimizer, args, kwargs):
    # A step count on the host (capturable=False) would be read once, at
    # capture: every replay would repeat the first step's bias correction.
    # A step torch.compile traces is not being captured (and the check would
    # break its graph).
    if torch.compiler.is_compiling() or not _C._step_capture_active():
        return
    for group in optimizer.param_groups:
        if group.get("capturable") is False:
            raise RuntimeError(
                f"torch.tpu.graph: {type(optimizer).__name__} keeps its step count on the host "
                "(capturable=False), so a captured step would replay the first step's update "
                f"forever. Construct it with capturable=True, e.g. "
                f"torch.optim.{type(optimizer).__name__}(params, ..., capturable=True), as CUDA "
                "graphs require.")


register_optimizer_step_pre_hook(_refuse_host_side_optimizer)


def _flat_tensors(tree):
    flat, _ = torch.utils._pytree.tree_flatten(tree)
    return [t for t in flat if isinstance(t, torch.Tensor)]


def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False, pool=None):
    """Graphed versions of `callables` (modules or functions), as
    torch.cuda.make_graphed_callables: each gets a captured forward and a
    captured backward, joined by an autograd Function. `sample_args` are
    tuples of tensors (one per callable) with the layouts later calls use;
    a module's parameters are inputs of its backward graph. Returns one
    callable, or a tuple for a tuple of callables."""
    just_one = not isinstance(callables, tuple)
    if just_one:
        callables, sample_args = (callables,), (sample_args,)
    out = []
    for func, args in zip(callables, sample_args):
        args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
        for a in args:
            if not (isinstance(a, torch.Tensor) and a.device.type == "tpu"):
                raise TypeError("make_graphed_callables: sample_args must be tpu tensors, got "
                                f"{type(a).__name__}"
                                + (f" on {a.device}" if isinstance(a, torch.Tensor) else ""))
        out.append(_graph_one(func, args, num_warmup_iters, allow_unused_input))
    return out[0] if just_one else tuple(out)


def _graph_one(func, static_inputs, warmup, allow_unused):
    params = tuple(func.parameters()) if isinstance(func, torch.nn.Module) else ()
    diff_inputs = tuple(a for a in static_inputs + params if a.requires_grad)

    def fwd_bwd():
        outs = _flat_tensors(func(*static_inputs))
        needs = [o for o in outs if o.requires_grad]
        grads = torch.autograd.grad(needs, diff_inputs, grad_outputs=[torch.ones_like(o) for o in needs],
                                    allow_unused=allow_unused) if needs and diff_inputs else ()
        return outs, grads

    for _ in range(warmup):
        fwd_bwd()
    torch.tpu.synchronize()

    fwd_graph, bwd_graph = TPUGraph(), TPUGraph()
    with graph(fwd_graph):
        result = func(*static_inputs)
    static_outputs = _flat_tensors(result)
    out_spec = torch.utils._pytree.tree_structure(result)
    grad_outputs = [o for o in static_outputs if o.requires_grad]
    static_grad_outputs = [torch.zeros_like(o) for o in grad_outputs]
    with graph(bwd_graph):
        static_grad_inputs = torch.autograd.grad(
            grad_outputs, diff_inputs, grad_outputs=static_grad_outputs,
            allow_unused=allow_unused) if grad_outputs and diff_inputs else ()
    static_grad_inputs = tuple(static_grad_inputs)
    n_user = len(static_inputs)

    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            for static, new in zip(static_inputs, inputs[:n_user]):
                if static.data_ptr() != new.data_ptr():
                    static.copy_(new)
            fwd_graph.replay()
            return tuple(o.detach() for o in static_outputs)

        @staticmethod
        def backward(ctx, *grads):
            k = 0
            for o, g in zip(static_outputs, grads):
                if o.requires_grad:
                    if g is None:
                        static_grad_outputs[k].zero_()
                    elif static_grad_outputs[k].data_ptr() != g.data_ptr():
                        static_grad_outputs[k].copy_(g)
                    k += 1
            bwd_graph.replay()
            computed = iter(static_grad_inputs)
            full = []
            for a in static_inputs + params:
                g = next(computed) if a.requires_grad else None
                # A copy: autograd may keep the returned tensor as .grad, and
                # the next replay rewrites the static one.
                full.append(None if g is None else g.detach().clone())
            return tuple(full)

    def graphed(*user_args):
        if len(user_args) != n_user:
            raise TypeError(f"graphed callable takes {n_user} tensor arguments, got {len(user_args)}")
        outs = Graphed.apply(*user_args, *params)
        return torch.utils._pytree.tree_unflatten(list(outs), out_spec)

    if isinstance(func, torch.nn.Module):
        func.forward = graphed
        return func
    return graphed
