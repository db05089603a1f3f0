"""Adagrad (``torch.optim.Adagrad``): per-coordinate steps scaled by the root of the summed squared gradients.

>>> import jitorch
>>> from jitorch.optim import Adagrad
>>> w = jitorch.tensor([1.0, -1.0], requires_grad=True)
>>> opt = Adagrad([w], lr=0.1)
>>> (w * w).sum().backward()
>>> opt.step()
>>> w
tensor([ 0.9000, -0.9000], requires_grad=True)
"""
from __future__ import annotations

from .. import _creation
from .._tensor import Tensor
from ._kernels import ARRAY_OPS, advance_step, capturing, hyper, increment_step, ops_for
from ._sparse_update import refuse_sparse_capture, update_at_entries
from ._optimizer_helpers import refuse_foreach_autograd
from .optimizer import evaluate_closure, new_step
from .optimizer import (Optimizer, _check_fused_flags, _check_tensor_lr, _device_dtype_check_for_fused,
                        _get_scalar_dtype, _use_grad_for_differentiable)

__all__ = ["Adagrad", "adagrad"]


class Adagrad(Optimizer):
    r"""Adagrad: ``s += g^2``, ``p -= clr g / (sqrt(s) + eps)`` with ``clr = lr / (1 + (step - 1) lr_decay)``.

    Args:
        params: tensors or parameter groups to optimize.
        lr (float or Tensor): learning rate (default: 1e-2).
        lr_decay (float): learning-rate decay (default: 0).
        weight_decay (float): L2 penalty (default: 0).
        initial_accumulator_value (float): the starting value of the squared-gradient sums (default: 0).
        eps (float): added to the denominator for stability (default: 1e-10).
        foreach, fused (bool, optional): accepted for compatibility.
        maximize (bool): maximize the objective (default: False).
        differentiable (bool): record the update with autograd (default: False).

    The state (``'step'`` and ``'sum'``) is created for every parameter at construction, as in PyTorch.
    """

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 foreach=None, *, maximize=False, differentiable=False, fused=None):
        _check_tensor_lr(lr)
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        defaults = {"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay,
                    "initial_accumulator_value": initial_accumulator_value, "foreach": foreach,
                    "maximize": maximize, "differentiable": differentiable, "fused": fused}
        super().__init__(params, defaults)
        _check_fused_flags(fused, foreach, differentiable)
        if fused:
            self._need_device_dtype_check_for_fused = True
            self._step_supports_amp_scaling = True
        for group in self.param_groups:
            for p in group["params"]:
                self._init_state(self.state[p], p, group["fused"], initial_accumulator_value)

    @staticmethod
    def _init_state(state, p, fused, initial_accumulator_value):
        state["step"] = new_step(p, fused, fused)
        init_value = (complex(initial_accumulator_value, initial_accumulator_value) if p.is_complex()
                      else initial_accumulator_value)
        state["sum"] = _creation.full_like(p, init_value)

    def __setstate__(self, state):
        super().__setstate__(state)
        fused = None
        for group in self.param_groups:
            group.setdefault("foreach", None)
            group.setdefault("maximize", False)
            group.setdefault("differentiable", False)
            fused = group.setdefault("fused", None)
        for s in self.state.values():
            if "step" in s and not isinstance(s["step"], Tensor):
                s["step"] = _creation.tensor(float(s["step"]), dtype=_get_scalar_dtype(fused))

    def share_memory(self):
        """Calls ``share_memory_()`` on the state sums."""
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["sum"].share_memory_()

    def _capture_refusal(self):
        if any(group["lr_decay"] != 0 for group in self.param_groups):
            return "Adagrad's lr_decay reads its step count as a Python number"
        return None

    def _init_group(self, group, params_with_grad, grads, state_sums, state_steps):
        for p in group["params"]:
            if p.grad is None:
                continue
            if group["fused"] and getattr(self, "_need_device_dtype_check_for_fused", True):
                _device_dtype_check_for_fused(p)
                self._need_device_dtype_check_for_fused = False
            params_with_grad.append(p)
            grads.append(p.grad)
            state = self.state[p]
            if len(state) == 0:  # a parameter added with add_param_group after construction
                self._init_state(state, p, group["fused"], self.defaults["initial_accumulator_value"])
            state_sums.append(state["sum"])
            state_steps.append(state["step"])

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        loss = evaluate_closure(closure)
        for group in self.param_groups:
            params_with_grad, grads, state_sums, state_steps = [], [], [], []
            self._init_group(group, params_with_grad, grads, state_sums, state_steps)
            refuse_foreach_autograd(group, even_without_grads=True)
            adagrad(params_with_grad, grads, state_sums, state_steps, fused=group["fused"], lr=group["lr"],
                    weight_decay=group["weight_decay"], lr_decay=group["lr_decay"], eps=group["eps"],
                    maximize=group["maximize"], differentiable=group["differentiable"])
        return loss


def adagrad(params, grads, state_sums, state_steps, fused=None, grad_scale=None, found_inf=None,
            has_sparse_grad=False, foreach=None, differentiable=False, has_complex=False, *, lr, weight_decay,
            lr_decay, eps, maximize):
    """Functional Adagrad: updates ``params`` and the squared-gradient sums in place."""
    if not all(isinstance(t, Tensor) for t in state_steps):
        raise RuntimeError("API has changed, `state_steps` argument must contain a list of singleton tensors")
    if fused and any(type(g) is not Tensor and g.is_sparse for g in grads):
        raise RuntimeError("`fused` does not support sparse grad or complex param")
    ops = ops_for({"differentiable": differentiable})
    lr, weight_decay, lr_decay, eps = (hyper(v, ops) for v in (lr, weight_decay, lr_decay, eps))
    for param_t, grad_t, sum_t, step_t in zip(params, grads, state_sums, state_steps):
        if type(grad_t) is not Tensor and grad_t.is_sparse:  # sparse=True embeddings
            refuse_sparse_capture("Adagrad's step with a sparse gradient")
            _sparse_adagrad(param_t, grad_t, sum_t, increment_step(step_t), lr=lr, weight_decay=weight_decay,
                            lr_decay=lr_decay, eps=eps, maximize=maximize)
            continue
        if lr_decay == 0 and capturing():
            # Without decay the rate does not depend on the count: the step is capturable as is.
            advance_step(step_t)
            step = 1.0
        else:
            step = increment_step(step_t)
        param, grad, state_sum = ops.unwrap(param_t), ops.unwrap(grad_t), ops.unwrap(sum_t)
        if maximize:
            grad = ops.neg(grad)
        if weight_decay != 0:
            grad = ops.add(grad, param, weight_decay)
        clr = lr / (1 + (step - 1) * lr_decay)
        ops.addcmul_(state_sum, grad, grad, 1)
        std = ops.sqrt(state_sum)
        ops.add_scalar_(std, eps)
        ops.addcdiv_(param, grad, std, -clr)
        ops.touched(param_t, sum_t)


def _sparse_adagrad(param, grad, state_sum, step, *, lr, weight_decay, lr_decay, eps, maximize):
    """torch's update for a sparse gradient (``sparse=True`` embeddings): the sums and the parameter change at the
    coalesced gradient's entries only."""
    if weight_decay != 0:
        raise RuntimeError("weight_decay option is not compatible with sparse gradients")
    clr = lr / (1 + (step - 1) * lr_decay)

    def adagrad(values, sums, p):
        sums = sums + values * values
        return sums, p + -clr * (values / (ARRAY_OPS.sqrt(sums) + eps))
    update_at_entries(grad, maximize, (state_sum, param), adagrad)
