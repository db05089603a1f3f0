"""Muon (``torch.optim.Muon``): momentum SGD whose 2-D update is orthogonalized by a Newton-Schulz iteration.

The iteration runs in bfloat16, as PyTorch's: its matmuls accumulate in float32 and round each result to bfloat16,
so the update agrees with PyTorch's to bfloat16 rounding.

>>> import jitorch
>>> w = jitorch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
>>> opt = jitorch.optim.Muon([w], lr=0.1, weight_decay=0.0)
>>> w.grad = jitorch.tensor([[1.0, 0.0], [0.0, 0.0]])
>>> opt.step()
>>> sorted(opt.state[w]), w[1, 1].item()
(['momentum_buffer'], 1.0)
"""
from __future__ import annotations

import math

from .. import _creation
from ..autograd.grad_mode import no_grad
from .optimizer import Optimizer, _check_tensor_lr, _to_scalar, evaluate_closure

__all__ = ["Muon", "muon"]

# Keller Jordan's constants (https://kellerjordan.github.io/posts/muon/), PyTorch's defaults.
EPS = 1e-7
DEFAULT_A = 3.4445
DEFAULT_B = -4.7750
DEFAULT_C = 2.0315
DEFAULT_NS_STEPS = 5


def _zeropower_via_newtonschulz(grad, ns_coefficients, ns_steps, eps):
    """Approximately orthogonalize ``grad`` (``U S' V^T`` with ``S'`` near 1) by a quintic Newton-Schulz iteration."""
    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if len(grad.shape) != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(ns_coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    a, b, c = ns_coefficients
    ortho_grad = grad.bfloat16()
    tall = grad.size(0) > grad.size(1)
    if tall:
        ortho_grad = ortho_grad.T
    ortho_grad.div_(ortho_grad.norm().clamp(min=eps))  # spectral norm at most 1
    for _ in range(ns_steps):
        gram_matrix = ortho_grad @ ortho_grad.T
        gram_update = gram_matrix.addmm(gram_matrix, gram_matrix, beta=b, alpha=c)
        ortho_grad = ortho_grad.addmm(gram_update, ortho_grad, beta=a)
    return ortho_grad.T if tall else ortho_grad


def _adjust_lr(lr, adjust_lr_fn, param_shape):
    """The learning rate scaled so updates of rectangular matrices have a comparable RMS."""
    rows, cols = param_shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        ratio = math.sqrt(max(1, rows / cols))
    elif adjust_lr_fn == "match_rms_adamw":
        ratio = 0.2 * math.sqrt(max(rows, cols))
    else:
        ratio = 1.0
    return lr * ratio


class Muon(Optimizer):
    r"""Muon: ``B = lerp(B, g, 1 - momentum)``, update ``NS(lerp(g, B, momentum))`` (nesterov) or ``NS(B)``,
    ``p = p (1 - lr wd) - adjusted_lr * update``. Only for 2-D parameters (hidden layers' weights).

    Args:
        params: 2-D tensors or parameter groups to optimize.
        lr (float or Tensor): learning rate (default: 1e-3).
        weight_decay (float): decoupled weight decay (default: 0.1).
        momentum (float): momentum factor (default: 0.95).
        nesterov (bool): use Nesterov momentum (default: True).
        ns_coefficients (tuple of three floats): the Newton-Schulz polynomial's ``(a, b, c)``.
        eps (float): lower bound of the norm the update is divided by (default: 1e-7).
        ns_steps (int): Newton-Schulz iterations (default: 5).
        adjust_lr_fn (str, optional): ``'original'`` (default when None) or ``'match_rms_adamw'``.
    """

    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=(DEFAULT_A, DEFAULT_B, DEFAULT_C), eps=EPS, ns_steps=DEFAULT_NS_STEPS,
                 adjust_lr_fn=None):
        _check_tensor_lr(lr)
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 <= momentum:
            raise ValueError(f"momentum should be >= 0 but is: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight decay should be >= 0 but is: {weight_decay}")
        if adjust_lr_fn is not None and adjust_lr_fn not in ("original", "match_rms_adamw"):
            raise ValueError(f"Adjust learning rate function {adjust_lr_fn} is not supported")
        defaults = {"lr": lr, "weight_decay": weight_decay, "momentum": momentum, "nesterov": nesterov,
                    "ns_coefficients": ns_coefficients, "eps": eps, "ns_steps": ns_steps,
                    "adjust_lr_fn": adjust_lr_fn}
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(f"Muon only supports 2D parameters whereas we found a parameter with size: "
                                     f"{p.size()}")

    @no_grad()
    def step(self, closure=None):
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        loss = evaluate_closure(closure)
        for group in self.param_groups:
            params, grads, bufs = [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.is_complex():
                    raise RuntimeError("Muon does not support complex parameters")
                if p.grad.is_sparse:
                    raise RuntimeError("Muon does not support sparse gradients")
                params.append(p)
                grads.append(p.grad)
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = _creation.zeros_like(p.grad)
                bufs.append(state["momentum_buffer"])
            muon(params, grads, bufs, lr=group["lr"], weight_decay=group["weight_decay"],
                 momentum=group["momentum"], nesterov=group["nesterov"], ns_coefficients=group["ns_coefficients"],
                 eps=group["eps"], ns_steps=group["ns_steps"], adjust_lr_fn=group["adjust_lr_fn"])
        return loss


def muon(params, grads, muon_momentum_bufs, *, foreach=None, lr, weight_decay, momentum, nesterov, ns_coefficients,
         ns_steps, eps, adjust_lr_fn, has_complex=False):
    """Functional Muon: updates ``params`` and the momentum buffers in place."""
    if foreach:
        raise RuntimeError("Foreach is not supported for Muon yet")
    if has_complex:
        raise ValueError("Complex parameters are not supported")
    lr = _to_scalar(lr)
    for param, grad, buf in zip(params, grads, muon_momentum_bufs):
        if grad.ndim != 2:
            raise ValueError("Param gradient must be a 2D matrix")
        buf.lerp_(grad, 1 - momentum)
        update = grad.lerp(buf, momentum) if nesterov else buf
        update = _zeropower_via_newtonschulz(update, ns_coefficients, ns_steps, eps)
        adjusted_lr = _adjust_lr(lr, adjust_lr_fn, param.shape)
        param.mul_(1 - lr * weight_decay)
        param.add_(update, alpha=-adjusted_lr)
