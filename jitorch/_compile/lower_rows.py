"""IR expressions for the row ops a group may hold: softmax, log_softmax, native_layer_norm over the last dims, and
the backward rows of softmax and log_softmax.

Each is written the way a hand-written kernel computes it, from reductions (`GroupBuilder.reduce` returns an
``acc`` expression: the row's total, final from the next pass on) and pointwise primitives; the kernel builder then
places every store in the earliest pass its accumulators allow. Numerics follow the eager rows: the max is
subtracted before ``exp`` (a max that skips nan, ``maxnum``, which is cheaper: a nan element makes its row nan
through the sum anyway), the variance is the mean of squared deviations (two passes, no cancellation), and
``rstd = 1 / sqrt(var + eps)``.

>>> from jitorch.codegen.ir import load
>>> class Toy:
...     def reduce(self, kind, value):
...         return op("neg", value)  # stands in for an accumulator
>>> softmax(Toy(), load(0, "f32")).op
'mul'
"""
from __future__ import annotations

from ..codegen.ir import const, op

__all__ = ["softmax", "log_softmax", "layer_norm", "softmax_backward", "log_softmax_backward"]


def softmax(builder, x):
    """``exp(x - max) * (1 / sum(exp(x - max)))``: three passes (the exp is kept in the output, not recomputed)."""
    e = op("exp", op("sub", x, builder.reduce("maxnum", x)))
    return op("mul", e, op("div", const(1, x.dtype), builder.reduce("sum", e)))


def log_softmax(builder, x):
    """``(x - max) - log(sum(exp(x - max)))``."""
    shifted = op("sub", x, builder.reduce("maxnum", x))
    return op("sub", shifted, op("log", builder.reduce("sum", op("exp", shifted))))


def layer_norm(builder, x, n, weight, bias, eps):
    """(out, mean, rstd) over ``n`` elements per row; ``weight``/``bias`` are expressions or None."""
    dt = x.dtype
    count = const(n, dt)
    mean = op("div", builder.reduce("sum", x), count)
    centered = op("sub", x, mean)
    var = op("div", builder.reduce("sum", op("mul", centered, centered)), count)
    rstd = op("div", const(1, dt), op("sqrt", op("add", var, const(eps, dt))))
    out = op("mul", centered, rstd)
    if weight is not None:
        out = op("mul", out, weight)
    if bias is not None:
        out = op("add", out, bias)
    return out, mean, rstd


def softmax_backward(builder, g, y):
    """``y * (g - sum(g * y))``: two passes (the sum, then the write)."""
    return op("mul", y, op("sub", g, builder.reduce("sum", op("mul", g, y))))


def log_softmax_backward(builder, g, y):
    """``g - exp(y) * sum(g)``: two passes."""
    return op("sub", g, op("mul", op("exp", y), builder.reduce("sum", g)))
