"""What Adamax, NAdam and RAdam share: hyperparameter checks, lazily created state, and a step that hands each
parameter with a gradient to the subclass's update, written with tensor ops in the order of PyTorch's single-tensor
implementations (``torch/optim/{adamax,nadam,radam}.py``), which PyTorch also runs for CPU parameters.
"""
from __future__ import annotations

from .. import _creation, _movement_extra
from .._tensor import Tensor
from ._kernels import advance_step, capturing, increment_step
from ._step_capture import factor_step
from ._optimizer_helpers import refuse_foreach_autograd
from .optimizer import (Optimizer, _check_adam_hyperparameters, _check_tensor_lr, _get_scalar_dtype, _to_scalar,
                        _use_grad_for_differentiable, evaluate_closure)

__all__ = ["AdamVariant"]


class AdamVariant(Optimizer):
    """Base of the Adam variants: ``_state_names`` are zero-initialised like the parameter; ``_update`` is the rule."""

    _state_names = ("exp_avg", "exp_avg_sq")
    # PyTorch's multi-tensor Adamax refuses autograd before looking at gradients; NAdam and RAdam after.
    _foreach_refused_without_grads = False
    _flags = {"foreach": None, "maximize": False, "capturable": False, "differentiable": False}

    def __init__(self, params, defaults):
        lr, eps, betas, weight_decay = defaults["lr"], defaults["eps"], defaults["betas"], defaults["weight_decay"]
        _check_tensor_lr(lr)
        _check_adam_hyperparameters(lr, eps, betas, weight_decay)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            for key, value in self._flags.items():
                group.setdefault(key, value)
            for p in group["params"]:
                p_state = self.state.get(p, {})
                for key in ("step", "mu_product"):
                    if key in p_state and not isinstance(p_state[key], Tensor):  # old checkpoints: numbers
                        p_state[key] = _creation.tensor(float(p_state[key]), dtype=_get_scalar_dtype())

    def _new_state(self, p, group):
        state = {"step": _creation.tensor(0.0, dtype=_get_scalar_dtype())}
        for name in self._state_names:
            state[name] = _creation.zeros_like(p)
        return state

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        loss = evaluate_closure(closure)
        for group in self.param_groups:
            refuse_foreach_autograd(group, even_without_grads=self._foreach_refused_without_grads)
            lr = _to_scalar(group["lr"])
            if isinstance(lr, Tensor) and not group["differentiable"]:
                lr = lr.item()
            params, grads, states = [], [], []
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                if type(grad) is not Tensor and grad.is_sparse:  # (the type test first: this loop is hot)
                    raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
                state = self.state[p]
                if len(state) == 0:
                    state.update(self._new_state(p, group))
                params.append(p)
                grads.append(grad)
                states.append(state)
            # One generated kernel per parameter (`_fused_variants`) where the tensors allow; the same update else.
            if params and not group["differentiable"] and not capturing() \
                    and self._fused_update(params, grads, states, group, lr):
                continue
            tensor_step = group["capturable"] and capturing()
            for p, grad, state in zip(params, grads, states):
                if group["maximize"]:
                    grad = -grad
                # A capturable group under capture: the count stays a 0-d tensor advanced by a recorded op, and the
                # update's step-dependent factors are tensor ops (each replay computes them from the new count).
                step = _tensor_step(state["step"]) if tensor_step else increment_step(state["step"])
                if p.is_complex():  # complex parameters update as pairs of reals, as in torch
                    p, grad = _real(p if group["differentiable"] else p.detach()), _real(grad)
                    state = {k: _real(v) if k != "step" else v for k, v in state.items()}
                self._update(p, grad, state, group, lr, step)
        return loss

    def _fused_update(self, params, grads, states, group, lr):
        """The group's update by a fused kernel: ``False`` (nothing changed) where it does not apply."""
        return False

    def _update(self, param, grad, state, group, lr, step):
        raise NotImplementedError


def _tensor_step(step_t):
    advance_step(step_t)
    return factor_step(step_t)


def _real(t):
    return _movement_extra.view_as_real(t) if t.is_complex() else t
