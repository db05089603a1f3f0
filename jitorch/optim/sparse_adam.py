"""SparseAdam (``torch.optim.SparseAdam``): Adam applied only where the gradient has entries.

jitorch has no sparse tensors: ``sparse=True`` embeddings give dense gradients. The entries torch's sparse gradient
would hold are the rows (along dim 0) the lookup touched; a dense gradient marks them by a nonzero row, so those
rows are the ones updated here (a touched row whose gradient is exactly zero is the one difference).

>>> import jitorch
>>> emb = jitorch.nn.Embedding(4, 2, sparse=True)
>>> opt = jitorch.optim.SparseAdam(emb.parameters(), lr=0.1)
>>> before = emb.weight.detach().clone()
>>> emb(jitorch.tensor([1])).sum().backward()
>>> opt.step()
>>> (emb.weight != before).any(1).tolist()
[False, True, False, False]
"""
from __future__ import annotations

import math

from .. import _creation, _dtype
from ..autograd.grad_mode import no_grad
from .optimizer import Optimizer, _check_tensor_lr, _to_scalar, evaluate_closure

__all__ = ["SparseAdam"]


class SparseAdam(Optimizer):
    r"""Adam restricted to the gradient's touched rows: their moments and parameters update, the others keep theirs.

    Args:
        params: tensors or parameter groups to optimize (dense, real).
        lr (float or Tensor): learning rate (default: 1e-3).
        betas (tuple of two floats): decay rates of the gradient's running averages (default: (0.9, 0.999)).
        eps (float): added to the denominator for stability (default: 1e-8).
        maximize (bool): maximize the objective (default: False).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False):
        _check_tensor_lr(lr)
        if not 0.0 < lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "maximize": maximize})
        complex_params = [[i, j] for i, group in enumerate(self.param_groups)
                          for j, p in enumerate(group["params"]) if p.is_complex()]
        if complex_params:
            raise ValueError(f"Complex params at indices {complex_params}: SparseAdam does not support complex "
                             "parameters")

    def step(self, closure=None):
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss."""
        loss = evaluate_closure(closure)
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        self._update(p, group)
        return loss

    def _update(self, p, group):
        beta1, beta2 = group["betas"]
        state = self.state[p]
        if len(state) == 0:
            state["step"] = 0
            state["exp_avg"] = _creation.zeros_like(p)
            state["exp_avg_sq"] = _creation.zeros_like(p)
        state["step"] += 1  # counted even when no row was touched, as torch counts an empty sparse gradient
        grad = p.grad if not group["maximize"] else -p.grad
        rows = _touched_rows(grad)
        if rows.numel() == 0:
            return
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        values = grad.index_select(0, rows) if grad.dim() else grad
        old_avg = exp_avg.index_select(0, rows) if grad.dim() else exp_avg.clone()
        old_sq = exp_avg_sq.index_select(0, rows) if grad.dim() else exp_avg_sq.clone()
        avg_update = values.sub(old_avg).mul_(1 - beta1)
        sq_update = values.pow(2).sub_(old_sq).mul_(1 - beta2)
        numer, new_sq = avg_update.add_(old_avg), sq_update.add_(old_sq)
        if grad.dim():
            exp_avg.index_copy_(0, rows, numer)
            exp_avg_sq.index_copy_(0, rows, new_sq)
        else:
            exp_avg.copy_(numer)
            exp_avg_sq.copy_(new_sq)
        denom = new_sq.sqrt_().add_(group["eps"])
        step = state["step"]
        step_size = float(_to_scalar(group["lr"])) * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
        delta = -step_size * numer.div_(denom)
        if grad.dim():
            p.index_add_(0, rows, delta)
        else:
            p.add_(delta)

def _touched_rows(grad):
    """Indices along dim 0 of the rows with a nonzero gradient (of a 0-d gradient: ``[0]`` if nonzero)."""
    if grad.dim() == 0:
        return (grad != 0).reshape(1).nonzero().reshape(-1)
    if grad.shape[0] == 0:
        return _creation.zeros(0, dtype=_dtype.int64, device=grad.device)
    return (grad.reshape(grad.shape[0], -1) != 0).any(1).nonzero().reshape(-1)


