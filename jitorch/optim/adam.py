"""Adam and AdamW (``torch.optim.Adam``, ``torch.optim.AdamW``), with AMSGrad, weight decay and maximize.

>>> import jitorch
>>> from jitorch.optim import AdamW
>>> w = jitorch.tensor([1.0, -1.0], requires_grad=True)
>>> opt = AdamW([w], lr=0.1, weight_decay=0.0)
>>> (w * w).sum().backward()
>>> opt.step()
>>> w
tensor([ 0.9000, -0.9000], requires_grad=True)
>>> sorted(opt.state[w])
['exp_avg', 'exp_avg_sq', 'step']
"""
from __future__ import annotations

import numpy as np

from .. import _creation
from .._tensor import Tensor
from ._fused import fused_adam, per_op_lr_terms
from ._kernels import advance_step, capturing, hyper, increment_step, ops_for
from ._optimizer_helpers import refuse_foreach_autograd
from ._step_capture import factor_step
from .optimizer import evaluate_closure, new_step, upgrade_step
from .optimizer import (Optimizer, _check_adam_hyperparameters, _check_capturable, _check_fused_flags, _check_tensor_lr,
                        _device_dtype_check_for_fused, _to_scalar, _use_grad_for_differentiable)

__all__ = ["Adam", "AdamW", "adam", "adamw"]


class Adam(Optimizer):
    r"""Adam: ``m = lerp(m, g, 1 - beta1)``, ``v = beta2 v + (1 - beta2) g^2``, bias-corrected step.

    Args:
        params: tensors or parameter groups to optimize.
        lr (float or Tensor): learning rate (default: 1e-3).
        betas (tuple of two floats): decay rates of the gradient's running averages (default: (0.9, 0.999)).
        eps (float): added to the denominator for stability (default: 1e-8).
        weight_decay (float): L2 penalty (default: 0); decoupled (AdamW) with ``decoupled_weight_decay=True``.
        amsgrad (bool): use the maximum of the second-moment averages (AMSGrad) (default: False).
        maximize (bool): maximize the objective (default: False).
        capturable (bool): keep the step count in a tensor and compute the bias corrections with tensor ops, so
            the step can be captured in a graph (``jitorch.cpu.graph``, CUDA graphs) and every replay advances
            the count (default: False). Unlike PyTorch, CPU parameters may be capturable too.
        foreach (bool, optional): accepted for compatibility; the update is the same.
        fused (bool, optional): update each float32/float64 CPU parameter and its state in one pass of a generated
            kernel (`jitorch.optim._fused`), torch's ``fused=True`` values bit for bit; other tensors take the
            unfused update. The default (None) takes the kernel too unless ``differentiable`` or ``capturable``,
            rounding as torch's per-op update (which differs from its fused one in a parameter's last elements).
        differentiable (bool): record the update with autograd (default: False).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 foreach=None, maximize=False, capturable=False, differentiable=False, fused=None,
                 decoupled_weight_decay=False):
        if isinstance(lr, Tensor):
            if foreach and not capturable:
                raise ValueError("lr as a Tensor is not supported for capturable=False and foreach=True")
            _check_tensor_lr(lr)
        _check_adam_hyperparameters(lr, eps, betas, weight_decay)
        if not ((isinstance(betas[0], float) and isinstance(betas[1], float))
                or (isinstance(betas[0], Tensor) and isinstance(betas[1], Tensor))):
            raise ValueError("betas must be either both floats or both Tensors")
        for i in (0, 1):
            if isinstance(betas[i], Tensor):
                if not capturable and foreach:
                    raise ValueError(f"betas[{i}] as a Tensor is not supported for capturable=False and foreach=True")
                if betas[i].numel() != 1:
                    raise ValueError(f"Tensor betas[{i}] must be 1-element")
        betas = tuple(map(_to_scalar, betas))
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad,
                    "maximize": maximize, "foreach": foreach, "capturable": capturable,
                    "differentiable": differentiable, "fused": fused, "decoupled_weight_decay": decoupled_weight_decay}
        super().__init__(params, defaults)
        if fused:
            self._step_supports_amp_scaling = True
        _check_fused_flags(fused, foreach, differentiable)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)
            group.setdefault("maximize", False)
            group.setdefault("foreach", None)
            group.setdefault("capturable", False)
            group.setdefault("differentiable", False)
            group.setdefault("decoupled_weight_decay", False)
            fused = group.setdefault("fused", None)
            for p in group["params"]:
                p_state = self.state.get(p, [])
                upgrade_step(p_state, p, group["capturable"] or group["fused"], fused)

    def _init_group(self, group, params_with_grad, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps):
        # The group's options are read once, not once per parameter: this loop is most of a small model's step.
        fused, amsgrad, capturable = group["fused"], group["amsgrad"], group["capturable"]
        differentiable = group["differentiable"]
        tensor_lr_refused = group["foreach"] and isinstance(group["lr"], Tensor) and not capturable
        state_of = self.state
        for p in group["params"]:
            grad = p.grad
            if grad is None:
                continue
            if type(grad) is not Tensor and grad.is_sparse:  # (the type test first: this loop is hot)
                raise RuntimeError("Adam does not support sparse gradients, please consider SparseAdam instead")
            params_with_grad.append(p)
            grads.append(grad)
            state = state_of[p]
            if len(state) == 0:
                if fused:
                    _device_dtype_check_for_fused(p)
                # The step is a 0-d tensor on the CPU (on the parameter's device when fused or capturable).
                state["step"] = new_step(p, capturable or fused, fused)
                state["exp_avg"] = _creation.zeros_like(p)
                state["exp_avg_sq"] = _creation.zeros_like(p)
                if amsgrad:
                    state["max_exp_avg_sq"] = _creation.zeros_like(p)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            if amsgrad:
                max_exp_avg_sqs.append(state["max_exp_avg_sq"])
            step_t = state["step"]
            if differentiable and step_t.requires_grad:
                raise RuntimeError("`requires_grad` is not supported for `step` in differentiable mode")
            if tensor_lr_refused:
                raise RuntimeError("lr as a Tensor is not supported for capturable=False and foreach=True")
            if capturable:
                _check_capturable(p, step_t)
            state_steps.append(step_t)

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        self._accelerator_graph_capture_health_check()
        loss = evaluate_closure(closure)
        for group in self.param_groups:
            params_with_grad, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps = [], [], [], [], [], []
            self._init_group(group, params_with_grad, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps)
            refuse_foreach_autograd(group)
            beta1, beta2 = group["betas"]
            adam(params_with_grad, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
                 amsgrad=group["amsgrad"], beta1=beta1, beta2=beta2, lr=group["lr"],
                 weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"],
                 capturable=group["capturable"], differentiable=group["differentiable"], fused=group["fused"],
                 decoupled_weight_decay=group["decoupled_weight_decay"])
        return loss


class AdamW(Adam):
    r"""AdamW: Adam with decoupled weight decay, ``p = p * (1 - lr * weight_decay)`` before the Adam step.

    Takes Adam's arguments with ``weight_decay`` defaulting to 1e-2 (and no ``decoupled_weight_decay``: it is
    always on).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group["decoupled_weight_decay"] = True


def adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, foreach=None, capturable=False,
         differentiable=False, fused=None, grad_scale=None, found_inf=None, has_complex=False,
         decoupled_weight_decay=False, *, amsgrad, beta1, beta2, lr, weight_decay, eps, maximize):
    """Functional Adam: updates ``params`` and the moment averages in place and counts ``state_steps``.

    ``fused=True`` runs one generated kernel per parameter (`_fused.fused_adam`) for contiguous float32/float64 CPU
    tensors; other tensors take the unfused update, which computes the same result.
    """
    if fused and differentiable:
        raise RuntimeError("Adam with fused=True does not support differentiable=True")
    # fused=None on plain CPU float tensors also takes the fused kernel (see `sgd`): one pass instead of about ten.
    by_default = fused is None and not (differentiable or capturable) and grad_scale is None and found_inf is None
    if (fused or by_default) and not capturing() and fused_adam(
            params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, amsgrad=amsgrad, beta1=beta1,
            beta2=beta2, lr=lr, weight_decay=weight_decay, eps=eps, maximize=maximize,
            decoupled_weight_decay=decoupled_weight_decay, grad_scale=grad_scale, found_inf=found_inf,
            as_fused=bool(fused)):
        return
    if grad_scale is not None or found_inf is not None:
        raise NotImplementedError("Adam: grad_scale/found_inf (AMP gradient scaling) is not supported")
    if not all(isinstance(t, Tensor) for t in state_steps):
        raise RuntimeError("API has changed, `state_steps` argument must contain a list of singleton tensors")
    if capturable or differentiable:
        # PyTorch's differentiable update is its capturable formula: bias corrections from the float32 step tensor.
        for i, param in enumerate(params):
            _capturable_adam_step(param, grads[i], exp_avgs[i], exp_avg_sqs[i],
                                  max_exp_avg_sqs[i] if amsgrad else None, state_steps[i], beta1=beta1, beta2=beta2,
                                  lr=lr, weight_decay=weight_decay, eps=eps, maximize=maximize,
                                  decoupled_weight_decay=decoupled_weight_decay, differentiable=differentiable)
        return
    ops = ops_for({"differentiable": differentiable})
    lr_given = lr
    beta1, beta2, lr, weight_decay, eps = (hyper(v, ops) for v in (beta1, beta2, lr, weight_decay, eps))
    for i, param_t in enumerate(params):
        step = increment_step(state_steps[i])
        param = ops.unwrap(param_t)
        grad = ops.unwrap(grads[i])
        exp_avg, exp_avg_sq = ops.unwrap(exp_avgs[i]), ops.unwrap(exp_avg_sqs[i])
        if maximize:
            grad = ops.neg(grad)
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size, decay = per_op_lr_terms(lr_given, bias_correction1, weight_decay) if not ops.differentiable \
            else (lr / bias_correction1, 1 - lr * weight_decay)
        if weight_decay != 0:
            if decoupled_weight_decay:
                ops.mul_(param, decay)
            else:
                grad = ops.add(grad, param, weight_decay)
        ops.lerp_(exp_avg, grad, 1 - beta1)
        ops.mul_(exp_avg_sq, beta2)
        ops.addcmul_(exp_avg_sq, grad, grad, 1 - beta2)
        bias_correction2_sqrt = bias_correction2 ** 0.5
        second_moment = exp_avg_sq
        if amsgrad:
            second_moment = ops.unwrap(max_exp_avg_sqs[i])
            ops.maximum_(second_moment, exp_avg_sq)
            ops.touched(max_exp_avg_sqs[i])
        denom = ops.sqrt(second_moment)
        ops.div_scalar_(denom, bias_correction2_sqrt)
        ops.add_scalar_(denom, eps)
        ops.addcdiv_(param, exp_avg, denom, -step_size)
        ops.touched(param_t, exp_avgs[i], exp_avg_sqs[i])


def _capturable_adam_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step_t, *, beta1, beta2, lr, weight_decay,
                          eps, maximize, decoupled_weight_decay, differentiable=False):
    """One parameter's Adam update in tensor ops only, PyTorch's ``capturable=True`` formula.

    The count stays in ``step_t`` and the bias corrections are 0-d tensors computed from it, so nothing in the update
    is a Python number that depends on the step: a captured step replays with the count it has at each replay.
    The step size is folded into the denominator (``addcdiv_`` takes no tensor ``value``), as PyTorch does.
    """
    from .._pointwise import maximum

    advance_step(step_t)
    if maximize:
        grad = -grad
    if weight_decay != 0:
        if decoupled_weight_decay:
            param.mul_(1 - lr * weight_decay)
        else:
            grad = grad.add(param, alpha=weight_decay)
    if param.is_complex():
        from .. import view_as_real

        param, grad, exp_avg, exp_avg_sq = (view_as_real(t) for t in (param, grad, exp_avg, exp_avg_sq))
        max_exp_avg_sq = None if max_exp_avg_sq is None else view_as_real(max_exp_avg_sq)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    count = step_t if differentiable else factor_step(step_t)  # (differentiable: torch's float32 factors)
    bias_correction1 = 1 - beta1 ** count
    bias_correction2 = 1 - beta2 ** count
    step_size_neg = (lr / bias_correction1).neg()
    bias_correction2_sqrt = bias_correction2.sqrt()
    second_moment = exp_avg_sq
    if max_exp_avg_sq is not None:
        # Differentiable: the maximum reads a copy, the buffer it overwrites is saved by the graph (as PyTorch).
        max_exp_avg_sq.copy_(maximum(max_exp_avg_sq.clone() if differentiable else max_exp_avg_sq, exp_avg_sq))
        second_moment = max_exp_avg_sq
    if not differentiable and type(param._data) is np.ndarray:
        # A host capture (reduce-overhead, capturable=True on the CPU; torch has no CPU capturable formula): the
        # factors are read at each replay but rounded into the update as torch's default step rounds them, so a
        # captured step gives the eager step's values. ``addcdiv_`` with the rounded step size is this sum.
        dtype = param.dtype
        if isinstance(lr, Tensor):  # (a tensor lr: the step size in its dtype, as torch's tensor division)
            step_size_neg = (lr / bias_correction1.to(lr.dtype)).neg()
        denom = (second_moment.sqrt() / bias_correction2_sqrt.to(dtype)).add_(eps)
        param.add_(step_size_neg.to(dtype) * exp_avg / denom)
        return
    denom = (second_moment.sqrt() / (bias_correction2_sqrt * step_size_neg)).add_(eps / step_size_neg)
    param.addcdiv_(exp_avg.clone() if differentiable else exp_avg, denom)


def adamw(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, foreach=None, capturable=False,
          differentiable=False, fused=None, grad_scale=None, found_inf=None, has_complex=False, *, amsgrad, beta1,
          beta2, lr, weight_decay, eps, maximize):
    """Functional AdamW: ``adam`` with decoupled weight decay."""
    adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, foreach=foreach, capturable=capturable,
         differentiable=differentiable, fused=fused, grad_scale=grad_scale, found_inf=found_inf,
         decoupled_weight_decay=True, amsgrad=amsgrad, beta1=beta1, beta2=beta2, lr=lr, weight_decay=weight_decay,
         eps=eps, maximize=maximize)
