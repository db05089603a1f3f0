"""The ``std`` row: the variance row's kernel (`reduction.VAR`) and a square root as one row and one autograd node,
where the composite ``sqrt(var)`` with torch's zero gradient at a zero deviation took four more dispatches (on
32 x 32, longer than the variance itself). Same bits as that composite, forward and backward.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> apply(STD, jitorch.tensor([[1.0, 3.0], [2.0, 2.0]]), dims=(1,), keepdim=False, correction=1)
tensor([1.4142, 0.0000])
"""
from __future__ import annotations

from .reduction import _var_kernel, defop, var_backward_of
from .table import Opaque

__all__ = ["STD"]


def _std_kernel(xp, a, dims, keepdim, correction):
    # ``+ 0``: a zero variance (-0.0 out of the variance's clamp too) gives +0.0, as the composite's select of 0.0
    return xp.sqrt(_var_kernel(xp, a, dims, keepdim, correction)) + 0


def _std_backward(ctx, g):
    # The composite's chain, op for op: g selected where std != 0, sqrt's g / (2 * out) (its out 1 elsewhere),
    # selected again, then the variance's gradient: 0 where std is 0, as ATen's std_backward (not 0 * inf).
    s = ctx.out
    nonzero = s != 0
    g_var = (g.where(nonzero, 0.0) / (2 * s.where(nonzero, 1.0))).where(nonzero, 0.0)
    a = ctx.attrs
    return var_backward_of(ctx.inputs[0], g_var, a["dims"], a["keepdim"], a["correction"])


# Real float CPU arrays only, as VAR; jitorch.std keeps its composite for the others and while compiling.
STD = defop("std", _std_kernel, _std_backward, Opaque("float64 accumulators and a square root"), saves="both",
            grad_name="StdBackward0")
