"""Helpers the optimizers share: hyperparameter checks with torch's messages, the ``state['step']`` scalar (its
dtype, creation, and the upgrade of old checkpoints' numbers), the fused/capturable/foreach flag checks, grad mode
for ``differentiable=True`` steps, and the closure evaluation of ``step(closure)``.

Split from ``optimizer.py`` (the ``Optimizer`` base), which re-exports them under torch's
``torch.optim.optimizer`` names.

>>> import jitorch
>>> from jitorch.optim.optimizer import _get_scalar_dtype, _get_value, _to_scalar
>>> _get_value(jitorch.tensor(0.5)), _to_scalar(jitorch.tensor([0.1])).dim(), _get_scalar_dtype()
(0.5, 0, jitorch.float32)
"""
from __future__ import annotations

import functools

from .. import _creation, _dtype
from .._tensor import Tensor
from ..autograd.grad_mode import enable_grad, set_grad_enabled


def _get_value(x):
    """A hyperparameter or step as a Python number (tensors hold them too, as in PyTorch)."""
    return x.item() if isinstance(x, Tensor) else x


def _to_scalar(x):
    """A one-element tensor hyperparameter as a 0-d tensor; anything else unchanged."""
    if isinstance(x, Tensor) and x.dim() != 0:
        return x.squeeze()
    return x


def _get_scalar_dtype(is_fused=None):
    """The dtype of ``state['step']``: float32, or float64 when that is the default dtype (fused: float32)."""
    if is_fused:
        return _dtype.float32
    return _dtype.float64 if _dtype.get_default_dtype() is _dtype.float64 else _dtype.float32


def new_step(p, on_device, fused=None):
    """A fresh ``state['step']``: a 0-d zero on the CPU, or on ``p``'s device when fused or capturable."""
    return _creation.zeros((), dtype=_get_scalar_dtype(fused), device=p.device if on_device else None)


def _device_dtype_check_for_fused(p):
    supported = ["cuda", "cpu"]
    if not (p.device.type in supported and p.is_floating_point()):
        raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices: "
                           f"{supported} but {p.dtype} and {p.device.type}")


def _check_capturable(param, step_t):
    """``capturable=True`` keeps the step on the parameter's device, which must be one graphs can capture.

    jitorch captures CPU graphs too (``jitorch.cpu.graph``), so the CPU is supported where PyTorch refuses it.
    """
    supported = ["cuda", "cpu"]
    if not (param.device.type == step_t.device.type and param.device.type in supported):
        raise AssertionError(f"If capturable=True, params and state_steps must be on supported devices: {supported}.")


def _check_fused_flags(fused, foreach, differentiable):
    if fused:
        if differentiable:
            raise RuntimeError("`fused` does not support `differentiable`")
        if foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")


def _check_tensor_lr(lr):
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")


def _check_adam_hyperparameters(lr, eps, betas, weight_decay):
    """torch's range checks of the Adam family's hyperparameters, with its messages."""
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")


def _use_grad_for_differentiable(func):
    """Run ``step`` with grad mode on only for ``differentiable=True`` optimizers (no graph otherwise)."""

    @functools.wraps(func)
    def _use_grad(self, *args, **kwargs):
        with set_grad_enabled(bool(self.defaults["differentiable"])):
            return func(self, *args, **kwargs)

    return _use_grad


def refuse_foreach_autograd(group, even_without_grads=False):
    """PyTorch's foreach kernels record no graph: a ``foreach=True, differentiable=True`` group fails its step.

    Adamax, Adadelta and Adagrad raise before looking at the group's gradients, the others only for a group that has
    some. Example: ``Adam(params, foreach=True, differentiable=True).step()`` raises ``AssertionError``.
    """
    if group["foreach"] and group["differentiable"] and (
            even_without_grads or any(p.grad is not None for p in group["params"])):
        raise AssertionError("_foreach ops don't support autograd")


def evaluate_closure(closure):
    """The loss from ``closure``, evaluated with grad enabled as ``step(closure)`` requires (``None`` without one)."""
    if closure is None:
        return None
    with enable_grad():
        return closure()


def upgrade_step(p_state, p, on_device, fused=None):
    """Old checkpoints stored ``state["step"]`` as a number; PyTorch's optimizers now keep a 0-d tensor."""
    if len(p_state) != 0 and not isinstance(p_state["step"], Tensor):
        p_state["step"] = _creation.tensor(float(p_state["step"]), dtype=_get_scalar_dtype(fused),
                                           device=p.device if on_device else None)
