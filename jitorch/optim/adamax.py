"""Adamax (``torch.optim.Adamax``): Adam with the infinity norm, ``u = max(beta2 u, |g| + eps)``.

>>> import jitorch
>>> w = jitorch.tensor([1.0, -1.0], requires_grad=True)
>>> opt = jitorch.optim.Adamax([w], lr=0.1)
>>> (w * w).sum().backward()
>>> opt.step()
>>> w, sorted(opt.state[w])
(tensor([ 0.9000, -0.9000], requires_grad=True), ['exp_avg', 'exp_inf', 'step'])
"""
from __future__ import annotations

from .. import _movement, _pointwise, _reduction
from .._tensor import Tensor
from ._adam_variants import AdamVariant
from ._fused_variants import fused_adamax

__all__ = ["Adamax"]


class Adamax(AdamVariant):
    r"""Adamax: ``m = lerp(m, g, 1 - beta1)``, ``u = max(beta2 u, |g| + eps)``, ``p -= lr / (1 - beta1^t) m / u``.

    Args:
        params: tensors or parameter groups to optimize.
        lr (float or Tensor): learning rate (default: 2e-3).
        betas (tuple of two floats): decay rates of the gradient's average and of its infinity norm
            (default: (0.9, 0.999)).
        eps (float): added to the norm for stability (default: 1e-8).
        weight_decay (float): L2 penalty (default: 0).
        foreach (bool, optional): accepted for compatibility; the update is the same.
        capturable (bool): under CPU graph capture, the step-dependent factors are tensor ops (default: False).
        maximize (bool): maximize the objective (default: False).
        differentiable (bool): record the update with autograd (default: False).
    """

    _state_names = ("exp_avg", "exp_inf")
    _foreach_refused_without_grads = True

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach=None, *,
                 maximize=False, differentiable=False, capturable=False):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "foreach": foreach, "maximize": maximize, "differentiable": differentiable,
                                  "capturable": capturable})

    def _fused_update(self, params, grads, states, group, lr):
        beta1, beta2 = group["betas"]
        return fused_adamax(params, grads, [s["exp_avg"] for s in states], [s["exp_inf"] for s in states],
                            [s["step"] for s in states], beta1=beta1, beta2=beta2, lr=lr,
                            weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"])

    def _update(self, param, grad, state, group, lr, step):
        beta1, beta2 = group["betas"]
        exp_avg, exp_inf = state["exp_avg"], state["exp_inf"]
        if group["weight_decay"] != 0:
            grad = grad.add(param, alpha=group["weight_decay"])
        exp_avg.lerp_(grad, 1 - beta1)
        if not group["differentiable"]:
            exp_inf.copy_(_pointwise.maximum(exp_inf.mul_(beta2), grad.abs().add_(group["eps"])))
        else:  # as torch: the max of a new stacked tensor, so autograd saves nothing exp_inf's update changes
            norm_buf = _movement.cat([exp_inf.mul_(beta2).unsqueeze(0), grad.abs().add_(group["eps"]).unsqueeze(0)])
            exp_inf.copy_(_reduction.amax(norm_buf, 0))
        if isinstance(step, Tensor):  # a captured step's count (see AdamVariant.step)
            param.addcdiv_(exp_avg * (-lr / (1 - beta1 ** step)), exp_inf)
        else:
            param.addcdiv_(exp_avg, exp_inf, value=-(lr / (1 - beta1 ** step)))
