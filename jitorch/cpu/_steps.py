"""Replay steps: plain closures over static NumPy arrays, built once at capture and called in order by ``replay``.

A step never touches ``Tensor``, the dispatcher or autograd: it calls a row's kernel on the arrays the captured
tensors hold and writes the result into the array the eager run produced, so every tensor the user kept from the
capture sees the new values.

>>> import numpy as np
>>> from jitorch.ops.table import OPS
>>> a, out = np.ones(3, np.float32), np.zeros(3, np.float32)
>>> step = kernel_step(OPS["add"], [a, a], (), None, {}, [out])
>>> step(); out
array([2., 2., 2.], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from .. import _dtype
from .._dispatch import _cast_operand, _compute_dtype
from .._tensor import Tensor
from ..ops.conv_layouts import STASH

__all__ = ["plan_operands", "kernel_step", "window_keeping_step", "inplace_step", "draw_step", "restore_step",
           "root_of"]

_FROM_NP = _dtype.FROM_NP
_BOOL = np.dtype(np.bool_)
# Opaque rows whose kernel is exactly this NumPy ufunc for same-dtype float32/float64 operands (half precision
# goes through float32 in the kernel, so it keeps the kernel).
_DIRECT = {"matmul": np.matmul}
_FULL_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def root_of(array):
    """The array that owns ``array``'s memory (views chain through ``.base``)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def plan_operands(op, args):
    """The kernel's operands as the dispatcher would pass them: ``(datas, cast_positions, compute_np_dtype)``.

    Mirrors ``_dispatch._run_kernel``'s promotion so replay computes in the same dtype as eager. Tensor operands are
    kept as their arrays (read at each replay, so new data copied into them is seen); those whose dtype differs from
    the compute dtype are listed in ``cast_positions`` and cast at replay. Scalars are cast once, here.
    """
    tensors = [a._data for a in args if isinstance(a, Tensor)]
    if not tensors:
        raise TypeError(f"{op.name}: expected at least one Tensor argument")
    first = tensors[0]
    same = all(d.dtype == first.dtype for d in tensors)
    has_scalar = any(a is not None and not isinstance(a, Tensor) for a in args)
    cnp, needs_cast = None, False
    if op.promotion != "keep":
        compute = _FROM_NP[first.dtype] if same and not has_scalar else _compute_dtype(op, args)
        if op.promotion == "float" and compute.category < _dtype.FLOAT:
            compute = _dtype.get_default_dtype()
        cnp = compute.np
        needs_cast = not same or cnp != first.dtype or has_scalar
    datas, casts = [], []
    for i, a in enumerate(args):
        if isinstance(a, Tensor):
            d = a._data
            if needs_cast and d.dtype != cnp and not (op.masks and d.dtype == _BOOL):
                casts.append(i)
            datas.append(d)
        else:
            datas.append(_cast_operand(a, cnp, op.masks) if needs_cast else a)
    return datas, tuple(casts), cnp


def _operand_reader(datas, casts, cnp):
    """A zero-argument function returning the operand list (casting the listed arrays at call time)."""
    if not casts:
        return lambda: datas
    def read():
        current = list(datas)
        for i in casts:
            current[i] = current[i].astype(cnp)
        return current
    return read


def kernel_step(op, datas, casts, cnp, attrs, outs):
    """Run ``op``'s kernel and copy its outputs into ``outs`` (``None`` entries are aliases: left alone)."""
    kernel = op.kernel
    if op.nout == 1:
        out = outs[0]
        ufunc = getattr(np, op.ufunc, None) if op.ufunc else None
        if ufunc is None and op.name in _DIRECT and out.dtype in _FULL_FLOATS:
            ufunc = _DIRECT[op.name]
        if ufunc is not None and not casts and not attrs and out.dtype.kind == "f" and all(
                not isinstance(d, np.ndarray) or d.dtype == out.dtype for d in datas) and (
                out.dtype.itemsize != 2 or all(isinstance(d, np.ndarray) for d in datas)):  # see ops.pointwise.MUL
            # Same-dtype float pointwise ops write straight into the static buffer: no temporary array.
            def step():
                ufunc(*datas, out=out)
            return step
        if not casts:
            def step():
                np.copyto(out, kernel(np, *datas, **attrs), casting="unsafe")
            return step
        read = _operand_reader(datas, casts, cnp)

        def step():
            np.copyto(out, kernel(np, *read(), **attrs), casting="unsafe")
        return step
    read = _operand_reader(datas, casts, cnp)

    def step():
        results = kernel(np, *read(), **attrs)
        for target, value in zip(outs, results):
            if target is not None:
                np.copyto(target, value, casting="unsafe")
    return step


def window_keeping_step(op, datas, casts, cnp, attrs, out, cols):
    """A convolution whose capture kept its window matrix ``cols`` for the weight gradient: each replay writes the
    new windows into ``cols`` (``conv_layouts.STASH.into``), so the gradient's step reads this replay's windows."""
    kernel = op.kernel
    read = _operand_reader(datas, casts, cnp)

    def step():
        STASH.want, STASH.into = True, cols
        try:
            result = kernel(np, *read(), **attrs)
        finally:
            STASH.want, STASH.into, STASH.cols = False, None, None
        np.copyto(out, result, casting="unsafe")
    return step


def inplace_step(op, target, datas, casts, cnp, attrs):
    """Run ``op``'s kernel on ``(target, *args)`` and write the result back into ``target``, as ``apply_inplace``."""
    kernel = op.kernel
    read = _operand_reader(datas, casts, cnp)

    def step():
        np.copyto(target, kernel(np, *read(), **attrs), casting="unsafe")
    return step


def draw_step(generator, method, args, kwargs, out):
    """Draw new samples from ``generator`` at replay time into ``out`` (the graph-safe RNG: each replay advances it).

    The NumPy Generator is looked up on every call because ``manual_seed`` replaces it.
    """
    def step():
        np.copyto(out, getattr(generator._rng, method)(*args, **kwargs), casting="unsafe")
    return step


def restore_step(array, snapshot):
    """Put back the value a tensor created inside the capture had, before the replay mutates it again."""
    def step():
        np.copyto(array, snapshot)
    return step
