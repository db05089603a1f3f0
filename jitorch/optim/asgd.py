"""ASGD (``torch.optim.ASGD``): SGD with a decaying step and a running (Polyak) average of the iterates in ``ax``.

>>> import jitorch
>>> w = jitorch.tensor([1.0, -1.0], requires_grad=True)
>>> opt = jitorch.optim.ASGD([w], lr=0.1)
>>> (w * w).sum().backward()
>>> opt.step()
>>> sorted(opt.state[w])
['ax', 'eta', 'mu', 'step']
"""
from __future__ import annotations

from .. import _creation, _pointwise
from ._adam_variants import _real
from ._fused_variants import fused_asgd
from ._kernels import advance_step, capturing, increment_step
from ._step_capture import factor_step
from ._optimizer_helpers import refuse_foreach_autograd
from .optimizer import (Optimizer, _check_tensor_lr, _get_scalar_dtype, _get_value, _to_scalar,
                        _use_grad_for_differentiable, evaluate_closure)

__all__ = ["ASGD"]


class ASGD(Optimizer):
    r"""ASGD: ``p = p (1 - lambd eta) - eta g``; ``ax`` averages the iterates from step ``t0`` on;
    ``eta = lr / (1 + lambd lr t)^alpha`` and ``mu = 1 / max(1, t - t0)`` after each step.

    Args:
        params: tensors or parameter groups to optimize.
        lr (float or Tensor): learning rate (default: 1e-2).
        lambd (float): decay term (default: 1e-4).
        alpha (float): power of the ``eta`` update (default: 0.75).
        t0 (float): the step averaging starts at (default: 1e6).
        weight_decay (float): L2 penalty (default: 0).
        foreach (bool, optional): accepted for compatibility; the update is the same.
        capturable (bool): under CPU graph capture, eta, mu and the count stay tensors (default: False).
        maximize (bool): maximize the objective (default: False).
        differentiable (bool): record the update with autograd (default: False).
    """

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, foreach=None, maximize=False,
                 differentiable=False, capturable=False):
        _check_tensor_lr(lr)
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, {"lr": lr, "lambd": lambd, "alpha": alpha, "t0": t0, "weight_decay": weight_decay,
                                  "foreach": foreach, "maximize": maximize, "differentiable": differentiable,
                                  "capturable": capturable})

    def __setstate__(self, state):
        super().__setstate__(state)
        self._upgrade_state({"foreach": None, "maximize": False, "differentiable": False, "capturable": False},
                            ("step", "eta", "mu"))

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        loss = evaluate_closure(closure)
        for group in self.param_groups:
            lr, lambd, alpha, t0 = _to_scalar(group["lr"]), group["lambd"], group["alpha"], group["t0"]
            refuse_foreach_autograd(group)
            params, grads, states = [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("ASGD does not support sparse gradients")
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = _creation.zeros((), dtype=_get_scalar_dtype())
                    state["eta"] = _creation.tensor(float(lr), dtype=_get_scalar_dtype())
                    state["mu"] = _creation.ones((), dtype=_get_scalar_dtype())
                    state["ax"] = _creation.zeros_like(p)
                params.append(p)
                grads.append(p.grad)
                states.append(state)
            # One generated kernel per parameter (`_fused_variants`) where the tensors allow; the same update else.
            if params and not group["differentiable"] and not capturing() and fused_asgd(
                    params, grads, [s["ax"] for s in states], [s["mu"] for s in states],
                    [s["eta"] for s in states], [s["step"] for s in states], lambd=lambd, lr=lr, t0=t0, alpha=alpha,
                    weight_decay=group["weight_decay"], maximize=group["maximize"]):
                continue
            tensor_step = group["capturable"] and capturing()
            for p, state in zip(params, states):
                grad = p.grad if not group["maximize"] else -p.grad
                param = p if group["differentiable"] else p.detach()
                param, grad, ax = _real(param), _real(grad), _real(state["ax"])
                if tensor_step:  # torch's capturable form: eta, mu and the count stay tensors, read by recorded ops
                    _captured_update(param, grad, ax, state, lr, lambd, alpha, t0, group["weight_decay"])
                    continue
                step = increment_step(state["step"])
                if group["weight_decay"] != 0:
                    grad = grad.add(param, alpha=group["weight_decay"])
                # eta and mu are read back from their (float32) state tensors, rounded as torch reads them
                eta = _get_value(state["eta"])
                param.mul_(1 - lambd * eta)
                param.add_(grad, alpha=-eta)
                if state["mu"].item() != 1:
                    ax.add_(param.sub(ax).mul_(state["mu"].item()))
                else:
                    ax.copy_(param)
                state["eta"].copy_(_creation.tensor(lr / ((1 + lambd * lr * step) ** alpha)))
                state["mu"].copy_(_creation.tensor(1 / max(1, step - t0)))
        return loss


def _captured_update(param, grad, ax, state, lr, lambd, alpha, t0, weight_decay):
    step_t, eta, mu = state["step"], state["eta"], state["mu"]
    advance_step(step_t)
    count = factor_step(step_t)
    if weight_decay != 0:
        grad = grad.add(param, alpha=weight_decay)
    param.mul_(1 - lambd * eta)
    param.addcmul_(grad, eta, value=-1)
    ax.add_(param.sub(ax).mul_(mu))
    eta.copy_(lr / ((1 + lambd * lr * count) ** alpha))
    mu.copy_(1 / _pointwise.maximum(count - t0, _creation.ones_like(count)))
