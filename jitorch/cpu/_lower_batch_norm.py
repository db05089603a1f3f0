"""Training-mode batch norm and its backward as one multi-pass IR kernel each, shared by CPU graphs and compiled
graphs.

Both rows reduce each channel over every other dim. The kernel iterates over ``(C, N, *spatial)`` (the input read
through permuted strides), reducing the trailing dims; the passes are placed by the compile path's `Passes`:

- ``native_batch_norm``: the sum (pass 0), the centred sum of squares (pass 1, two-pass variance as eager), then
  ``(x - mean) * rsqrt(var + eps) * w + b`` (pass 2); ``mean`` and ``var`` are row stores. Three reads of each
  channel and one write, where the NumPy row makes about nine array passes.
- ``native_batch_norm_backward``: ``sum(g)`` and ``sum(g * xhat)`` (pass 0), the weight and bias gradients as row
  stores, then ``gx = (g - xhat * sum(g * xhat) / n - sum(g) / n) * rstd * w`` (pass 1).

Each returns ``[(kernel, arrays per IR buffer, written arrays)]``, outputs first.

>>> import numpy as np
>>> from jitorch.ops.table import OPS
>>> from jitorch.cpu._recorder import Record
>>> x = np.ones((4, 3, 5), np.float32)
>>> outs = [np.empty_like(x), np.empty((1, 3, 1), np.float32), np.empty((1, 3, 1), np.float32)]
>>> [(k, _, _)] = batch_norm(Record("kernel", None, "", OPS["native_batch_norm"], [x, None, None], (), None,
...                                 {"eps": 1e-5}, outs))
>>> k.shape, k.reduce_axes, k.phases
((3, 4, 5), 2, 3)
"""
from __future__ import annotations

import math

import numpy as np

from .._compile.lower import IR_DTYPES, Passes
from ..codegen.ir import Buffer, Kernel, Store, const, load, op, simplify
from ._lower import NotLowerable, element_strides

__all__ = ["BATCH_NORM_OPS", "batch_norm", "batch_norm_backward"]


def _channel_first(strides):
    """Strides of an ``(N, C, *spatial)`` array over the kernel's ``(C, N, *spatial)`` space."""
    return (strides[1], strides[0]) + tuple(strides[2:])


def _per_channel(a, ndim):
    """Strides over the kernel's space of a per-channel array: ``(C,)`` or ``(1, C, 1, ...)``."""
    st = element_strides(a)
    return ((st[0] if a.ndim == 1 else st[1]),) + (0,) * (ndim - 1)


def _check(name, x, arrays, outs):
    if not isinstance(x, np.ndarray) or x.ndim < 2 or IR_DTYPES.get(x.dtype) not in ("f32", "f64") or x.size == 0:
        raise NotLowerable(f"{name} of a non-float, 1-d or empty input")
    if any(o is None for o in outs) or not all(isinstance(a, np.ndarray) and a.dtype == x.dtype
                                               for a in list(arrays) + list(outs)):
        raise NotLowerable(f"{name} with aliased outputs or operands of mixed dtypes")
    if any(np.may_share_memory(o, a) for o in outs for a in arrays):
        raise NotLowerable(f"{name} writes into one of its operands")
    channels = x.shape[1]
    for a in list(arrays) + list(outs):
        if a.ndim != x.ndim and not (a.ndim == 1 and a.shape[0] == channels):
            raise NotLowerable(f"{name}: an operand of shape {a.shape} for an input of shape {x.shape}")


def batch_norm(rec, constant=None):
    """``native_batch_norm(x, weight, bias, eps) -> (out, mean, var)`` as one three-pass kernel."""
    x, weight, bias = rec.datas
    outs = list(rec.outs)
    operands = [a for a in (weight, bias) if a is not None]
    _check("native_batch_norm", x, [x] + operands, outs)
    dt, nd = IR_DTYPES[x.dtype], x.ndim
    shape = (x.shape[1], x.shape[0]) + tuple(x.shape[2:])
    count = const(math.prod(shape[1:]), dt)
    b = Passes()
    xv = load(3, dt)
    mean = op("div", b.reduce("sum", xv), count)
    centered = op("sub", xv, mean)
    var = op("div", b.reduce("sum", op("mul", centered, centered)), count)
    out = op("mul", centered, op("rsqrt", op("add", var, const(rec.attrs["eps"], dt))))
    arrays = outs + [x]
    buffers = [Buffer(dt, _channel_first(element_strides(outs[0]))), Buffer(dt, _per_channel(outs[1], nd)),
               Buffer(dt, _per_channel(outs[2], nd)), Buffer(dt, _channel_first(element_strides(x)))]
    for a, combine in ((weight, "mul"), (bias, "add")):
        if a is not None:
            out = op(combine, out, load(len(arrays), dt))
            buffers.append(Buffer(dt, _per_channel(a, nd)))
            arrays.append(a)
    b.stores += [Store(0, out, phase=b._phase(out)), Store(1, mean, row=True), Store(2, var, row=True)]
    kernel = Kernel(shape, tuple(buffers), tuple(simplify(b.stores)), nd - 1)
    return [(kernel, arrays, outs)]


def batch_norm_backward(rec, constant=None):
    """``native_batch_norm_backward(g, x, mean, var, weight, eps) -> (gx, gw, gb)`` as one two-pass kernel."""
    g, x, mean, var, weight = rec.datas
    outs = list(rec.outs)
    inputs = [g, x, mean, var] + ([weight] if weight is not None else [])
    _check("native_batch_norm_backward", x, inputs, outs)
    if g.shape != x.shape:
        raise NotLowerable(f"native_batch_norm_backward of a {g.shape} gradient for a {x.shape} input")
    dt, nd = IR_DTYPES[x.dtype], x.ndim
    shape = (x.shape[1], x.shape[0]) + tuple(x.shape[2:])
    count = const(math.prod(shape[1:]), dt)
    b = Passes()
    gv, xv, mu, va = (load(i, dt) for i in range(3, 7))
    rstd = op("rsqrt", op("add", va, const(rec.attrs["eps"], dt)))
    xhat = op("mul", op("sub", xv, mu), rstd)
    sum_g, sum_gx = b.reduce("sum", gv), b.reduce("sum", op("mul", gv, xhat))
    gx = op("mul", op("sub", op("sub", gv, op("mul", xhat, op("div", sum_gx, count))), op("div", sum_g, count)),
            rstd)
    buffers = [Buffer(dt, _channel_first(element_strides(outs[0]))), Buffer(dt, _per_channel(outs[1], nd)),
               Buffer(dt, _per_channel(outs[2], nd)), Buffer(dt, _channel_first(element_strides(g))),
               Buffer(dt, _channel_first(element_strides(x))), Buffer(dt, _per_channel(mean, nd)),
               Buffer(dt, _per_channel(var, nd))]
    if weight is not None:
        gx = op("mul", gx, load(7, dt))
        buffers.append(Buffer(dt, _per_channel(weight, nd)))
    b.stores += [Store(0, gx, phase=b._phase(gx)), Store(1, sum_gx, row=True), Store(2, sum_g, row=True)]
    kernel = Kernel(shape, tuple(buffers), tuple(simplify(b.stores)), nd - 1)
    return [(kernel, outs + inputs, outs)]


# Row name -> its lowering (the ``constant`` keyword of the shared lowering signature is unused: no constants).
BATCH_NORM_OPS = {"native_batch_norm": batch_norm, "native_batch_norm_backward": batch_norm_backward}
