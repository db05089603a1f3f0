"""A NumPy interpreter of the kernel IR: slow, plainly correct, and the oracle the compiled kernels are tested against.

Buffers are passed as flat 1-D NumPy arrays; each IR `Buffer` describes the strided view of one of them.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .ir import ARG_REDUCTIONS, NP_TYPES, identity


def _erf(x):
    # SciPy's import costs ~300 ms; the interpreter is a test oracle, so it pays only when it meets an erf.
    from scipy import special

    return special.erf(x)


_UNARY = {"neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "tanh": np.tanh, "erf": _erf,
          "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos, "not": np.logical_not,
          "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "rsqrt": lambda x: 1 / np.sqrt(x)}
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
           "min": np.minimum, "pow": np.power, "fmod": np.fmod, "and": np.logical_and, "or": np.logical_or,
           "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
           "ne": np.not_equal}


def _fma(a, b, c):
    """``a * b + c`` rounded once, exactly as IEEE's fusedMultiplyAdd (the oracle of the backends' ``fma``).

    float32: the product of two float32 numbers is exact in double, and the double sum rounded to odd (the nearest
    double whose last bit is 1 where the sum is inexact: Knuth's 2Sum gives the error, which says which neighbour)
    then rounds to float32 exactly as the real sum would (Boldo and Melquiond: rounding to odd in a format of at least
    two more bits never double-rounds). float64: each element as a `Fraction` (exact, slow; an oracle), non-finite
    operands and zero sums by IEEE's rules."""
    a, b, c = np.broadcast_arrays(*(np.asarray(x) for x in (a, b, c)))
    if a.dtype == np.float32:
        p = a.astype(np.float64) * b.astype(np.float64)
        s = p + c
        bb = s - p
        err = (p - (s - bb)) + (c - bb)
        inexact = (err != 0) & np.isfinite(err) & (s.view(np.int64) & 1 == 0)
        return np.where(inexact, np.nextafter(s, np.copysign(np.inf, err)), s).astype(np.float32)
    out = np.empty(a.shape, np.float64)
    for i, (x, y, z) in enumerate(zip(a.flat, b.flat, c.flat)):
        out.flat[i] = _fma_exact(float(x), float(y), float(z))
    return out


def _fma_exact(x, y, z):
    finite = np.isfinite([x, y, z])
    if not finite[:2].all():
        return x * y + z  # an infinite or nan product: the float sum is IEEE's
    if not finite[2]:
        return z  # a finite exact product plus an infinity or nan (x * y may overflow where the exact one does not)
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0:  # the sign of a zero: IEEE's sum of the zero product and z, else +0 as round-to-nearest gives
        return x * y + z if x == 0 or y == 0 else 0.0
    try:
        return float(exact)  # int true division rounds correctly
    except OverflowError:
        return float("inf") if exact > 0 else float("-inf")


_REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "maxnum": np.fmax.reduce}


def view(array, buffer, shape):
    """The strided view that IR buffer ``buffer`` describes over flat ``array``, with ``shape``.

    >>> from jitorch.codegen.ir import Buffer
    >>> view(np.arange(6.0), Buffer("f64", (1, 2), 1), (2, 2)).tolist()
    [[1.0, 3.0], [2.0, 4.0]]
    """
    if 0 in shape:
        return np.empty(shape, array.dtype)
    item = array.itemsize
    return as_strided(array[buffer.offset:], shape, tuple(s * item for s in buffer.strides), writeable=True)


def run(kernel, arrays):
    """Execute ``kernel`` on flat arrays (one per IR buffer), writing its stores in place.

    >>> from jitorch.codegen.ir import Buffer, Kernel, Store, load, op
    >>> x, out = np.arange(4.0), np.zeros(1)
    >>> k = Kernel((4,), (Buffer("f64", (1,)), Buffer("f64", (0,))), (Store(1, op("neg", load(0, "f64")), "sum"),), 1)
    >>> run(k, [x, out]); out.tolist()
    [-6.0]
    """
    for a, b in zip(arrays, kernel.buffers):
        if a.dtype != NP_TYPES[b.dtype] or a.ndim != 1:
            raise TypeError(f"interp.run: expected a flat {b.dtype} array, got {a.dtype} with shape {a.shape}")
    nred = len(kernel.shape) - kernel.reduce_axes
    axes = tuple(range(nred, len(kernel.shape)))
    accs = {}
    with np.errstate(all="ignore"):
        # Phase by phase over all outer points at once: the same result as each row running its phases in turn,
        # because a point only ever reads its own row's accumulators and its own earlier stores.
        for phase in range(kernel.phases):
            numbered = [(j, s) for j, s in enumerate(kernel.stores) if s.phase == phase and not s.row]
            stores = [s for _, s in numbered]
            values = _evaluate(kernel, arrays, stores, accs)
            for j, s in numbered:
                v = np.broadcast_to(values[s.value], kernel.shape)
                if s.reduce is None:
                    view(arrays[s.buffer], kernel.buffers[s.buffer], kernel.shape)[...] = v
                    continue
                if s.reduce in ARG_REDUCTIONS:
                    accs[j] = _arg_reduce(s.reduce, v, kernel.outer_shape, len(axes))
                    continue
                init = identity(s.reduce, s.value.dtype)
                extra = {"dtype": v.dtype} if s.reduce in ("sum", "prod") else {}
                accs[j] = _REDUCE[s.reduce](v, axis=axes, initial=init, keepdims=True, **extra)
            for j, s in numbered:
                if s.reduce is not None and s.buffer is not None:
                    view(arrays[s.buffer], kernel.buffers[s.buffer], kernel.shape)[...] = accs[j]
        rows = [s for s in kernel.stores if s.row]
        row_shape = kernel.outer_shape + (1,) * kernel.reduce_axes
        values = _evaluate(kernel, arrays, rows, accs, row_shape)
        for s in rows:
            view(arrays[s.buffer], kernel.buffers[s.buffer], row_shape)[...] = values[s.value]


def _arg_reduce(kind, v, outer, nred):
    """Flat row-major index of the first max (min) over the trailing ``nred`` axes (0 for an empty reduction),
    keepdims; NumPy's argmax/argmin already return the first nan."""
    rows = v.reshape(tuple(outer) + (-1,))
    index = getattr(np, kind)(rows, axis=-1) if rows.shape[-1] else np.zeros(tuple(outer), np.int64)
    return index.astype(np.int64).reshape(tuple(outer) + (1,) * nred)


def _evaluate(kernel, arrays, stores, accs, shape=None):
    values = {}
    for e in kernel.nodes(stores):
        if e.op == "acc":
            values[e] = accs[e.value]
        else:
            values[e] = _eval(e, [values[a] for a in e.args], kernel, arrays, shape or kernel.shape)
    return values


def _eval(e, args, kernel, arrays, shape):
    dt = NP_TYPES[e.dtype]
    if e.op == "load":
        return view(arrays[e.value], kernel.buffers[e.value], shape)
    if e.op == "const":
        return dt(e.value)
    if e.op == "cast":
        return np.asarray(args[0]).astype(dt)
    if e.op == "where":
        return np.where(*args).astype(dt)
    if e.op == "fma":
        return _fma(*args)
    if e.op in _UNARY:
        return np.asarray(_UNARY[e.op](args[0]), dt)
    return np.asarray(_BINARY[e.op](*args), dt)
