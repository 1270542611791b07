"""`torch.tpu.optimizers` (the reference's names): functional optimizers
whose whole state is a `ParamGroup` pytree, and `SingleTraceTrainer`, which
traces forward, loss, backward and the optimizer step into one program.

An optimizer's hyperparameters are fixed at construction (`defaults` reads
them): a traced step holds them as constants. `init_param_group(model or
dict)` makes the state; `step(group, grads)` (or calling the optimizer)
updates it in place through torch.optim's functional forms and returns it.
"""
import abc
import dataclasses
import inspect
import types

import torch
import torch.optim._muon as _torch_muon
import torch.optim.adamw as _torch_adamw
import torch.optim.sgd as _torch_sgd
from torch.utils import _pytree

__all__ = ["Optimizer", "AdamW", "Sgd", "Muon", "SingleTraceTrainer"]


def _named_params(params) -> dict:
    """Parameters by name ('.' becomes '_', so names are valid keys)."""
    if isinstance(params, torch.nn.Module):
        return {n.replace(".", "_"): p.detach() for n, p in params.named_parameters()}
    if not isinstance(params, dict) or not all(isinstance(v, torch.Tensor) for v in params.values()):
        raise TypeError("init_param_group takes an nn.Module or a dict of name -> tensor, got "
                        f"{type(params).__name__}")
    return dict(params)


def _zeros(params, dtype=None) -> dict:
    return {n: torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
            for n, p in params.items()}


def _steps(params) -> dict:
    return {n: torch.tensor(0.0, dtype=torch.float32, device=p.device) for n, p in params.items()}


def _lists(group, grads, *fields):
    keys = list(group.params)
    missing = [k for k in keys if k not in grads]
    if missing:
        raise KeyError(f"no gradient for parameter(s) {missing}; step() takes grads keyed "
                       "like param_group.params")
    out = [[group.params[k] for k in keys], [grads[k] for k in keys]]
    out += [[getattr(group, f)[k] for k in keys] for f in fields]
    return out


def _register(cls, fields):
    _pytree.register_pytree_node(
        cls, lambda g: (tuple(getattr(g, f) for f in fields), None),
        lambda children, _: cls(**dict(zip(fields, children))))


class Optimizer(abc.ABC):
    """A stateless functional optimizer over a nested `ParamGroup`."""

    _HYPERPARAMETER_NAMES = ("lr", "weight_decay")

    def __init__(self, lr=1e-3, weight_decay=0.0):
        self._lr = lr
        self._weight_decay = weight_decay

    @property
    def defaults(self):
        """The hyperparameters, read-only."""
        return types.MappingProxyType({n: getattr(self, f"_{n}") for n in self._HYPERPARAMETER_NAMES})

    @abc.abstractmethod
    def init_param_group(self, params):
        """A fresh ParamGroup for an nn.Module's parameters or a dict of them."""

    @abc.abstractmethod
    def step(self, param_group, grads):
        """Updates `param_group` in place with `grads` (keyed like its params)
        and returns it."""

    def __call__(self, param_group, grads):
        return self.step(param_group, grads)


class AdamW(Optimizer):
    """AdamW through torch.optim's functional adamw (decoupled weight decay).
    `use_bfloat16_moments` (default True, as the reference) keeps both moments
    in bfloat16."""

    @dataclasses.dataclass
    class ParamGroup:
        params: dict
        opt_state_m: dict = dataclasses.field(default_factory=dict)
        opt_state_v: dict = dataclasses.field(default_factory=dict)
        opt_steps: dict = dataclasses.field(default_factory=dict)

    _HYPERPARAMETER_NAMES = ("lr", "weight_decay", "beta1", "beta2", "eps", "use_bfloat16_moments",
                             "amsgrad", "maximize", "foreach", "capturable", "differentiable",
                             "fused", "grad_scale", "found_inf")

    def __init__(self, lr=1e-3, weight_decay=1e-2, beta1=0.9, beta2=0.999, eps=1e-8,
                 use_bfloat16_moments=True, amsgrad=False, maximize=False, foreach=False,
                 capturable=True, differentiable=False, fused=False, grad_scale=None,
                 found_inf=None):
        super().__init__(lr, weight_decay)
        if amsgrad:
            raise ValueError("torch.tpu.optimizers.AdamW has no amsgrad state; use "
                             "torch.optim.AdamW(amsgrad=True)")
        self._beta1, self._beta2, self._eps = beta1, beta2, eps
        self._use_bfloat16_moments = use_bfloat16_moments
        self._amsgrad, self._maximize, self._foreach = amsgrad, maximize, foreach
        self._capturable, self._differentiable, self._fused = capturable, differentiable, fused
        self._grad_scale, self._found_inf = grad_scale, found_inf

    def init_param_group(self, params):
        params = _named_params(params)
        dtype = torch.bfloat16 if self._use_bfloat16_moments else None
        return self.ParamGroup(params, _zeros(params, dtype), _zeros(params, dtype), _steps(params))

    def step(self, param_group, grads):
        params, g, m, v, steps = _lists(param_group, grads, "opt_state_m", "opt_state_v", "opt_steps")
        if params:
            _torch_adamw.adamw(
                params, g, m, v, [], steps, foreach=self._foreach, capturable=self._capturable,
                differentiable=self._differentiable, fused=self._fused,
                grad_scale=self._grad_scale, found_inf=self._found_inf, amsgrad=False,
                beta1=self._beta1, beta2=self._beta2, lr=self._lr,
                weight_decay=self._weight_decay, eps=self._eps, maximize=self._maximize)
        return param_group


class Sgd(Optimizer):
    """SGD (momentum, dampening, Nesterov) through torch.optim's functional
    sgd; fused by default, as the reference."""

    @dataclasses.dataclass
    class ParamGroup:
        params: dict
        opt_state_m: dict = dataclasses.field(default_factory=dict)
        opt_steps: dict = dataclasses.field(default_factory=dict)

    _HYPERPARAMETER_NAMES = ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize",
                             "foreach", "fused", "grad_scale", "found_inf", "has_sparse_grad")

    def __init__(self, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 maximize=False, foreach=False, fused=True, grad_scale=None, found_inf=None,
                 has_sparse_grad=False):
        super().__init__(lr, weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        self._momentum, self._dampening, self._nesterov = momentum, dampening, nesterov
        self._maximize, self._foreach, self._fused = maximize, foreach, fused
        self._grad_scale, self._found_inf = grad_scale, found_inf
        self._has_sparse_grad = has_sparse_grad

    def init_param_group(self, params):
        params = _named_params(params)
        m = _zeros(params) if self._momentum != 0.0 else {}
        return self.ParamGroup(params, m, _steps(params))

    def step(self, param_group, grads):
        params, g, steps = _lists(param_group, grads, "opt_steps")
        # Momentum buffers start as zeros (not torch.optim's first-step copy
        # of the gradient) so that a traced step is the same every time:
        # with dampening 0 the two agree (a zero buffer times momentum plus
        # the gradient is the gradient).
        m = [param_group.opt_state_m[k] for k in param_group.params] if self._momentum else []
        if params:
            _torch_sgd.sgd(
                params, g, m, has_sparse_grad=self._has_sparse_grad, foreach=self._foreach,
                fused=self._fused, grad_scale=self._grad_scale, found_inf=self._found_inf,
                weight_decay=self._weight_decay, momentum=self._momentum, lr=self._lr,
                dampening=self._dampening, nesterov=self._nesterov, maximize=self._maximize)
            torch._foreach_add_(steps, 1.0)
        return param_group


class Muon(Optimizer):
    """Muon (momentum orthogonalized by Newton-Schulz iterations) through
    torch.optim's functional muon; every parameter must be a 2-D matrix."""

    @dataclasses.dataclass
    class ParamGroup:
        params: dict
        opt_state_m: dict = dataclasses.field(default_factory=dict)
        opt_steps: dict = dataclasses.field(default_factory=dict)

    _HYPERPARAMETER_NAMES = ("lr", "weight_decay", "momentum", "nesterov", "ns_coefficients",
                             "eps", "ns_steps", "adjust_lr_fn", "use_bfloat16_moments",
                             "foreach", "has_complex")

    def __init__(self, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=(_torch_muon.DEFAULT_A, _torch_muon.DEFAULT_B,
                                  _torch_muon.DEFAULT_C),
                 eps=_torch_muon.EPS, ns_steps=_torch_muon.DEFAULT_NS_STEPS, adjust_lr_fn=None,
                 use_bfloat16_moments=False, foreach=False, has_complex=False):
        super().__init__(lr, weight_decay)
        if adjust_lr_fn not in (None, "original", "match_rms_adamw"):
            raise ValueError(f"adjust_lr_fn must be None, 'original' or 'match_rms_adamw', "
                             f"got {adjust_lr_fn!r}")
        self._momentum, self._nesterov = momentum, nesterov
        self._ns_coefficients, self._eps, self._ns_steps = tuple(ns_coefficients), eps, ns_steps
        self._adjust_lr_fn = adjust_lr_fn
        self._use_bfloat16_moments = use_bfloat16_moments
        self._foreach, self._has_complex = foreach, has_complex

    def init_param_group(self, params):
        params = _named_params(params)
        not_2d = [n for n, p in params.items() if p.dim() != 2]
        if not_2d:
            raise ValueError(f"Muon updates 2-D matrices only; {not_2d} are not (give those "
                             "parameters to AdamW or Sgd)")
        dtype = torch.bfloat16 if self._use_bfloat16_moments else None
        return self.ParamGroup(params, _zeros(params, dtype), _steps(params))

    def step(self, param_group, grads):
        params, g, m, steps = _lists(param_group, grads, "opt_state_m", "opt_steps")
        if params:
            _torch_muon.muon(
                params, g, m, foreach=self._foreach, lr=self._lr,
                weight_decay=self._weight_decay, momentum=self._momentum,
                nesterov=self._nesterov, ns_coefficients=self._ns_coefficients,
                ns_steps=self._ns_steps, eps=self._eps, adjust_lr_fn=self._adjust_lr_fn,
                has_complex=self._has_complex)
            torch._foreach_add_(steps, 1.0)
        return param_group


_register(AdamW.ParamGroup, ("params", "opt_state_m", "opt_state_v", "opt_steps"))
_register(Sgd.ParamGroup, ("params", "opt_state_m", "opt_steps"))
_register(Muon.ParamGroup, ("params", "opt_state_m", "opt_steps"))

from .single_trace_trainer import SingleTraceTrainer  # noqa: E402
