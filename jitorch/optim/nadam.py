"""NAdam (``torch.optim.NAdam``): Adam with Nesterov momentum and a momentum-decay schedule.

>>> import jitorch
>>> w = jitorch.tensor([1.0, -1.0], requires_grad=True)
>>> opt = jitorch.optim.NAdam([w], lr=0.1)
>>> (w * w).sum().backward()
>>> opt.step()
>>> sorted(opt.state[w])
['exp_avg', 'exp_avg_sq', 'mu_product', 'step']
"""
from __future__ import annotations

from .. import _creation
from .._tensor import Tensor
from ._adam_variants import AdamVariant
from ._fused_variants import fused_nadam
from .optimizer import _get_scalar_dtype

__all__ = ["NAdam"]


class NAdam(AdamVariant):
    r"""NAdam: ``mu_t = beta1 (1 - 0.96^(t psi) / 2)``; the step mixes the gradient and the average by ``mu_t`` and
    ``mu_{t+1}`` over the running product of the ``mu``'s.

    Args:
        params: tensors or parameter groups to optimize.
        lr (float or Tensor): learning rate (default: 2e-3).
        betas (tuple of two floats): decay rates of the gradient's running averages (default: (0.9, 0.999)).
        eps (float): added to the denominator for stability (default: 1e-8).
        weight_decay (float): L2 penalty, decoupled (as AdamW) with ``decoupled_weight_decay`` (default: 0).
        momentum_decay (float): ``psi`` (default: 4e-3).
        decoupled_weight_decay (bool): NAdamW's weight decay (default: False).
        foreach (bool, optional): accepted for compatibility; the update is the same.
        capturable (bool): under CPU graph capture, the step-dependent factors are tensor ops (default: False).
        maximize (bool): maximize the objective (default: False).
        differentiable (bool): record the update with autograd (default: False).
    """

    _flags = dict(AdamVariant._flags, decoupled_weight_decay=False)

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False):
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "momentum_decay": momentum_decay, "decoupled_weight_decay": decoupled_weight_decay,
                                  "maximize": maximize, "foreach": foreach, "capturable": capturable,
                                  "differentiable": differentiable})

    def _new_state(self, p, group):
        state = super()._new_state(p, group)
        state["mu_product"] = _creation.tensor(1.0, dtype=_get_scalar_dtype())
        return {k: state[k] for k in ("step", "mu_product", "exp_avg", "exp_avg_sq")}  # torch's key order

    def _fused_update(self, params, grads, states, group, lr):
        beta1, beta2 = group["betas"]
        return fused_nadam(params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                           [s["mu_product"] for s in states], [s["step"] for s in states], beta1=beta1, beta2=beta2,
                           lr=lr, weight_decay=group["weight_decay"], momentum_decay=group["momentum_decay"],
                           eps=group["eps"], decoupled_weight_decay=group["decoupled_weight_decay"],
                           maximize=group["maximize"])

    def _update(self, param, grad, state, group, lr, step):
        beta1, beta2 = group["betas"]
        exp_avg, exp_avg_sq, mu_product = state["exp_avg"], state["exp_avg_sq"], state["mu_product"]
        weight_decay, momentum_decay = group["weight_decay"], group["momentum_decay"]
        bias_correction2 = 1 - beta2 ** step
        if weight_decay != 0:
            if group["decoupled_weight_decay"]:
                param.mul_(1 - lr * weight_decay)
            else:
                grad = grad.add(param, alpha=weight_decay)
        mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * momentum_decay)))
        mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * momentum_decay)))
        mu_product.mul_(mu)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = exp_avg_sq.div(bias_correction2).sqrt()
        # differentiable: out of place, sqrt's saved output must stay as it was
        if group["differentiable"] or isinstance(step, Tensor):  # (a tensor step: a captured count)
            # As torch: the scaled gradient and average are new tensors, so autograd saves no state tensor that the
            # next step changes in place (a graph spanning several steps stays valid).
            denom = denom.add(group["eps"])
            mu_product_next = mu_product * mu_next
            param.addcdiv_(grad * (-lr * (1.0 - mu) / (1.0 - mu_product)), denom)
            param.addcdiv_(exp_avg * (-lr * mu_next / (1.0 - mu_product_next)), denom)
            return
        denom.add_(group["eps"])
        product = mu_product.item()
        param.addcdiv_(grad, denom, value=-lr * (1.0 - mu) / (1.0 - product))
        param.addcdiv_(exp_avg, denom, value=(-lr * mu_next) / (1.0 - product * mu_next))
