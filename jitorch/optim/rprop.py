"""Rprop (``torch.optim.Rprop``): resilient backpropagation, per-coordinate step sizes driven by gradient signs.

>>> import jitorch
>>> w = jitorch.tensor([1.0, -1.0], requires_grad=True)
>>> opt = jitorch.optim.Rprop([w], lr=0.1)
>>> (w * w).sum().backward()
>>> opt.step()
>>> w, sorted(opt.state[w])
(tensor([ 0.9000, -0.9000], requires_grad=True), ['prev', 'step', 'step_size'])
"""
from __future__ import annotations

import numpy as np

from .. import _creation, _pointwise
from ._adam_variants import _real
from ._kernels import ARRAY_OPS, advance_step, capturing
from ._optimizer_helpers import refuse_foreach_autograd
from .optimizer import (Optimizer, _check_tensor_lr, _get_scalar_dtype, _to_scalar, _use_grad_for_differentiable,
                        evaluate_closure)

__all__ = ["Rprop"]


class Rprop(Optimizer):
    r"""Rprop: a coordinate whose gradient kept its sign grows its step by ``etas[1]``, one that flipped shrinks it by
    ``etas[0]`` (and skips this update); steps stay within ``step_sizes``; ``p -= sign(g) * step_size``.

    Args:
        params: tensors or parameter groups to optimize.
        lr (float or Tensor): the initial step size (default: 1e-2).
        etas (tuple of two floats): (etaminus, etaplus), the shrink and growth factors (default: (0.5, 1.2)).
        step_sizes (tuple of two floats): the smallest and largest step sizes (default: (1e-6, 50)).
        capturable, foreach (bool, optional): accepted for compatibility; the update is the same.
        maximize (bool): maximize the objective (default: False).
        differentiable (bool): record the update with autograd (default: False).
    """

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, capturable=False, foreach=None,
                 maximize=False, differentiable=False):
        _check_tensor_lr(lr)
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        super().__init__(params, {"lr": lr, "etas": etas, "step_sizes": step_sizes, "foreach": foreach,
                                  "maximize": maximize, "differentiable": differentiable, "capturable": capturable})

    def __setstate__(self, state):
        super().__setstate__(state)
        self._upgrade_state({"foreach": None, "maximize": False, "differentiable": False, "capturable": False})

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        loss = evaluate_closure(closure)
        for group in self.param_groups:
            etaminus, etaplus = group["etas"]
            low, high = group["step_sizes"]
            refuse_foreach_autograd(group)
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Rprop does not support sparse gradients")
                state = self.state[p]
                if len(state) == 0:
                    lr = float(_to_scalar(group["lr"]))
                    state["step"] = _creation.zeros((), dtype=_get_scalar_dtype())
                    state["prev"] = _creation.zeros_like(p)
                    state["step_size"] = _creation.full_like(p.grad, complex(lr, lr) if p.is_complex() else lr)
                advance_step(state["step"])  # the count is never read: a replay advances it
                if _array_update(p, state, etaminus, etaplus, low, high, group):
                    continue
                grad = p.grad if not group["maximize"] else -p.grad
                param = p if group["differentiable"] else p.detach()
                param, grad = _real(param), _real(grad)
                prev, step_size = _real(state["prev"]), _real(state["step_size"])
                sign = grad.mul(prev.clone() if group["differentiable"] else prev).sign()
                # the factors filled in sign's dtype: a float64 step size must grow by the float64 eta
                factor = _pointwise.where(sign > 0, _creation.full_like(sign, etaplus), _pointwise.where(
                    sign < 0, _creation.full_like(sign, etaminus), _creation.ones_like(sign)))
                step_size.mul_(factor).clamp_(low, high)
                # a coordinate whose gradient flipped sign waits a step: its gradient counts as zero
                grad = _pointwise.where(sign < 0, _creation.zeros_like(grad), grad)
                param.addcmul_(grad.sign(), step_size, value=-1)
                prev.copy_(grad)
        return loss


_ARRAY_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64), np.dtype(np.complex128))


def _array_update(p, state, etaminus, etaplus, low, high, group):
    """The step below on NumPy arrays (no dispatch: about 20 ops a parameter otherwise), the same arithmetic value
    for value; False where it does not apply (a recorded or captured update, half types, device arrays)."""
    data, grad_data = p._data, p.grad._data
    if (group["differentiable"] or type(data) is not np.ndarray or type(grad_data) is not np.ndarray or
            data.dtype not in _ARRAY_DTYPES or grad_data.dtype != data.dtype or capturing()):
        return False
    param, grad = ARRAY_OPS.unwrap(p), ARRAY_OPS.unwrap(p.grad)
    prev, step_size = ARRAY_OPS.unwrap(state["prev"]), ARRAY_OPS.unwrap(state["step_size"])
    if group["maximize"]:
        grad = -grad
    sign = np.sign(grad * prev)
    factor = np.where(sign > 0, sign.dtype.type(etaplus), np.where(sign < 0, sign.dtype.type(etaminus),
                                                                      sign.dtype.type(1)))
    step_size *= factor
    np.clip(step_size, low, high, out=step_size)
    grad = np.where(sign < 0, grad.dtype.type(0), grad)  # a flipped coordinate waits a step
    param -= np.sign(grad) * step_size
    prev[...] = grad
    ARRAY_OPS.touched(p, state["prev"], state["step_size"])
    return True
