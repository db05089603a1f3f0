"""Kernel IR: one loop nest over an iteration space, loads, an expression DAG, an optional reduction, stores.

A kernel iterates over ``shape``. Every buffer carries one element stride per dimension of that space (0 means the
buffer is broadcast along it) plus an element offset, so the address of a load or store is the affine function
``offset + sum(i[d] * strides[d])``. When ``reduce_axes`` is ``r > 0`` the last ``r`` dimensions are reduced: every
store then names a reduction op and writes once per point of the leading dimensions (its strides on the reduced
dimensions must be 0).

A reducing kernel may run several *phases* over the reduced dimensions of each outer point, as a hand-written
softmax does (max; then exp and sum; then the scaled write). A store's ``phase`` says in which pass it runs; an
``acc`` expression (`reduced`) reads the final value of a reducing store of an earlier phase, so pointwise stores
and later reductions can use row statistics. Reducing stores without a buffer (``buffer=None``) only feed later
phases. ``row`` stores run once per outer point after the last phase (``mean`` and ``rstd`` outputs); they may
read accumulators and buffers with zero strides on the reduced dimensions. A pointwise store may be read back by
a later phase at the same point (a softmax keeps ``exp(x - max)`` in its output and rescales it in place).

``argmax``/``argmin`` stores compare their value and write the i64 flat index (row-major over the reduced
dimensions) of the first extreme. `simplify` rewrites store values into cheaper equal forms (GELU's ``1 + tanh``).

Expressions (`ir_expr`: dtypes, primitives, hash-consed nodes; re-exported here) form a DAG over a closed set of
primitives that backends implement. ``str(kernel)`` is canonical and is meant to be used as a cache key.

>>> x = load(0, "f32")
>>> k = Kernel((4, 8), (Buffer("f32", (8, 1)), Buffer("f32", (1, 0))), (Store(1, op("exp", x), "sum"),), 1)
>>> print(k)
kernel (4, 8) reduce=1
  buf0 f32 strides=(8, 1) offset=0
  buf1 f32 strides=(1, 0) offset=0
  %0 = load buf0
  %1 = exp %0
  store buf1 sum %1
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .ir_expr import (ARG_REDUCTIONS, BINARY, COMPARE, DTYPES, EXPR_FUNCTIONS, FLOAT_IR_DTYPES, FLOAT_ONLY, FLOATS,
                      INFIX_OPS, INTS, IR_DTYPES, NP_TYPES, PRIMITIVES, REDUCTIONS, STORAGE, STORAGE_IR_DTYPES,
                      TERNARY, UNARY, Expr, const, load, op, reduced)

# The expression names live in `ir_expr`; importers keep reading them from here.
__all__ = ["ARG_REDUCTIONS", "BINARY", "COMPARE", "DTYPES", "EXPR_FUNCTIONS", "FLOAT_IR_DTYPES", "FLOAT_ONLY",
           "FLOATS", "INFIX_OPS", "INTS", "IR_DTYPES", "NP_TYPES", "PRIMITIVES", "REDUCTIONS", "STORAGE",
           "STORAGE_IR_DTYPES", "TERNARY", "UNARY", "Expr", "const", "load", "op", "reduced", "Buffer", "Store",
           "IDENTITIES", "identity", "Kernel", "merged_dims", "collapse", "simplify"]


@dataclass(frozen=True)
class Buffer:
    """A flat array of ``dtype`` seen through per-dimension element strides and an element offset."""

    dtype: str
    strides: tuple
    offset: int = 0


@dataclass(frozen=True)
class Store:
    """Write ``value`` into buffer number ``buffer``; ``reduce`` names a reduction (``buffer`` may then be None:
    an accumulator only later phases read); ``phase`` the pass over the reduced dimensions it runs in; ``row``: once
    per outer point after the last phase."""

    buffer: int | None
    value: Expr
    reduce: str | None = None
    phase: int = 0
    row: bool = False

    @property
    def dtype(self):
        """The type written: the value's, or ``i64`` for an index reduction."""
        return "i64" if self.reduce in ARG_REDUCTIONS else self.value.dtype


IDENTITIES = {"sum": 0, "prod": 1, "max": -math.inf, "min": math.inf, "maxnum": -math.inf}


def identity(reduce, dtype):
    """The value a reduction over zero elements returns (integer max/min use the dtype's extremes).

    >>> identity("max", "i32")
    -2147483648

    An index reduction starts from the identity of the comparison it makes (``argmax``: that of ``max``).
    """
    reduce = {"argmax": "max", "argmin": "min", "maxnum": "max"}.get(reduce, reduce)
    if dtype in INTS and reduce in ("max", "min"):
        info = np.iinfo(DTYPES[dtype])
        return int(info.min if reduce == "max" else info.max)
    if dtype == "bool":
        return {"sum": 0, "prod": 1, "max": 0, "min": 1}[reduce]
    return DTYPES[dtype](IDENTITIES[reduce]).item()


@dataclass(frozen=True)
class Kernel:
    """A loop nest over ``shape`` with ``buffers``, ``stores`` and the number of trailing ``reduce_axes``."""

    shape: tuple
    buffers: tuple
    stores: tuple
    reduce_axes: int = 0

    def __post_init__(self):
        ndim = len(self.shape)
        for i, b in enumerate(self.buffers):
            if len(b.strides) != ndim:
                raise ValueError(f"buffer {i}: {len(b.strides)} strides for a {ndim}-d iteration space")
        if not 0 <= self.reduce_axes <= ndim:
            raise ValueError(f"reduce_axes={self.reduce_axes} outside 0..{ndim}")
        red = self.reduce_axes
        for j, s in enumerate(self.stores):
            if s.reduce is not None and not red:
                raise ValueError(f"store {j}: reduce={s.reduce!r} but reduce_axes=0")
            if (s.phase or s.row) and not red:
                raise ValueError(f"store {j}: phases and row stores need reduce_axes > 0")
            if s.reduce is not None and s.reduce not in REDUCTIONS:
                raise ValueError(f"unknown reduction {s.reduce!r}; expected one of {REDUCTIONS}")
            if s.reduce is not None and s.row:
                raise ValueError(f"store {j}: a row store does not reduce")
            if s.reduce is not None and s.value.dtype in STORAGE:
                raise TypeError(f"store {j}: {s.value.dtype} is a storage-only dtype; reduce its f32 cast")
            if s.buffer is None:
                if s.reduce is None:
                    raise ValueError(f"store {j}: only a reducing store may have no buffer")
                continue
            buf = self.buffers[s.buffer]
            if (s.reduce is not None or s.row) and any(buf.strides[ndim - red:]):
                raise ValueError(f"store to buffer {s.buffer}: nonzero stride on a reduced axis")
            if s.dtype != buf.dtype:
                raise TypeError(f"store to buffer {s.buffer}: value is {s.dtype}, buffer is {buf.dtype}")
        for j, s in enumerate(self.stores):
            for node in self.nodes([s]):
                if node.op == "load" and self.buffers[node.value].dtype != node.dtype:
                    raise TypeError(f"load of buffer {node.value}: dtype {node.dtype} != "
                                    f"{self.buffers[node.value].dtype}")
                if node.op == "acc":
                    src = self.stores[node.value] if 0 <= node.value < len(self.stores) else None
                    if src is None or src.reduce is None or src.dtype != node.dtype:
                        raise ValueError(f"store {j}: acc {node.value} is not a reducing store of dtype {node.dtype}")
                    if not s.row and src.phase >= s.phase:
                        raise ValueError(f"store {j} (phase {s.phase}) reads acc {node.value} of phase {src.phase}; "
                                         "an accumulator is final only after its phase")
                if s.row and node.op == "load" and any(self.buffers[node.value].strides[ndim - red:]):
                    raise ValueError(f"row store {j} loads buffer {node.value}, which varies along a reduced axis")

    @property
    def phases(self):
        """The number of passes over the reduced dimensions (1 for a kernel without phases)."""
        return 1 + max((s.phase for s in self.stores), default=0)

    @property
    def outer_shape(self):
        """The dimensions that are not reduced (dimension 0 is the one split across threads)."""
        return self.shape[:len(self.shape) - self.reduce_axes]

    def nodes(self, stores=None):
        """Every distinct expression node of ``stores`` (default all), children before parents (the order `__str__`
        numbers them in)."""
        seen, order = {}, []

        def visit(e):
            if e in seen:
                return
            for a in e.args:
                visit(a)
            seen[e] = len(order)
            order.append(e)

        for s in self.stores if stores is None else stores:
            visit(s.value)
        return order

    def __str__(self):
        lines = [f"kernel {_ints(self.shape)} reduce={self.reduce_axes}"]
        for i, b in enumerate(self.buffers):
            lines.append(f"  buf{i} {b.dtype} strides={_ints(b.strides)} offset={_ints(b.offset)}")
        number = {}
        for e in self.nodes():
            number[e] = len(number)
            if e.op == "load":
                rhs = f"load buf{e.value}"
            elif e.op == "const":
                rhs = f"const {e.dtype} {e.value!r}"
            elif e.op == "acc":
                rhs = f"acc {e.dtype} store{e.value}"
            else:
                rhs = " ".join([e.op + (f" {e.dtype}" if e.op == "cast" else "")] + [f"%{number[a]}" for a in e.args])
            lines.append(f"  %{number[e]} = {rhs}")
        for s in self.stores:
            where = (f" phase={s.phase}" if s.phase else "") + (" row" if s.row else "")
            target = "none" if s.buffer is None else f"buf{s.buffer}"
            lines.append(f"  store {target} {s.reduce + ' ' if s.reduce else ''}%{number[s.value]}{where}")
        return "\n".join(lines)


def _ints(value):
    """Canonical text of an integer or a tuple of them: NumPy integers print as plain ones (``np.int64(3)`` would
    make another cache key for the same kernel); a template's arguments (`ir_params.Sym`) print as ``$q<i>``."""
    if isinstance(value, tuple):
        return "(" + ", ".join(map(_ints, value)) + ("," if len(value) == 1 else "") + ")"
    return str(int(value)) if isinstance(value, (int, np.integer)) else repr(value)


def merged_dims(shape, strides):
    """``shape`` without size-1 dimensions and with neighbours that every buffer walks contiguously merged, and each
    buffer's ``strides`` to match (plain sequences in, lists out; `collapse`'s step, for callers without a `Kernel`).

    >>> merged_dims((2, 1, 3, 4), [(12, 12, 4, 1), (1, 1, 8, 2)])
    ([2, 12], [[12, 1], [1, 2]])
    """
    dims, out = [], [[] for _ in strides]
    for d, n in enumerate(shape):
        if n == 1:
            continue
        if dims and all(st[-1] == s[d] * n for st, s in zip(out, strides)):
            dims[-1] *= n
            for st, s in zip(out, strides):
                st[-1] = s[d]
        else:
            dims.append(n)
            for st, s in zip(out, strides):
                st.append(s[d])
    return dims, out


def collapse(kernel):
    """Drop size-1 dimensions and merge neighbours that every buffer walks contiguously (CuPy's ``_reduce_dims``).

    Reduced and kept dimensions are never merged with each other. The result has at least one kept dimension
    (a full reduction gets a leading dimension of size 1), because backends split dimension 0 across threads.

    >>> k = Kernel((2, 3, 4), (Buffer("f32", (12, 4, 1)), Buffer("f32", (12, 4, 1))), (Store(1, load(0, "f32")),))
    >>> collapse(k).shape
    (24,)
    """
    kept, red = len(kernel.shape) - kernel.reduce_axes, kernel.reduce_axes
    groups = [merged_dims(kernel.shape[lo:hi], [b.strides[lo:hi] for b in kernel.buffers])
              for lo, hi in ((0, kept), (kept, kept + red))]
    for shape, strides in groups if red else groups[:1]:
        if not shape:  # keep one kept dimension for the threads and one reduced one for the reducing stores
            shape.append(1)
            for st in strides:
                st.append(0)
    (kept_shape, kept_strides), (red_shape, red_strides) = groups
    buffers = tuple(Buffer(b.dtype, tuple(kept_strides[i] + red_strides[i]), b.offset)
                    for i, b in enumerate(kernel.buffers))
    return Kernel(tuple(kept_shape + red_shape), buffers, kernel.stores, len(red_shape))


def simplify(stores):
    """``stores`` with rewrites that make them cheaper to evaluate and change their values by rounding only.

    ``1 + tanh(z)`` (GELU's tanh form) becomes ``2 / (1 + exp(-2 z))``: one exp and a division instead of a tanh,
    whose small-argument arm and sign handling cost as much again, and no cancellation where ``tanh(z)`` nears -1.
    A constant factor of ``z`` folds into the ``-2`` (scaling by a power of two is exact). The rewrite applies only
    when nothing else reads the ``tanh``, so it never adds work.

    >>> z = op("mul", const(0.5, "f32"), load(0, "f32"))
    >>> s = simplify([Store(1, op("add", const(1, "f32"), op("tanh", z)))])[0]
    >>> print(s.value)
    div[f32](const[f32](2.0), add[f32](const[f32](1.0), exp[f32](mul[f32](const[f32](-1.0), load[f32](0)))))
    """
    parents = {}
    seen = set()

    def count(e):
        if e in seen:
            return
        seen.add(e)
        for a in set(e.args):
            parents[a] = parents.get(a, 0) + 1
            count(a)

    for s in stores:
        parents[s.value] = parents.get(s.value, 0) + 1
        count(s.value)
    memo = {}

    def rewrite(e):
        if e not in memo:
            new = Expr(e.op, [rewrite(a) for a in e.args], e.dtype, e.value) if e.args else e
            memo[e] = _one_plus_tanh(e, new, parents) or new
        return memo[e]

    return [Store(s.buffer, rewrite(s.value), s.reduce, s.phase, s.row) for s in stores]


def _one_plus_tanh(old, new, parents):
    if new.op != "add" or new.dtype not in FLOATS:
        return None
    one = const(1, new.dtype)
    for i in (0, 1):
        t, other, t_old = new.args[i], new.args[1 - i], old.args[i]
        if other == one and t.op == "tanh" and parents.get(t_old, 0) == 1:
            z, factor = t.args[0], -2.0
            if z.op == "mul" and any(a.op == "const" for a in z.args):
                c, w = (z.args[0], z.args[1]) if z.args[0].op == "const" else (z.args[1], z.args[0])
                if math.isfinite(DTYPES[new.dtype](2.0 * c.value)):
                    z, factor = w, -2.0 * c.value
            arg = op("mul", const(factor, new.dtype), z)
            return op("div", const(2, new.dtype), op("add", one, op("exp", arg)))
    return None
