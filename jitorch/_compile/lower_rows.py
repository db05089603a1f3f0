"""IR expressions for the row ops a group may hold: softmax, log_softmax, native_layer_norm over the last dims, and
the backward rows of softmax and log_softmax.

Each is written the way a hand-written kernel computes it, from reductions (`GroupBuilder.reduce` returns an
``acc`` expression: the row's total, final from the next pass on) and pointwise primitives; the kernel builder then
places every store in the earliest pass its accumulators allow. Numerics follow the eager rows: the max is
subtracted before ``exp`` (``maxnum``, a max unspecified on nan, which is cheaper: a nan element makes its row nan
through the sum anyway), the variance is the mean of squared deviations (two passes, no cancellation), and
``rstd = 1 / sqrt(var + eps)``. Layer norm sums the row shifted by its first element ``x0`` (`first_element`): a
constant row then has ``mean == x0`` exactly, deviations and variance exactly 0 and an output equal to the bias, as
torch's Welford statistics give (``sum(x) / n`` misses the constant by a rounding, which ``rstd = 1 / sqrt(eps)``
amplified 316 times); rows far from 0 lose less to cancellation too.

>>> from jitorch.codegen.ir import load
>>> class Toy:
...     def reduce(self, kind, value):
...         return op("neg", value)  # stands in for an accumulator
>>> softmax(Toy(), load(0, "f32")).op
'mul'
"""
from __future__ import annotations

from ..codegen.ir import Expr, const, op

__all__ = ["softmax", "log_softmax", "layer_norm", "first_element", "softmax_backward", "log_softmax_backward"]


def softmax(builder, x):
    """``exp(x - max) * (1 / sum(exp(x - max)))``: three passes (the exp is kept in the output, not recomputed)."""
    e = op("exp", op("sub", x, builder.reduce("maxnum", x)))
    return op("mul", e, op("div", const(1, x.dtype), builder.reduce("sum", e)))


def log_softmax(builder, x):
    """``(x - max) - log(sum(exp(x - max)))``."""
    shifted = op("sub", x, builder.reduce("maxnum", x))
    return op("sub", shifted, op("log", builder.reduce("sum", op("exp", shifted))))


def layer_norm(builder, x, x0, n, weight, bias, eps):
    """(out, mean, rstd) over ``n`` elements per row; ``x0`` is ``x`` at the row's first element (an expression
    constant along the row: `first_element`); ``weight``/``bias`` are expressions or None. ``mean = x0 + shift`` with
    ``shift = sum(x - x0) / n``, and the deviations ``(x - x0) - shift``: exact where ``x - x0`` is (Sterbenz), so
    only ``shift``'s rounding enters, not ``mean``'s (a row near 1e4 keeps the digits of its noise)."""
    dt = x.dtype
    count = const(n, dt)
    offset = op("sub", x, x0)
    shift = op("div", builder.reduce("sum", offset), count)
    mean = op("add", x0, shift)
    centered = op("sub", offset, shift)
    var = op("div", builder.reduce("sum", op("mul", centered, centered)), count)
    rstd = op("div", const(1, dt), op("sqrt", op("add", var, const(eps, dt))))
    out = op("mul", centered, rstd)
    if weight is not None:
        out = op("mul", out, weight)
    if bias is not None:
        out = op("add", out, bias)
    return out, mean, rstd


def first_element(x, first_load):
    """``x`` read at its row's first element: every ``load`` under it replaced by ``first_load(load)`` (the same
    buffer seen with zero strides along the reduced dims; None keeps a load that is already constant along them).

    >>> from jitorch.codegen.ir import load
    >>> first_element(op("exp", load(1, "f32")), lambda e: load(5, e.dtype))
    exp[f32](load[f32](5))
    """
    memo = {}

    def visit(e):
        if e not in memo:
            if e.op == "load":
                memo[e] = first_load(e) or e
            else:
                memo[e] = Expr(e.op, [visit(a) for a in e.args], e.dtype, e.value) if e.args else e
        return memo[e]

    return visit(x)


def softmax_backward(builder, g, y):
    """``y * (g - sum(g * y))``: two passes (the sum, then the write)."""
    return op("mul", y, op("sub", g, builder.reduce("sum", op("mul", g, y))))


def log_softmax_backward(builder, g, y):
    """``g - exp(y) * sum(g)``: two passes."""
    return op("sub", g, op("mul", op("exp", y), builder.reduce("sum", g)))
