"""Adadelta (``torch.optim.Adadelta``): steps scaled by the ratio of running RMS of updates and of gradients.

>>> import jitorch
>>> from jitorch.optim import Adadelta
>>> w = jitorch.tensor([1.0, -1.0], requires_grad=True)
>>> opt = Adadelta([w])
>>> (w * w).sum().backward()
>>> opt.step()
>>> sorted(opt.state[w])
['acc_delta', 'square_avg', 'step']
"""
from __future__ import annotations

from .. import _creation
from ._kernels import advance_step, hyper, ops_for
from ._optimizer_helpers import refuse_foreach_autograd
from .optimizer import evaluate_closure, new_step, upgrade_step
from .optimizer import Optimizer, _check_capturable, _check_tensor_lr, _use_grad_for_differentiable

__all__ = ["Adadelta", "adadelta"]


class Adadelta(Optimizer):
    r"""Adadelta: ``v = rho v + (1 - rho) g^2``, ``d = sqrt(u + eps) / sqrt(v + eps) g``, ``p -= lr d``.

    Args:
        params: tensors or parameter groups to optimize.
        lr (float or Tensor): coefficient scaling the delta (default: 1.0).
        rho (float): decay of the running averages (default: 0.9).
        eps (float): added inside the square roots for stability (default: 1e-6).
        weight_decay (float): L2 penalty (default: 0).
        capturable (bool): allow capturing step() in a graph (the count is never read in Python) (default: False).
        foreach (bool, optional): accepted for compatibility.
        maximize (bool): maximize the objective (default: False).
        differentiable (bool): record the update with autograd (default: False).
    """

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *, capturable=False,
                 maximize=False, differentiable=False):
        _check_tensor_lr(lr)
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {"lr": lr, "rho": rho, "eps": eps, "weight_decay": weight_decay, "maximize": maximize,
                    "capturable": capturable, "foreach": foreach, "differentiable": differentiable}
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("foreach", None)
            group.setdefault("maximize", False)
            group.setdefault("differentiable", False)
            group.setdefault("capturable", False)
            for p in group["params"]:
                p_state = self.state.get(p, [])
                upgrade_step(p_state, p, group["capturable"])

    def _init_group(self, group, params_with_grad, grads, square_avgs, acc_deltas, state_steps):
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("Adadelta does not support sparse gradients")
            params_with_grad.append(p)
            grads.append(p.grad)
            state = self.state[p]
            if len(state) == 0:
                state["step"] = new_step(p, group["capturable"])
                state["square_avg"] = _creation.zeros_like(p)
                state["acc_delta"] = _creation.zeros_like(p)
            square_avgs.append(state["square_avg"])
            acc_deltas.append(state["acc_delta"])
            if group["capturable"]:
                _check_capturable(p, state["step"])
            state_steps.append(state["step"])

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        self._accelerator_graph_capture_health_check()
        loss = evaluate_closure(closure)
        for group in self.param_groups:
            params_with_grad, grads, square_avgs, acc_deltas, state_steps = [], [], [], [], []
            self._init_group(group, params_with_grad, grads, square_avgs, acc_deltas, state_steps)
            refuse_foreach_autograd(group, even_without_grads=True)
            adadelta(params_with_grad, grads, square_avgs, acc_deltas, state_steps, lr=group["lr"],
                     rho=group["rho"], eps=group["eps"], weight_decay=group["weight_decay"],
                     maximize=group["maximize"], differentiable=group["differentiable"])
        return loss


def adadelta(params, grads, square_avgs, acc_deltas, state_steps, capturable=False, foreach=None,
             differentiable=False, has_complex=False, *, lr, rho, eps, weight_decay, maximize):
    """Functional Adadelta: updates ``params`` and the running averages in place."""
    ops = ops_for({"differentiable": differentiable})
    lr, rho, eps, weight_decay = (hyper(v, ops) for v in (lr, rho, eps, weight_decay))
    for param_t, grad_t, square_avg_t, acc_delta_t, step_t in zip(params, grads, square_avgs, acc_deltas,
                                                                  state_steps):
        advance_step(step_t)
        param, grad = ops.unwrap(param_t), ops.unwrap(grad_t)
        square_avg, acc_delta = ops.unwrap(square_avg_t), ops.unwrap(acc_delta_t)
        if maximize:
            grad = ops.neg(grad)
        if weight_decay != 0:
            grad = ops.add(grad, param, weight_decay)
        ops.mul_(square_avg, rho)
        ops.addcmul_(square_avg, grad, grad, 1 - rho)
        std = ops.sqrt_(ops.add_scalar(square_avg, eps))
        delta = ops.sqrt_(ops.add_scalar(acc_delta, eps))
        ops.div_t_(delta, std)
        ops.mul_t_(delta, grad)
        ops.mul_(acc_delta, rho)
        ops.addcmul_(acc_delta, delta, delta, 1 - rho)
        ops.add_(param, delta, -lr)
        ops.touched(param_t, square_avg_t, acc_delta_t)
