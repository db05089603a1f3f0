"""SparseAdam (``torch.optim.SparseAdam``): Adam applied only at the entries of a sparse gradient.

Its parameters' gradients are sparse_coo tensors (``nn.Embedding(sparse=True)``, ``F.embedding(..., sparse=True)``,
``EmbeddingBag(sparse=True)``): the rows looked up, each once after coalescing, update their moments and values, a row
whose gradient is exactly zero included; the other rows keep theirs. A dense gradient is refused, as torch refuses it.

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

from .. import _creation
from ..autograd.grad_mode import no_grad
from ._kernels import ARRAY_OPS
from ._sparse_update import refuse_sparse_capture, update_at_entries
from .optimizer import Optimizer, _check_tensor_lr, _to_scalar, evaluate_closure

__all__ = ["SparseAdam"]


class SparseAdam(Optimizer):
    r"""Adam restricted to the entries of each parameter's sparse gradient: their moments and values update, the
    others keep theirs.

    Args:
        params: tensors or parameter groups to optimize (dense, real; their gradients sparse_coo).
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
                        if not p.grad.is_sparse:
                            raise RuntimeError("SparseAdam does not support dense gradients, please consider Adam "
                                               "instead")
                        self._update(p, group)
        return loss

    def _update(self, p, group):
        refuse_sparse_capture("SparseAdam's step")
        beta1, beta2 = group["betas"]
        state = self.state[p]
        if len(state) == 0:
            state["step"] = 0
            state["exp_avg"] = _creation.zeros_like(p)
            state["exp_avg_sq"] = _creation.zeros_like(p)
        state["step"] += 1  # counted even for an empty gradient, as torch counts it
        step = state["step"]
        step_size = float(_to_scalar(group["lr"])) * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)

        def adam(values, avg, sq, param):
            # torch's order of operations: old <- b * old + (1 - b) * new, as old += (1 - b) * (new - old).
            avg = (values - avg) * (1 - beta1) + avg
            sq = (values * values - sq) * (1 - beta2) + sq
            return avg, sq, param + -step_size * (avg / (ARRAY_OPS.sqrt(sq) + group["eps"]))
        update_at_entries(p.grad, group["maximize"], (state["exp_avg"], state["exp_avg_sq"], p), adam)
