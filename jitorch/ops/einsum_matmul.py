"""Two-operand einsums that are batched matrix products (attention's ``bhqd,bhkd->bhqk``) as one ``matmul`` of views.

NumPy's ``einsum(optimize=True)`` gets there too, but through ``einsum_path`` and a product whose result comes back
transposed, then a copy to row-major (8x8x128x64 scores: 4.1 ms, the product alone 1.8). Here each operand is
permuted to (batch, free, contracted) / (batch, contracted, free) and reshaped (views when the layout allows: a
transposed operand stays a BLAS transpose flag), one product runs, and its result is permuted to the output's order
(copied to row-major only when that order differs, as torch's result is contiguous there too).

>>> import numpy as np
>>> a, b = np.ones((2, 6, 4)), np.ones((2, 5, 4))
>>> einsum_as_matmul(np, "bqd,bkd->bkq", a, b).shape
(2, 5, 6)
"""
from __future__ import annotations

import math

from .host_matmul import matmul

__all__ = ["einsum_as_matmul", "parse_equation"]

# Below this many rows or columns per product an einsum is an elementwise product or a dot: np.einsum runs those
# without a product's call per batch element.
MIN_SIDE = 4


def parse_equation(equation):
    """``("ij,jk->ik")`` -> ``(["ij", "jk"], "ik")``: the operands' labels and the output's (an explicit ``->``)."""
    inputs, output = equation.split("->")
    return inputs.split(","), output


def einsum_as_matmul(xp, equation, a, b):
    """``xp.einsum(equation, a, b)`` as a batched product in row-major order, or None where the equation is not
    one (repeated labels, labels summed within one operand, broadcast sizes, non-float dtypes, thin products)."""
    if a.dtype != b.dtype or a.dtype.kind not in "fc":
        return None
    (ta, tb), out = parse_equation(equation)
    if len(set(ta)) != len(ta) or len(set(tb)) != len(tb) or len(set(out)) != len(out):
        return None
    size = dict(zip(ta, a.shape))
    for label, n in zip(tb, b.shape):
        if size.setdefault(label, n) != n:
            return None
    batch = [c for c in out if c in ta and c in tb]
    left = [c for c in out if c in ta and c not in tb]
    right = [c for c in out if c in tb and c not in ta]
    summed = [c for c in ta if c in tb and c not in out]
    if len(batch) + len(left) + len(summed) != len(ta) or len(batch) + len(right) + len(summed) != len(tb) \
            or len(batch) + len(left) + len(right) != len(out):
        return None
    rows, cols = math.prod(size[c] for c in left), math.prod(size[c] for c in right)
    if rows < MIN_SIDE or cols < MIN_SIDE:
        return None
    count, depth = math.prod(size[c] for c in batch), math.prod(size[c] for c in summed)
    lhs = a.transpose([ta.index(c) for c in batch + left + summed]).reshape(count, rows, depth)
    rhs = b.transpose([tb.index(c) for c in batch + summed + right]).reshape(count, depth, cols)
    product = matmul(xp, lhs, rhs).reshape([size[c] for c in batch + left + right])
    order = batch + left + right
    perm = [order.index(c) for c in out]
    if perm == list(range(len(perm))):
        return product
    return xp.ascontiguousarray(product.transpose(perm))
