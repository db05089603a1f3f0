"""Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay (``torch.optim.SGD``).

>>> import jitorch
>>> from jitorch.optim import SGD
>>> w = jitorch.tensor([1.0, -1.0], requires_grad=True)
>>> opt = SGD([w], lr=0.1, momentum=0.9)
>>> for _ in range(2):
...     opt.zero_grad()
...     (w * w).sum().backward()
...     opt.step()
>>> w
tensor([ 0.4600, -0.4600], requires_grad=True)
"""
from __future__ import annotations

from .._tensor import Tensor
from ._fused import fused_sgd
from ._kernels import capturing, hyper, ops_for
from .optimizer import evaluate_closure
from .optimizer import (Optimizer, _check_fused_flags, _check_tensor_lr, _device_dtype_check_for_fused,
                        _use_grad_for_differentiable)

__all__ = ["SGD", "sgd"]


class SGD(Optimizer):
    r"""Stochastic gradient descent, optionally with momentum (PyTorch's update rule).

    Args:
        params: tensors or parameter groups to optimize.
        lr (float or Tensor): learning rate (default: 1e-3).
        momentum (float): momentum factor (default: 0).
        dampening (float): dampening for momentum (default: 0).
        weight_decay (float): L2 penalty added to the gradient (default: 0).
        nesterov (bool): Nesterov momentum; needs a momentum and zero dampening (default: False).
        maximize (bool): maximize the objective instead of minimizing it (default: False).
        foreach (bool, optional): accepted for compatibility; every variant computes the same update.
        fused (bool, optional): update each float32/float64 CPU parameter and its momentum buffer in one pass of a
            generated kernel (`jitorch.optim._fused`); other tensors take the unfused update. The default (None)
            does the same unless ``differentiable``: the update equals torch's per-tensor one within rounding.
        differentiable (bool): record the update with autograd (default: False).

    The momentum buffer starts as the first gradient, then ``b = momentum * b + (1 - dampening) * g``.
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
                 maximize=False, foreach=None, differentiable=False, fused=None):
        _check_tensor_lr(lr)
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay,
                    "nesterov": nesterov, "maximize": maximize, "foreach": foreach, "differentiable": differentiable,
                    "fused": fused}
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)
        if fused:
            self._step_supports_amp_scaling = True
            self._need_device_dtype_check_for_fused = True
        _check_fused_flags(fused, foreach, differentiable)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)
            group.setdefault("maximize", False)
            group.setdefault("foreach", None)
            group.setdefault("differentiable", False)
            group.setdefault("fused", False)

    def _init_group(self, group, params, grads, momentum_buffer_list):
        for p in group["params"]:
            if p.grad is None:
                continue
            if group["fused"] and getattr(self, "_need_device_dtype_check_for_fused", True):
                _device_dtype_check_for_fused(p)
                self._need_device_dtype_check_for_fused = False
            params.append(p)
            grads.append(p.grad)
            if group["momentum"] != 0:
                momentum_buffer_list.append(self.state[p].get("momentum_buffer"))

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        loss = evaluate_closure(closure)
        for group in self.param_groups:
            params, grads, momentum_buffer_list = [], [], []
            self._init_group(group, params, grads, momentum_buffer_list)
            sgd(params, grads, momentum_buffer_list, weight_decay=group["weight_decay"], momentum=group["momentum"],
                lr=group["lr"], dampening=group["dampening"], nesterov=group["nesterov"], maximize=group["maximize"],
                differentiable=group["differentiable"], fused=group["fused"])
            if group["momentum"] != 0:
                for p, buf in zip(params, momentum_buffer_list):
                    self.state[p]["momentum_buffer"] = buf
        return loss


def sgd(params, d_p_list, momentum_buffer_list, has_sparse_grad=False, foreach=None, fused=None, grad_scale=None,
        found_inf=None, *, weight_decay, momentum, lr, dampening, nesterov, maximize, differentiable=False):
    """Functional SGD: updates ``params`` in place; fills ``None`` entries of ``momentum_buffer_list``.

    ``fused=True`` runs one generated kernel per parameter (`_fused.fused_sgd`) for contiguous float32/float64 CPU
    tensors; other tensors take the unfused update, which computes the same result.
    """
    if fused and differentiable:
        raise RuntimeError("`fused` does not support `differentiable`")
    if has_sparse_grad or any(type(g) is not Tensor and g.is_sparse for g in d_p_list):  # sparse=True embeddings
        if fused:
            raise RuntimeError("`_fused_sgd` does not support sparse gradients")
        lr = float(lr.item()) if isinstance(lr, Tensor) and not differentiable else lr
        rest = []
        for i, g in enumerate(d_p_list):
            if g.is_sparse:
                _sparse_sgd(params[i], g, momentum_buffer_list, i, weight_decay=weight_decay, momentum=momentum,
                            lr=lr, dampening=dampening, nesterov=nesterov, maximize=maximize)
            else:
                rest.append(i)
        buffers = [momentum_buffer_list[i] for i in rest] if momentum != 0 else []
        sgd([params[i] for i in rest], [d_p_list[i] for i in rest], buffers, foreach=foreach, fused=fused,
            grad_scale=grad_scale, found_inf=found_inf, weight_decay=weight_decay, momentum=momentum, lr=lr,
            dampening=dampening, nesterov=nesterov, maximize=maximize, differentiable=differentiable)
        for i, buf in zip(rest, buffers):
            momentum_buffer_list[i] = buf
        return
    # fused=None on plain CPU float tensors also takes the fused kernel: the same update as the per-tensor rule (within
    # rounding, as torch's for-loop and fused SGD differ) in one pass instead of four NumPy passes.
    if (fused or (fused is None and grad_scale is None and found_inf is None)) and not differentiable \
            and not capturing() and fused_sgd(
            params, d_p_list, momentum_buffer_list, weight_decay=weight_decay, momentum=momentum, lr=lr,
            dampening=dampening, nesterov=nesterov, maximize=maximize, grad_scale=grad_scale, found_inf=found_inf,
            as_fused=fused is True):
        return
    if grad_scale is not None or found_inf is not None:
        raise NotImplementedError("SGD: grad_scale/found_inf (AMP gradient scaling) is not supported")
    ops = ops_for({"differentiable": differentiable})
    weight_decay, momentum, lr, dampening = (hyper(v, ops) for v in (weight_decay, momentum, lr, dampening))
    # Every step of SGD is linear, so complex tensors update as they are (no real view needed).
    for i, param_t in enumerate(params):
        param = ops.unwrap(param_t, real=False)
        grad = ops.unwrap(d_p_list[i], real=False)
        if maximize:
            grad = ops.neg(grad)
        if weight_decay != 0:
            grad = ops.add(grad, param, weight_decay)
        if momentum != 0:
            buf_t = momentum_buffer_list[i]
            if buf_t is None:
                buf = ops.new_state_from(grad)
                buf_t = momentum_buffer_list[i] = ops.wrap(buf)
            else:
                buf = ops.unwrap(buf_t, real=False)
                ops.mul_(buf, momentum)
                ops.add_(buf, grad, 1 - dampening)
                ops.touched(buf_t)
            grad = ops.add(grad, buf, momentum) if nesterov else buf
        ops.add_(param, grad, -lr)
        ops.touched(param_t)


def _sparse_sgd(param, grad, momentum_buffer_list, i, *, weight_decay, momentum, lr, dampening, nesterov, maximize):
    """torch's single-tensor rule for a sparse gradient: a sparse momentum buffer, the parameter updated at the
    gradient's entries only (each entry added in turn, as ATen's ``add_``); weight decay is refused as torch
    refuses it (``add(sparse, dense)``)."""
    from ..sparse._coo_add import add_dense_sparse

    if maximize:
        grad = -grad
    if weight_decay != 0:
        grad = grad.add(param, alpha=weight_decay)
    if momentum != 0:
        buf = momentum_buffer_list[i]
        if buf is None:
            buf = momentum_buffer_list[i] = grad.clone().detach()
        else:
            buf.mul_(momentum)
            if buf.is_sparse:
                buf.add_(grad, alpha=1 - dampening)
            else:
                add_dense_sparse(buf, grad, 1 - dampening, inplace=True)
        grad = grad.add(buf, alpha=momentum) if nesterov else buf
    if grad.is_sparse:
        add_dense_sparse(param, grad, -lr, inplace=True)
    else:
        param.add_(grad, alpha=-lr)
