"""RAdam (``torch.optim.RAdam``): Adam whose adaptive step is rectified by the variance of its second moment.

>>> import jitorch
>>> w = jitorch.tensor([1.0, -1.0], requires_grad=True)
>>> opt = jitorch.optim.RAdam([w], lr=0.1)
>>> (w * w).sum().backward()
>>> opt.step()
>>> w  # the first steps are plain momentum (the variance estimate is not yet usable)
tensor([ 0.8000, -0.8000], requires_grad=True)
"""
from __future__ import annotations

from .. import _creation, _pointwise
from .._tensor import Tensor
from ._adam_variants import AdamVariant
from ._fused_variants import fused_radam

__all__ = ["RAdam"]


class RAdam(AdamVariant):
    r"""RAdam: ``rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t)``; while ``rho_t <= 5`` the step is the
    bias-corrected average alone, after it Adam's step times the rectification term.

    Args:
        params: tensors or parameter groups to optimize.
        lr (float or Tensor): learning rate (default: 1e-3).
        betas (tuple of two floats): decay rates of the gradient's running averages (default: (0.9, 0.999)).
        eps (float): added to the denominator for stability (default: 1e-8).
        weight_decay (float): L2 penalty, decoupled (as AdamW) with ``decoupled_weight_decay`` (default: 0).
        decoupled_weight_decay (bool): decouple the weight decay (default: False).
        foreach (bool, optional): accepted for compatibility; the update is the same.
        capturable (bool): under CPU graph capture, the step-dependent factors are tensor ops (default: False).
        maximize (bool): maximize the objective (default: False).
        differentiable (bool): record the update with autograd (default: False).
    """

    _flags = dict(AdamVariant._flags, decoupled_weight_decay=False)

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled_weight_decay=False,
                 *, foreach=None, maximize=False, capturable=False, differentiable=False):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "maximize": maximize, "foreach": foreach, "capturable": capturable,
                                  "decoupled_weight_decay": decoupled_weight_decay,
                                  "differentiable": differentiable})

    def _fused_update(self, params, grads, states, group, lr):
        beta1, beta2 = group["betas"]
        return fused_radam(params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                           [s["step"] for s in states], beta1=beta1, beta2=beta2, lr=lr,
                           weight_decay=group["weight_decay"], eps=group["eps"],
                           decoupled_weight_decay=group["decoupled_weight_decay"], maximize=group["maximize"])

    def _update(self, param, grad, state, group, lr, step):
        beta1, beta2 = group["betas"]
        exp_avg, exp_avg_sq, weight_decay = state["exp_avg"], state["exp_avg_sq"], group["weight_decay"]
        if weight_decay != 0:
            if group["decoupled_weight_decay"]:
                param.mul_(1 - lr * weight_decay)
            else:
                grad = grad.add(param, alpha=weight_decay)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        bias_corrected_exp_avg = exp_avg / bias_correction1
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        if isinstance(step, Tensor):  # a captured count: no Python branch on it (torch's capturable form)
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)).clamp(min=0) ** 0.5
            adaptive_lr = (bias_correction2 ** 0.5) / exp_avg_sq.sqrt().add_(group["eps"])
            update = _pointwise.where(rho_t > 5.0, adaptive_lr * rect, _creation.ones_like(adaptive_lr))
            param.add_(bias_corrected_exp_avg * lr * update, alpha=-1.0)
        elif rho_t > 5.0:
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
            root = exp_avg_sq.sqrt()  # differentiable: out of place, sqrt's saved output must stay as it was
            root = root.add(group["eps"]) if group["differentiable"] else root.add_(group["eps"])
            adaptive_lr = (bias_correction2 ** 0.5) / root
            param.add_(bias_corrected_exp_avg * lr * adaptive_lr * rect, alpha=-1.0)
        else:
            param.add_(bias_corrected_exp_avg * lr, alpha=-1.0)
