"""Row ops of a CPU graph as one multi-pass IR kernel: softmax, log_softmax, their backward rows, and layer norm.

A recorded row op reduces over the last dims of its input (softmax's ``dim`` must be the last; layer norm's ``k``
normalized dims are). It lowers as the compile path's fused groups do (`_compile.lower_rows` writes each op the way
a hand-written kernel computes it, and `_compile.lower.Passes` puts every store in the first pass its accumulators
allow), so a row softmax reads its row three times in one loop nest instead of NumPy's five array passes.
Returns ``(kernel, arrays)``: the arrays per IR buffer, outputs first.

>>> import numpy as np
>>> from jitorch.ops.table import OPS
>>> from jitorch.cpu._recorder import Record
>>> x, out = np.zeros((2, 3), np.float32), np.empty((2, 3), np.float32)
>>> kernel, arrays = row_op(Record("kernel", None, "", OPS["softmax"], [x], (), None, {"dim": 1}, [out]))
>>> kernel.shape, kernel.reduce_axes, [a is b for a, b in zip(arrays, (out, x))]
((2, 3), 1, [True, True])
"""
from __future__ import annotations

import numpy as np

from .._compile import lower_rows
from .._compile.lower import IR_DTYPES, Passes
from ..codegen.ir import Buffer, Kernel, Store, const, load, op, simplify
from ._lower import NotLowerable, element_strides
from ._steps import root_of

__all__ = ["ROW_OPS", "row_op", "layer_norm_backward"]

ROW_OPS = ("softmax", "log_softmax", "softmax_backward_data", "log_softmax_backward_data", "native_layer_norm")


def _reduced_dims(rec, x):
    """How many trailing dims the row op reduces, or refuse."""
    name = rec.op.name
    if name == "native_layer_norm":
        k = rec.attrs.get("k")
        if not isinstance(k, int) or not 0 < k <= x.ndim:
            raise NotLowerable(f"native_layer_norm over k={k!r} dims of a {x.ndim}-d input")
        return k
    dim = rec.attrs.get("dim")
    if not isinstance(dim, int) or x.ndim == 0 or dim % x.ndim != x.ndim - 1:
        raise NotLowerable(f"{name} over dim {dim!r} of a {x.ndim}-d input (only the last dim is native)")
    return 1


def row_op(rec):
    """``(kernel, arrays)`` of one row-op record (see the module notes), or `NotLowerable`."""
    name = getattr(rec.op, "name", None)
    if rec.kind != "kernel" or name not in ROW_OPS:
        raise NotLowerable(f"{name} is not a row op")
    x = rec.datas[0]
    if not isinstance(x, np.ndarray) or x.dtype not in (np.float32, np.float64) or x.size == 0:
        raise NotLowerable(f"{name} of a {getattr(x, 'dtype', type(x).__name__)} or empty input")
    red = _reduced_dims(rec, x)
    shape, dt = tuple(x.shape), IR_DTYPES[x.dtype]
    outs = [o for o in rec.outs]
    operands = [d for d in rec.datas if d is not None]
    if not all(isinstance(a, np.ndarray) and a.dtype == x.dtype for a in operands + outs):
        raise NotLowerable(f"{name} with operands of mixed dtypes")
    roots = {id(root_of(o)) for o in outs}
    if len(roots) != len(outs) or any(id(root_of(a)) in roots for a in operands):
        raise NotLowerable(f"{name} writes into one of its operands")
    builder = Passes()
    arrays = list(outs)
    loads = []
    for d in rec.datas:  # layer norm's weight and bias broadcast over the outer dims; None stays None
        if d is None:
            loads.append(None)
            continue
        element_strides(d, shape)
        loads.append(load(len(arrays), dt))
        arrays.append(d)
    if name == "native_layer_norm":  # x's first element per row (a view: zero strides along the row) shifts its sums
        n = int(np.prod(shape[len(shape) - red:]))
        first = load(len(arrays), dt)
        arrays.append(x[(Ellipsis,) + (slice(0, 1),) * red])
        values = lower_rows.layer_norm(builder, loads[0], first, n, loads[1], loads[2], rec.attrs["eps"])
    else:
        values = (getattr(lower_rows, name.replace("_data", ""))(builder, *loads),)
    outer = len(shape) - red
    buffers = []
    for j, (o, value) in enumerate(zip(outs, values)):
        if tuple(o.shape) == shape:
            builder.stores.append(Store(j, value, phase=builder._phase(value)))
            buffers.append(Buffer(dt, element_strides(o)))
        elif o.ndim == len(shape) and all(s == 1 for s in o.shape[outer:]):  # a row statistic (mean, rstd)
            builder.stores.append(Store(j, value, row=True))
            buffers.append(Buffer(dt, element_strides(o)[:outer] + (0,) * red))
        else:
            raise NotLowerable(f"{name}'s output {j} has shape {o.shape} for an input of shape {shape}")
    builder.stores = simplify(builder.stores)
    builder._stash()
    for a in arrays[len(outs):]:
        buffers.append(Buffer(dt, element_strides(a, shape)))
    return Kernel(shape, tuple(buffers), tuple(builder.stores), red), arrays


def layer_norm_backward(rec):
    """``[(kernel, arrays)]`` of ``native_layer_norm_backward``: a row kernel for the input gradient
    ``rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat))`` (two sums per row), then a column kernel that sums
    ``g * xhat`` and ``g`` over the rows into the weight and bias gradients."""
    if rec.kind != "kernel":
        raise NotLowerable("an in-place native_layer_norm_backward")
    g, x, mean, rstd, weight = rec.datas
    k = rec.attrs.get("k")
    outs = list(rec.outs)
    arrays = [a for a in (g, x, mean, rstd, weight) if a is not None]
    if not isinstance(x, np.ndarray) or x.dtype not in (np.float32, np.float64) or x.size == 0 or \
            not isinstance(k, int) or not 0 < k < x.ndim or any(o is None for o in outs) or \
            not all(isinstance(a, np.ndarray) and a.dtype == x.dtype for a in arrays + outs):
        raise NotLowerable("native_layer_norm_backward of other dtypes, shapes or an empty input")
    if any(np.may_share_memory(o, a) for o in outs for a in arrays):
        raise NotLowerable("native_layer_norm_backward writes into one of its operands")
    shape, dt, outer = tuple(x.shape), IR_DTYPES[x.dtype], x.ndim - k
    n = int(np.prod(shape[outer:]))
    inputs = [g, x, mean, rstd] + ([weight] if weight is not None else [])
    strides = [element_strides(a, shape) for a in inputs]

    def loads(first):
        vals = [load(first + i, dt) for i in range(len(inputs))]
        xhat = op("mul", op("sub", vals[1], vals[2]), vals[3])
        return vals[0], xhat, vals[3], (op("mul", vals[0], vals[4]) if weight is not None else vals[0])

    rows = Passes()
    _, xhat, r, gxh = loads(1)
    count = const(n, dt)
    c1 = op("div", rows.reduce("sum", gxh), count)
    c2 = op("div", rows.reduce("sum", op("mul", gxh, xhat)), count)
    gx = op("mul", op("sub", op("sub", gxh, c1), op("mul", xhat, c2)), r)
    rows.stores.append(Store(0, gx, phase=rows._phase(gx)))
    row_kernel = Kernel(shape, tuple([Buffer(dt, element_strides(outs[0]))] + [Buffer(dt, st) for st in strides]),
                        tuple(simplify(rows.stores)), k)
    # Columns: the normalized dims lead, the row dims are reduced.
    perm = list(range(outer, x.ndim)) + list(range(outer))
    col_shape = tuple(shape[d] for d in perm)
    gv, xhat, _, _ = loads(2)
    col_buffers = [Buffer(dt, element_strides(o) + (0,) * outer) for o in outs[1:]]
    col_buffers += [Buffer(dt, tuple(st[d] for d in perm)) for st in strides]
    col_kernel = Kernel(col_shape, tuple(col_buffers), (Store(0, op("mul", gv, xhat), "sum"), Store(1, gv, "sum")),
                        outer)
    return [(row_kernel, [outs[0]] + inputs), (col_kernel, outs[1:] + inputs)]
