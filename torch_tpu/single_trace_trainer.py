"""`torch.tpu.optimizers.SingleTraceTrainer`: one program per training step.

The step (forward, loss, gradients by torch.func, the functional optimizer's
in-place update) is traced once with make_fx on fake tensors into one ATen
graph over the flattened state and inputs. By default that graph runs
through the torch.compile backend's graph runner (torch_tpu/compiler.py):
its first call captures it as one StableHLO program, later calls replay the
program with only device buffers crossing over, and the optimizer's writes
into parameters and moments land in them in place. A `compile_fn(gm,
example_inputs)` (or `compile_fn(gm)`) returning a callable replaces that.
"""
import inspect

import torch
from torch import func
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.utils import stateless
from torch.utils import _pytree


def _default_compile(gm, example_inputs):
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

    def make_compiled_train_step(self, example_inputs, example_targets=None, compile_fn=None):
        """Traces one step on the example's shapes and returns
        `train_step(inputs, targets=None) -> loss`."""
        compile_fn = compile_fn or self._compile_fn or _default_compile
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
