"""Eager CPU float32 binary rows over operands broadcast against each other: a bias row (``x + b``), a column
scale (``x / norms``), an outer sum (``col + row``).

NumPy's loops for a stride-0 operand run at half the speed of its same-shape ones (1024x512 plus a row of 512:
130 us against 45 for ``x + x``; torch 48). `broadcast_binary` sees the broadcast as a grid of ``rows x cols``,
each operand whole (``full``), one row repeated down the grid (``row``) or one column repeated across it (``col``),
and runs the row's own fusion expression over it as one generated kernel (`native_grid.GridKernel`: one compile
per row and pair of patterns, disk-cached, its sizes passed on each call).

>>> import numpy as np
>>> from jitorch.ops.table import OPS
>>> x, b = np.ones((3000, 4), np.float32), np.arange(4, dtype=np.float32)
>>> broadcast_binary(OPS["add"], x, b)[1].tolist()
[1.0, 2.0, 3.0, 4.0]
>>> broadcast_binary(OPS["add"], x, x) is None  # nothing broadcast: the callers' same-shape paths
True
"""
from __future__ import annotations

import math

import numpy as np

from ..codegen.ir import Buffer, Kernel, Store, load
from ..runtime import host_cache
from .native_grid import GridKernel

__all__ = ["broadcast_binary", "ROWS"]

ROWS = ("add", "sub", "mul", "div")  # rows whose float32 kernel is exactly their expression's IR
MIN_SIZE = 1 << 12  # below, NumPy's loop is as fast as a kernel call
_F32 = np.dtype(np.float32)
_kernels: dict = {}


def _pattern(a, shape):
    """``(kind, split)`` of the C-contiguous ``a`` broadcast to ``shape``: ``full`` (split None: any), ``row``
    (``a`` is ``shape``'s trailing dims; the grid's rows are the ``split`` leading ones) or ``col`` (``a`` is the
    leading ``split`` dims); None for other broadcasts."""
    if not a.flags.c_contiguous:
        return None
    nd = len(shape)
    padded = (1,) * (nd - a.ndim) + a.shape
    if padded == shape:
        return "full", None
    lead = 0
    while lead < nd and padded[lead] == 1:
        lead += 1
    if padded[lead:] == shape[lead:]:
        return "row", lead
    end = nd
    while end > 0 and padded[end - 1] == 1:
        end -= 1
    if padded[:end] == shape[:end]:
        return "col", end
    return None


def _kernel(row, kinds):
    """The `GridKernel` of ``row`` over operands of ``kinds`` (``full``, ``row`` or ``col`` each)."""
    key = (row.name, kinds)
    hit = _kernels.get(key)
    if hit is None:
        from .._compile.expr import parse_expr  # the compiler package imports the op rows: load it on first use

        value = parse_expr(row.fusion.expr, [load(0, "f32"), load(1, "f32")], "f32")
        strides = {"full": lambda cols: (cols, 1), "row": lambda cols: (0, 1), "col": lambda cols: (1, 0)}
        hit = _kernels[key] = GridKernel(lambda rows, cols: Kernel(
            (rows, cols), (Buffer("f32", strides[kinds[0]](cols)), Buffer("f32", strides[kinds[1]](cols)),
                           Buffer("f32", (cols, 1))), (Store(2, value),)))
    return hit


def broadcast_binary(row, x, y):
    """``row``'s expression over float32 NumPy arrays ``x`` and ``y`` broadcast against each other, as a new C-ordered
    array, or None where this path does not apply (same shapes, other dtypes or layouts, small or degenerate
    grids): the caller computes it its own way."""
    if row.name not in ROWS or type(x) is not np.ndarray or type(y) is not np.ndarray or x.dtype is not _F32 \
            or y.dtype is not _F32 or x.shape == y.shape:
        return None
    if x.shape[x.ndim - y.ndim:] == y.shape and y.ndim and x.flags.c_contiguous and y.flags.c_contiguous:
        # The commonest: y a bias over x's trailing dims (checked without NumPy's broadcast machinery).
        shape, size, cols, kinds = x.shape, x.size, y.size, ("full", "row")
        rows = size // cols if cols else 0
    else:
        try:
            shape = np.broadcast_shapes(x.shape, y.shape)
        except ValueError:
            return None  # the caller raises the op's own error
        size = math.prod(shape)
        px, py = _pattern(x, shape), _pattern(y, shape)
        if px is None or py is None or px[0] == py[0] == "full":
            return None
        splits = {s for _, s in (px, py) if s is not None}
        if len(splits) != 1:
            return None
        split = splits.pop()
        rows, cols, kinds = math.prod(shape[:split]), math.prod(shape[split:]), (px[0], py[0])
    if size < MIN_SIZE or rows < 2 or cols < 2:
        return None  # a size-1 grid dimension collapses into another template; NumPy's loop is fast there
    out = host_cache.empty(shape, _F32) if size * 4 >= host_cache.THRESHOLD else np.empty(shape, _F32)
    _kernel(row, kinds).run([x, y, out], rows, cols)
    return out
