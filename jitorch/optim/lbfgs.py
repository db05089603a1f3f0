"""L-BFGS (``torch.optim.LBFGS``): quasi-Newton steps from a history of gradient differences, closure-driven.

The algorithm is PyTorch's (itself after minFunc), run on the flat float arrays of the parameters. Where PyTorch
keeps a 0-d float32 tensor (dot products, ``ro``, ``H_diag``, the first step length), this keeps a float32 NumPy
scalar, whose promotion with Python numbers is the same, so the line search takes the same branches.

>>> import jitorch
>>> from jitorch.optim import LBFGS
>>> x = jitorch.tensor([1.5, -0.5], requires_grad=True)
>>> opt = LBFGS([x], line_search_fn="strong_wolfe")
>>> def closure():
...     opt.zero_grad()
...     loss = ((x - 1.0) ** 2).sum()
...     loss.backward()
...     return loss
>>> _ = opt.step(closure)
>>> [round(v, 4) for v in x.tolist()]
[1.0, 1.0]
"""
from __future__ import annotations

import numpy as np

from .._tensor import Tensor
from ..autograd.grad_mode import enable_grad, no_grad
from ._kernels import ARRAY_OPS, _xp
from ._strong_wolfe import strong_wolfe
from .optimizer import Optimizer, _check_tensor_lr, _get_value, _to_scalar

__all__ = ["LBFGS"]

# State entries kept as arrays or float32 scalars while stepping, and as tensors in ``state`` between steps.
_TENSOR_STATE = ("d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad", "al")


def _is_array(v):
    return isinstance(v, (np.ndarray, np.generic)) or type(v).__module__.startswith("cupy")


def _to_state(v):
    if isinstance(v, list):
        return [_to_state(x) for x in v]
    if _is_array(v):
        return Tensor._make(np.asarray(v) if isinstance(v, np.generic) else v)
    return v


def _from_state(v):
    if isinstance(v, list):
        return [_from_state(x) for x in v]
    if isinstance(v, Tensor):
        data = v._data
        return data if data.ndim else data[()]
    return v


class LBFGS(Optimizer):
    """L-BFGS, heavily inspired by minFunc; ``step`` needs a closure that re-evaluates the loss.

    Args:
        params: tensors to optimize (a single parameter group; parameters must be real or complex floats).
        lr (float): learning rate (default: 1).
        max_iter (int): maximal number of iterations per ``step`` (default: 20).
        max_eval (int, optional): maximal number of function evaluations per ``step`` (default: max_iter * 1.25).
        tolerance_grad (float): termination tolerance on first order optimality (default: 1e-7).
        tolerance_change (float): termination tolerance on function value/parameter changes (default: 1e-9).
        history_size (int): update history size (default: 100).
        line_search_fn (str, optional): ``'strong_wolfe'`` or None (default: None).
    """

    def __init__(self, params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7, tolerance_change=1e-9,
                 history_size=100, line_search_fn=None):
        _check_tensor_lr(lr)
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = {"lr": lr, "max_iter": max_iter, "max_eval": max_eval, "tolerance_grad": tolerance_grad,
                    "tolerance_change": tolerance_change, "history_size": history_size,
                    "line_search_fn": line_search_fn}
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]
        self._numel_cache = None

    def _numel(self):
        if self._numel_cache is None:
            self._numel_cache = sum(2 * p.numel() if p.is_complex() else p.numel() for p in self._params)
        return self._numel_cache

    def _gather_flat_grad(self):
        views = []
        for p in self._params:
            grad = p.grad
            if grad is None:
                view = _xp(p._data).zeros(p.numel(), dtype=p._data.dtype)
            elif grad.is_sparse:  # sparse=True embeddings: read as the dense gradient, as torch does
                view = grad.to_dense()._data.reshape(-1)
            else:
                view = grad._data.reshape(-1)
            if view.dtype.kind == "c":
                view = view[:, None].view(view.real.dtype).reshape(-1)
            views.append(view)
        return _xp(views[0]).concatenate(views, 0)

    def _add_grad(self, step_size, update):
        offset = 0
        alpha = float(step_size)
        for p in self._params:
            data = ARRAY_OPS.unwrap(p)
            numel = data.size
            ARRAY_OPS.add_(data, update[offset:offset + numel].reshape(data.shape), alpha)
            p._bump_version()
            offset += numel
        if offset != self._numel():
            raise AssertionError(f"Expected offset {offset} to equal {self._numel()}")

    def _clone_param(self):
        return [p._data.copy() for p in self._params]

    def _set_param(self, params_data):
        for p, pdata in zip(self._params, params_data):
            p._data[...] = pdata
            p._bump_version()

    def _directional_evaluate(self, closure, x, t, d):
        self._add_grad(t, d)
        loss = float(closure())
        flat_grad = self._gather_flat_grad()
        self._set_param(x)
        return loss, flat_grad

    @no_grad()
    def step(self, closure):
        """Perform one optimization step (up to ``max_iter`` iterations); returns the closure's first loss."""
        if len(self.param_groups) != 1:
            raise AssertionError(f"Expected exactly one param_group, but got {len(self.param_groups)}")
        closure = enable_grad()(closure)
        group = self.param_groups[0]
        lr = _get_value(_to_scalar(group["lr"]))
        max_iter, max_eval = group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]

        # All of the optimizer's state lives in the first parameter's entry, as in PyTorch.
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if abs(flat_grad).max() <= tolerance_grad:
            return orig_loss

        saved = {key: _from_state(state.get(key)) for key in _TENSOR_STATE}
        d, t, old_dirs, old_stps, ro, h_diag, prev_flat_grad, al = (saved[k] for k in _TENSOR_STATE)
        prev_loss = state.get("prev_loss")
        xp = _xp(flat_grad)
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d = -flat_grad
                old_dirs, old_stps, ro = [], [], []
                h_diag = 1
            else:
                # Update the curvature pairs, then the two-loop recursion gives d = -H g.
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = y.dot(s)
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / y.dot(y)
                num_old = len(old_dirs)
                if al is None:
                    al = [None] * history_size
                    state["al"] = None  # PyTorch stores it here: its place in the state dict's key order
                q = -flat_grad
                for i in range(num_old - 1, -1, -1):
                    al[i] = old_stps[i].dot(q) * ro[i]
                    ARRAY_OPS.add_(q, old_dirs[i], float(-al[i]))
                d = r = xp.multiply(q, h_diag)
                for i in range(num_old):
                    be_i = old_dirs[i].dot(r) * ro[i]
                    ARRAY_OPS.add_(r, old_stps[i], float(al[i] - be_i))
            if prev_flat_grad is None:
                prev_flat_grad = flat_grad.copy()
            else:
                prev_flat_grad[...] = flat_grad
            prev_loss = loss
            # The first step is scaled down by the gradient's size (a float32 scalar, as PyTorch's tensor).
            t = min(1.0, 1.0 / abs(flat_grad).sum()) * lr if state["n_iter"] == 1 else lr
            gtd = flat_grad.dot(d)
            if gtd > -tolerance_change:
                break

            ls_func_evals = 0
            if line_search_fn is not None:
                if line_search_fn != "strong_wolfe":
                    raise RuntimeError("only 'strong_wolfe' is supported")
                x_init = self._clone_param()

                def obj_func(x, t, d):
                    return self._directional_evaluate(closure, x, t, d)

                loss, flat_grad, t, ls_func_evals = strong_wolfe(obj_func, x_init, t, d, loss, flat_grad, gtd,
                                                                 max_ls=max_eval - current_evals)
                self._add_grad(t, d)
                opt_cond = abs(flat_grad).max() <= tolerance_grad
            else:
                self._add_grad(t, d)
                opt_cond = False
                if n_iter != max_iter:
                    # Re-evaluate only when another iteration follows: the caller evaluates after step anyway.
                    with enable_grad():
                        loss = closure()
                    loss = float(loss)  # under no_grad, as torch's: no scalar-of-a-grad-tensor warning
                    flat_grad = self._gather_flat_grad()
                    opt_cond = abs(flat_grad).max() <= tolerance_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals

            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if abs(d * t).max() <= tolerance_change:
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        for key, value in zip(_TENSOR_STATE, (d, t, old_dirs, old_stps, ro, h_diag, prev_flat_grad, al)):
            if key != "al" or value is not None:
                state[key] = _to_state(value)
        state["prev_loss"] = prev_loss
        return orig_loss
