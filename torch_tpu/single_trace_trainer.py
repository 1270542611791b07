"""`torch.tpu.optimizers.SingleTraceTrainer`: one program per training step.

The step (forward, loss, gradients by torch.func, the functional optimizer's
in-place update) is captured once as a step graph (`torch.tpu.graph`,
csrc/aten/step_capture.h) on static copies of the inputs: the first call
copies its batch in, captures the step and replays it; every later call
copies its batch into the static inputs and replays the one program (no
PyTorch dispatch). Parameters, optimizer state and buffers are updated in
place; random ops (dropout) draw new numbers at each replay.

A `compile_fn(gm, example_inputs)` (or `compile_fn(gm)`) returning a callable
takes the traced path instead: the step is traced once with make_fx on fake
tensors into one ATen graph over the flattened state and inputs, and that
graph is handed to `compile_fn` (e.g. the `torch.compile` backend's graph
runner, `graph_runner_compile`).
"""
import inspect

import torch
from torch import func
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.utils import stateless
from torch.utils import _pytree


def graph_runner_compile(gm, example_inputs):
    """The traced path through the torch.compile backend's graph runner:
    its first call captures the graph as one program, later calls replay it."""
    from .compiler import _GraphRunner

    return _GraphRunner(gm, "train_step")


def _call_compile_fn(compile_fn, gm, flat_inputs):
    try:
        params = inspect.signature(compile_fn).parameters.values()
    except (TypeError, ValueError):
        return compile_fn(gm, flat_inputs)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) == 1 and not any(p.kind == p.VAR_POSITIONAL for p in params):
        return compile_fn(gm)
    return compile_fn(gm, flat_inputs)


def _loss_of(out, targets):
    """The loss: MSE against `targets` when given, else the output's `loss`,
    else the mean of its logits, else the mean of its first tensor."""
    if targets is not None:
        return torch.nn.functional.mse_loss(out, targets)
    if getattr(out, "loss", None) is not None:
        return out.loss
    if isinstance(out, dict) and "loss" in out:
        return out["loss"]
    if getattr(out, "logits", None) is not None:
        return out.logits.mean()
    for item in _pytree.tree_leaves(out):
        if isinstance(item, torch.Tensor):
            return item.mean()
    raise TypeError(f"SingleTraceTrainer cannot find a loss in the model's output of type "
                    f"{type(out).__name__}; pass targets or compute_loss_fn")


class SingleTraceTrainer:
    """Trains `model` with `optimizer` (a torch.tpu.optimizers optimizer; None:
    the step only computes gradients and stores them in `param.grad`)."""

    def __init__(self, model, optimizer=None, compile_fn=None, compute_loss_fn=None):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"SingleTraceTrainer trains an nn.Module, got {type(model).__name__}")
        self._model = model
        self._optimizer = optimizer
        self._compile_fn = compile_fn
        self._compute_loss_fn = compute_loss_fn
        self._names = {}  # safe name ('.' -> '_') -> the module's name
        params = {}
        for name, p in model.named_parameters():
            self._names[name.replace(".", "_")] = name
            params[name.replace(".", "_")] = p.detach()
        self._buffers = {}
        for name, b in model.named_buffers():
            self._names[name.replace(".", "_")] = name
            self._buffers[name.replace(".", "_")] = b.detach()
        self._param_group = optimizer.init_param_group(params) if optimizer is not None else params

    @property
    def param_group(self):
        """The parameters and optimizer state the step updates."""
        return self._param_group

    @property
    def params(self) -> dict:
        """The parameters under the module's own names."""
        p = getattr(self._param_group, "params", self._param_group)
        return {self._names[k]: v for k, v in p.items()}

    def _loss(self, params, buffers, inputs, targets):
        state = {self._names[k]: v for k, v in {**params, **buffers}.items()}
        if isinstance(inputs, dict):
            args, kwargs = (), inputs
        elif isinstance(inputs, (tuple, list)):
            args, kwargs = tuple(inputs), {}
        else:
            args, kwargs = (inputs,), {}
        with stateless._reparametrize_module(self._model, state, tie_weights=True):
            if self._compute_loss_fn is not None:
                return self._compute_loss_fn(self._model, args, kwargs), buffers
            return _loss_of(self._model(*args, **kwargs), targets), buffers

    def _step(self, inputs, targets):
        """One step: the loss, and the gradients (stored) or the update."""
        group = self._param_group
        params = getattr(group, "params", group)
        grads, (loss, _) = func.grad_and_value(
            lambda p, b: self._loss(p, b, inputs, targets), has_aux=True)(params, self._buffers)
        if self._optimizer is not None:
            self._optimizer(group, grads)
        return loss, grads

    def make_compiled_train_step(self, example_inputs, example_targets=None, compile_fn=None):
        """Returns `train_step(inputs, targets=None) -> loss` for inputs of the
        example's structure, shapes and dtypes: one program per step."""
        compile_fn = compile_fn or self._compile_fn
        if compile_fn is not None:
            return self._traced_train_step(example_inputs, example_targets, compile_fn)
        return _CapturedStep(self, example_inputs, example_targets)

    def _traced_train_step(self, example_inputs, example_targets, compile_fn):
        with_targets = example_targets is not None
        state = (self._param_group, self._buffers)
        flat, in_spec = _pytree.tree_flatten(
            state + (example_inputs,) + ((example_targets,) if with_targets else ()))
        out_spec = [None]

        def flat_step(*flat_args):
            tree = _pytree.tree_unflatten(list(flat_args), in_spec)
            group, buffers, inputs = tree[:3]
            targets = tree[3] if with_targets else None
            params = getattr(group, "params", group)
            grads, (loss, buffers) = func.grad_and_value(
                lambda p, b: self._loss(p, b, inputs, targets), has_aux=True)(params, buffers)
            result = (loss, self._optimizer(group, grads) if self._optimizer else grads, buffers)
            leaves, out_spec[0] = _pytree.tree_flatten(result)
            return tuple(leaves)

        gm = make_fx(flat_step, tracing_mode="fake")(*flat)
        compiled = _call_compile_fn(compile_fn, gm, flat)

        def train_step(inputs, targets=None):
            if (targets is None) == with_targets:
                raise ValueError("train_step takes targets exactly when make_compiled_train_step "
                                 "was given example_targets")
            args, _ = _pytree.tree_flatten(
                (self._param_group, self._buffers, inputs) + ((targets,) if with_targets else ()))
            if len(args) != len(flat):
                raise ValueError("train_step's inputs must have the structure of the example "
                                 "inputs the step was traced with")
            loss, new_state, buffers = _pytree.tree_unflatten(list(compiled(*args)), out_spec[0])
            self._buffers = buffers
            if self._optimizer is not None:
                self._param_group = new_state
            else:
                for name, p in self._model.named_parameters():
                    p.grad = new_state.get(name.replace(".", "_"))
            if buffers:
                self._model.load_state_dict({self._names[k]: v for k, v in buffers.items()},
                                            strict=False)
            return loss

        return train_step


class _CapturedStep:
    """`train_step(inputs, targets=None) -> loss` over one captured step graph.

    The batch is copied into static tensors (made like the example's) before
    each replay; a non-tensor leaf of the example is part of the program and
    must come back unchanged. The returned loss is a new tensor each call."""

    def __init__(self, trainer, example_inputs, example_targets):
        self._trainer = trainer
        self._with_targets = example_targets is not None
        flat, self._spec = _pytree.tree_flatten(
            (example_inputs,) + ((example_targets,) if self._with_targets else ()))
        device = next((t.device for t in flat if isinstance(t, torch.Tensor)
                       and t.device.type == "tpu"), None)
        if device is None:
            device = next(p.device for p in _pytree.tree_flatten(trainer.param_group)[0]
                          if isinstance(p, torch.Tensor))
        self._static = [torch.empty_like(t, device=device) if isinstance(t, torch.Tensor) else t
                        for t in flat]
        self._graph = None
        self._loss = None

    def _copy_in(self, inputs, targets):
        flat, spec = _pytree.tree_flatten((inputs,) + ((targets,) if self._with_targets else ()))
        if spec != self._spec:
            raise ValueError("train_step's inputs must have the structure of the example "
                             f"inputs the step was captured with: got {spec}, expected "
                             f"{self._spec}")
        for i, (new, static) in enumerate(zip(flat, self._static)):
            if not isinstance(static, torch.Tensor):
                if new is not static and new != static:
                    raise ValueError(f"train_step's input leaf {i} is {new!r}; the step was "
                                     f"captured with {static!r} (a constant of its program): "
                                     "make another train step for other values")
                continue
            if (not isinstance(new, torch.Tensor) or new.shape != static.shape
                    or new.dtype != static.dtype):
                got = (f"{tuple(new.shape)} {new.dtype}" if isinstance(new, torch.Tensor)
                       else type(new).__name__)
                raise ValueError(f"train_step's input tensor {i} is {got}; the step was "
                                 f"captured for {tuple(static.shape)} {static.dtype} (static "
                                 "shapes): make another train step for other shapes")
            static.copy_(new)

    def __call__(self, inputs, targets=None):
        if (targets is None) == self._with_targets:
            raise ValueError("train_step takes targets exactly when make_compiled_train_step "
                             "was given example_targets")
        self._copy_in(inputs, targets)
        if self._graph is None:
            self._capture()
        self._graph.replay()
        return self._loss.clone()

    def _capture(self):
        tree = _pytree.tree_unflatten(self._static, self._spec)
        inputs, targets = tree[0], (tree[1] if self._with_targets else None)
        trainer = self._trainer
        graph = torch.tpu.TPUGraph()
        with torch.tpu.graph(graph):
            loss, grads = trainer._step(inputs, targets)
        self._graph, self._loss = graph, loss
        if trainer._optimizer is None:  # replays rewrite these gradients in place
            for name, p in trainer._model.named_parameters():
                p.grad = grads.get(name.replace(".", "_"))
