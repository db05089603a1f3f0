"""Adafactor (``torch.optim.Adafactor``): Adam-like steps from a factored second moment (row and column means of
``g^2`` over the last two dims), relative step sizes and update clipping.

>>> import jitorch
>>> w = jitorch.ones(2, 3, requires_grad=True)
>>> opt = jitorch.optim.Adafactor([w], lr=0.01)
>>> (w * w).sum().backward()
>>> opt.step()
>>> sorted(opt.state[w])
['col_var', 'row_var', 'step']
"""
from __future__ import annotations

from .. import _creation, _dtype, _reduction
from ..autograd.grad_mode import no_grad
from .optimizer import Optimizer, _check_tensor_lr, _get_scalar_dtype, _to_scalar, evaluate_closure

__all__ = ["Adafactor"]


class Adafactor(Optimizer):
    r"""Adafactor as torch's: ``rho_t = min(lr, 1 / sqrt(t))``, ``alpha = max(eps2, RMS(p)) rho_t``; the variance is
    ``row_var @ col_var / mean(row_var)`` (a vector keeps a full ``variance``), both averaged with weight
    ``t^beta2_decay``; ``u = g / sqrt(var)`` is clipped to RMS ``d``: ``p -= alpha u / max(1, RMS(u) / d)``.

    Args:
        params: tensors or parameter groups to optimize (real).
        lr (float or Tensor): the cap of the relative step size (default: 1e-2).
        beta2_decay (float): decay exponent of the second moment's averaging weight (default: -0.8).
        eps (tuple): ``(eps1, eps2)``: the variance floor's root (``None``: the dtype's eps) and the smallest
            parameter RMS (default: (None, 1e-3)).
        d (float): clipping threshold of the update's RMS (default: 1.0).
        weight_decay (float): decoupled weight decay (default: 0.0).
        foreach (bool, optional): accepted for compatibility.
        maximize (bool): maximize the objective (default: False).
    """

    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0, *,
                 foreach=None, maximize=False):
        _check_tensor_lr(lr)
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 >= beta2_decay:
            raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        if not 0.0 <= eps[1]:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
        if not 1.0 <= d:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight_decay should be >= 0 but is: {weight_decay}")
        super().__init__(params, {"lr": lr, "beta2_decay": beta2_decay, "eps": eps, "d": d,
                                  "weight_decay": weight_decay, "foreach": foreach, "maximize": maximize})

    def __setstate__(self, state):
        super().__setstate__(state)
        self._upgrade_state({"foreach": None})

    def step(self, closure=None):
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        loss = evaluate_closure(closure)
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if p.is_complex():
                        raise RuntimeError("Adafactor does not support complex parameters")
                    if p.grad.is_sparse:
                        raise RuntimeError("Adafactor does not support sparse gradients")
                    self._update(p, group)
        return loss

    def _update(self, param, group):
        grad = param.grad if not group["maximize"] else -param.grad
        state = self.state[param]
        if len(state) == 0:
            state["step"] = _creation.tensor(0.0, dtype=_get_scalar_dtype())
            if grad.dim() > 1:
                state["row_var"] = grad.new_zeros(tuple(grad.shape[:-1]) + (1,))
                state["col_var"] = grad.new_zeros(tuple(grad.shape[:-2]) + (1, grad.shape[-1]))
            else:
                state["variance"] = _creation.zeros_like(grad)
        lr, (eps1, eps2) = float(_to_scalar(group["lr"])), group["eps"]
        if eps1 is None:
            eps1 = _dtype.finfo(param.dtype).eps
        state["step"].add_(1)
        step = state["step"].item()
        one_minus_beta2_t = step ** group["beta2_decay"]
        rho_t = min(lr, 1 / (step ** 0.5))
        alpha = max(eps2, param.norm(2).item() / (param.numel() ** 0.5)) * rho_t
        if group["weight_decay"] != 0:
            param.mul_(1 - lr * group["weight_decay"])
        if grad.dim() > 1:
            row_var, col_var = state["row_var"], state["col_var"]
            # the mean of g^2 as torch forms it: a norm squared over the length
            row_var.lerp_(_reduction.norm(grad, dim=-1, keepdim=True).square_().div_(grad.shape[-1]), one_minus_beta2_t)
            col_var.lerp_(_reduction.norm(grad, dim=-2, keepdim=True).square_().div_(grad.shape[-2]), one_minus_beta2_t)
            var_estimate = row_var @ col_var
            var_estimate.div_(row_var.mean(dim=-2, keepdim=True).clamp_(min=eps1))
        else:
            state["variance"].lerp_(grad * grad, one_minus_beta2_t)
            var_estimate = state["variance"].clone()
        update = var_estimate.clamp_(min=eps1 * eps1).rsqrt_()
        update.mul_(grad)
        denom = max(1.0, update.norm(2).item() / ((update.numel() ** 0.5) * group["d"]))
        param.add_(update, alpha=-alpha / denom)
