"""RMSprop (``torch.optim.RMSprop``): gradients scaled by a running root-mean-square, optionally centered.

>>> import jitorch
>>> from jitorch.optim import RMSprop
>>> w = jitorch.tensor([1.0, -1.0], requires_grad=True)
>>> opt = RMSprop([w], lr=0.01, momentum=0.9, centered=True)
>>> (w * w).sum().backward()
>>> opt.step()
>>> sorted(opt.state[w])
['grad_avg', 'momentum_buffer', 'square_avg', 'step']
"""
from __future__ import annotations

from .. import _creation
from ._kernels import advance_step, hyper, ops_for
from ._optimizer_helpers import refuse_foreach_autograd
from .optimizer import evaluate_closure, new_step, upgrade_step
from .optimizer import Optimizer, _check_capturable, _check_tensor_lr, _use_grad_for_differentiable

__all__ = ["RMSprop", "rmsprop"]


class RMSprop(Optimizer):
    r"""RMSprop: ``v = alpha v + (1 - alpha) g^2``, ``p -= lr g / (sqrt(v) + eps)``.

    Args:
        params: tensors or parameter groups to optimize.
        lr (float or Tensor): learning rate (default: 1e-2).
        alpha (float): smoothing constant of the squared-gradient average (default: 0.99).
        eps (float): added to the denominator for stability (default: 1e-8).
        weight_decay (float): L2 penalty (default: 0).
        momentum (float): momentum factor (default: 0).
        centered (bool): normalize by the estimated variance of the gradient (default: False).
        capturable (bool): allow capturing step() in a graph (the count is never read in Python) (default: False).
        foreach (bool, optional): accepted for compatibility.
        maximize (bool): maximize the objective (default: False).
        differentiable (bool): record the update with autograd (default: False).
    """

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        _check_tensor_lr(lr)
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        defaults = {"lr": lr, "momentum": momentum, "alpha": alpha, "eps": eps, "centered": centered,
                    "weight_decay": weight_decay, "capturable": capturable, "foreach": foreach, "maximize": maximize,
                    "differentiable": differentiable}
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("momentum", 0)
            group.setdefault("centered", False)
            group.setdefault("foreach", None)
            group.setdefault("maximize", False)
            group.setdefault("differentiable", False)
            group.setdefault("capturable", False)
            for p in group["params"]:
                p_state = self.state.get(p, [])
                upgrade_step(p_state, p, group["capturable"])

    def _init_group(self, group, params_with_grad, grads, square_avgs, momentum_buffer_list, grad_avgs,
                    state_steps):
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("RMSprop does not support sparse gradients")
            params_with_grad.append(p)
            grads.append(p.grad)
            state = self.state[p]
            if len(state) == 0:
                state["step"] = new_step(p, group["capturable"])
                state["square_avg"] = _creation.zeros_like(p)
                if group["momentum"] > 0:
                    state["momentum_buffer"] = _creation.zeros_like(p)
                if group["centered"]:
                    state["grad_avg"] = _creation.zeros_like(p)
            square_avgs.append(state["square_avg"])
            if group["capturable"]:
                _check_capturable(p, state["step"])
            state_steps.append(state["step"])
            if group["momentum"] > 0:
                momentum_buffer_list.append(state["momentum_buffer"])
            if group["centered"]:
                grad_avgs.append(state["grad_avg"])

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        self._accelerator_graph_capture_health_check()
        loss = evaluate_closure(closure)
        for group in self.param_groups:
            params_with_grad, grads, square_avgs, grad_avgs, momentum_buffer_list, state_steps = [], [], [], [], [], []
            self._init_group(group, params_with_grad, grads, square_avgs, momentum_buffer_list, grad_avgs,
                             state_steps)
            refuse_foreach_autograd(group)
            rmsprop(params_with_grad, grads, square_avgs, grad_avgs, momentum_buffer_list, state_steps,
                    lr=group["lr"], alpha=group["alpha"], eps=group["eps"], weight_decay=group["weight_decay"],
                    momentum=group["momentum"], centered=group["centered"], maximize=group["maximize"],
                    differentiable=group["differentiable"])
        return loss


def rmsprop(params, grads, square_avgs, grad_avgs, momentum_buffer_list, state_steps, foreach=None,
            maximize=False, differentiable=False, capturable=False, has_complex=False, *, lr, alpha, eps,
            weight_decay, momentum, centered):
    """Functional RMSprop: updates ``params`` and the running averages in place."""
    ops = ops_for({"differentiable": differentiable})
    lr, alpha, eps, weight_decay, momentum = (hyper(v, ops) for v in (lr, alpha, eps, weight_decay, momentum))
    for i, param_t in enumerate(params):
        advance_step(state_steps[i])
        param = ops.unwrap(param_t)
        grad = ops.unwrap(grads[i])
        square_avg = ops.unwrap(square_avgs[i])
        if maximize:
            grad = ops.neg(grad)
        if weight_decay != 0:
            grad = ops.add(grad, param, weight_decay)
        ops.mul_(square_avg, alpha)
        ops.addcmul_(square_avg, grad, grad, 1 - alpha)
        touched = [param_t, square_avgs[i]]
        if centered:
            grad_avg = ops.unwrap(grad_avgs[i])
            ops.lerp_(grad_avg, grad, 1 - alpha)
            avg = ops.sqrt_(ops.addcmul(square_avg, grad_avg, grad_avg, -1))
            touched.append(grad_avgs[i])
        else:
            avg = ops.sqrt(square_avg)
        ops.add_scalar_(avg, eps)
        if momentum > 0:
            buf = ops.unwrap(momentum_buffer_list[i])
            ops.mul_(buf, momentum)
            ops.addcdiv_(buf, grad, avg)
            ops.add_(param, buf, -lr)
            touched.append(momentum_buffer_list[i])
        else:
            ops.addcdiv_(param, grad, avg, -lr)
        ops.touched(*touched)
