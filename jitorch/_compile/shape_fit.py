"""Fit the integers of traced graphs over sizes: the machinery behind automatic dynamic shapes.

A graph traced at several sizes of its dynamic dimensions (the symbols) is flattened into a `Signature`: the
structure (node kinds, names, targets, dtypes, floats, strings, constants) and, apart, every integer it holds
(view shapes, split sizes, each node's shape and strides in ``meta``) together with every comparison the traced
Python made on a size it read through ``Tensor.shape`` or ``size()`` (`recording_sizes`; ``len(x)``, ``t // 2``,
``t % 8`` and ``int(t / 3)`` are structure: no polynomial is a floor). Graphs traced on the grid
``R + {0, 1, 2}^n`` (``R``: the real sizes) give each integer a polynomial of degree <= 2 in each size (`Fit`),
checked at one more point by the caller; `rebuild` turns the template graph into the graph for other sizes, and
`Fit.holds` says whether every recorded comparison still comes out the same there (else those sizes take another
branch of the Python code).

>>> import jitorch
>>> from jitorch._compile.trace import trace
>>> def f(x):
...     return x.view(x.shape[0] * x.shape[0], -1).sum(1)
>>> sigs = {}
>>> for n in (3, 4, 5, 6):
...     with recording_sizes() as log:
...         gm = trace(f, (jitorch.ones(n, n, 2),), {}).gm
...     sigs[n] = Signature(gm, log)
>>> fit = Fit((3,), {(0,): sigs[3], (1,): sigs[4], (2,): sigs[5]})
>>> fit.check((6,), sigs[6]) is None
True
>>> print(rebuild(sigs[3].gm, fit.at((9,))).code.strip().splitlines()[1].strip())
view = _view(arg0, shape = (81, 2));  arg0 = None
"""
from __future__ import annotations

import contextlib
import itertools
import operator
import threading

import numpy as np

from .._tensor import Size, Tensor
from ..fx.graph import Graph
from ..fx.graph_module import GraphModule
from ..fx.node import Node

__all__ = ["SymSize", "recording_sizes", "Signature", "Fit", "rebuild", "NotDynamic"]

_INT = object()  # where a signature's structure holds one of its integers
DEGREE = 2  # of the fitted polynomials in each size (`Fit` interpolates on 3 points per symbol)
_COMPARISONS = {"__lt__": operator.lt, "__le__": operator.le, "__gt__": operator.gt, "__ge__": operator.ge,
                "__eq__": operator.eq, "__ne__": operator.ne}
# A log entry is (kind, lhs, rhs, result); a "read" (len(), a floor) holds its value as structure: nothing to check.
_COMPARE = dict(_COMPARISONS, read=lambda a, b: True)
_ARITH = ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__neg__", "__pos__", "__abs__",
          "__pow__", "__lshift__", "__rshift__")
# No polynomial is a floor: what these give is structure (a template stands for the sizes where it comes out equal).
_FLOORS = ("__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__divmod__", "__rdivmod__")
_FLOAT_TO_INT = ("__int__", "__floor__", "__ceil__", "__trunc__", "__round__")
_SPELLING = {"__floordiv__": "//", "__rfloordiv__": "//", "__mod__": "%", "__rmod__": "%", "__divmod__": "divmod()",
             "__rdivmod__": "divmod()", "__int__": "int()", "__floor__": "math.floor()", "__ceil__": "math.ceil()",
             "__trunc__": "math.trunc()", "__round__": "round()"}
_state = threading.local()


class NotDynamic(Exception):
    """The traces do not fit one graph over the sizes; the message says why (the shapes stay specialized)."""


class SymSize(int):
    """A size read from a tensor while `recording_sizes` is on: an ``int`` whose comparisons are recorded, and whose
    arithmetic keeps the type, so ``x.shape[1] * 2 > 100`` is recorded too."""

    __slots__ = ()
    __hash__ = int.__hash__

    def __repr__(self):
        return int.__repr__(self)

    __str__ = __repr__


def _comparison(name, compare):
    def method(self, other):
        mine = int(self) if isinstance(self, int) else float(self)
        result = compare(mine, other)
        log = getattr(_state, "log", None)
        if log is not None and isinstance(other, (int, float)):
            log.append((name, mine, other, result))
        return result
    method.__name__ = name
    return method


def _arithmetic(name):
    base = getattr(int, name)

    def method(self, *other):
        out = base(self, *other)
        return SymSize(out) if type(out) is int else out
    method.__name__ = name
    return method


class SymFloat(float):
    """A size divided (``x.shape[1] / 2``): a ``float`` whose comparisons are recorded as a `SymSize`'s are."""

    __slots__ = ()
    __hash__ = float.__hash__

    def __repr__(self):
        return float.__repr__(self)

    __str__ = __repr__


def _floor(name, base):
    def method(self, *other):
        out = base(self, *other)
        log = getattr(_state, "log", None)
        if log is not None and out is not NotImplemented:
            log.append(("read", _Read(name, out), 0, True))
        return out
    method.__name__ = name
    return method


def _true_division(name):
    base = getattr(int, name)

    def method(self, other):
        out = base(self, other)
        return SymFloat(out) if type(out) is float else out
    method.__name__ = name
    return method


for _name, _fn in _COMPARISONS.items():
    setattr(SymSize, _name, _comparison(_name, _fn))
    setattr(SymFloat, _name, _comparison(_name, _fn))
for _name in _ARITH:
    setattr(SymSize, _name, _arithmetic(_name))
SymSize.__truediv__, SymSize.__rtruediv__ = _true_division("__truediv__"), _true_division("__rtruediv__")
for _name in _FLOORS:
    setattr(SymSize, _name, _floor(_name, getattr(int, _name)))
for _name in _FLOAT_TO_INT:
    setattr(SymFloat, _name, _floor(_name, getattr(float, _name)))


@contextlib.contextmanager
def recording_sizes():
    """Within the block, the sizes tensors report on this thread are `SymSize`; yields the comparison log."""
    log = []
    saved = Tensor.shape, Tensor.size, Tensor.__len__
    owner = threading.get_ident()

    def sym(shape):
        return Size(SymSize(s) for s in shape) if threading.get_ident() == owner else Size(shape)

    def size(self, dim=None):
        if dim is None:
            return sym(self._data.shape)
        out = saved[1](self, dim)
        return SymSize(out) if threading.get_ident() == owner else out

    def length(self):
        out = saved[2](self)
        if threading.get_ident() == owner:
            # len() hands Python a plain int whose comparisons nothing sees: the size it read is structure, so
            # a template only stands for sizes where it reads the same.
            log.append(("read", _Read("len", out), 0, True))
        return out

    Tensor.shape, Tensor.size, Tensor.__len__ = property(lambda self: sym(self._data.shape)), size, length
    _state.log = log
    try:
        yield log
    finally:
        Tensor.shape, Tensor.size, Tensor.__len__ = saved
        _state.log = None


class _Read:
    """A value Python computed from sizes that no polynomial describes (``len(x)``, ``t // 2``, ``int(t / 3)``):
    structure, equal only to the same value."""

    __slots__ = ("how", "value")

    def __init__(self, how, value):
        self.how, self.value = how, value

    def __eq__(self, other):
        return isinstance(other, _Read) and other.how == self.how and other.value == self.value

    def __repr__(self):
        if self.how == "len":
            return f"len() of a tensor = {self.value} (x.shape[0] keeps a size symbolic)"
        return f"{_SPELLING.get(self.how, self.how)} of a size = {self.value}"


def _is_int(leaf):
    return isinstance(leaf, (int, np.integer)) and not isinstance(leaf, (bool, np.bool_))


def _map(obj, leaf):
    """``obj`` rebuilt with ``leaf(x)`` for every leaf, in a fixed order (containers, dicts, slices walked)."""
    if isinstance(obj, tuple):
        items = [_map(x, leaf) for x in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, list):
        return [_map(x, leaf) for x in obj]
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            leaf(("key", k))  # the keys are structure
            out[k] = _map(v, leaf)
        return out
    if isinstance(obj, slice):
        return slice(_map(obj.start, leaf), _map(obj.stop, leaf), _map(obj.step, leaf))
    return leaf(obj)


def _node_parts(gm, node):
    """What a node contributes to a signature: kind, name, target, arguments, metadata and, for a constant, the
    object itself."""
    const = _fetch(gm, node.target) if node.op == "get_attr" else None
    return (node.op, node.name, node.target, node.args, node.kwargs, dict(sorted(node.meta.items())), const)


def _fetch(gm, target):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


class Signature:
    """A traced graph and its comparison log as ``structure`` (leaves compared across traces) and ``ints``."""

    def __init__(self, gm, log=()):
        self.gm, self.structure, ints = gm, [], []

        def leaf(x):
            if _is_int(x):
                ints.append(int(x))
                self.structure.append(_INT)
            else:
                self.structure.append(x.name if isinstance(x, Node) else x)
            return x
        _map([_node_parts(gm, n) for n in gm.graph.nodes], leaf)
        self.log_ints = len(ints)  # the log's integers follow the graph's
        self.log = [(name, _INT if _is_int(a) else a, _INT if _is_int(b) else b, result)
                    for name, a, b, result in log]
        _map([tuple(entry) for entry in log], leaf)
        self.ints = np.asarray(ints, dtype=np.int64)

    def mismatch(self, other):
        """``None`` when ``other`` has the same structure, else a short description of the first difference."""
        if len(self.structure) != len(other.structure):
            return f"the traced graphs differ in size ({len(self.structure)} and {len(other.structure)} leaves)"
        for a, b in zip(self.structure, other.structure):
            if not _same(a, b):
                return f"the traced graphs differ: {_short(a)} and {_short(b)}"
        return None


def _same(a, b):
    if a is b:
        return True
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        a, b = a._data, b._data
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (type(a) is type(b) and a.shape == b.shape and a.dtype == b.dtype
                and bool(np.array_equal(a, b, equal_nan=True)))
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and a != a:
        return b != b
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - objects whose == is not a truth value (arrays of other modules) differ
        return False


def _short(x):
    text = repr(x.shape) if isinstance(x, Tensor) else repr(x)
    return text if len(text) < 60 else text[:57] + "..."


class Fit:
    """Each integer of the signatures as a polynomial of degree <= 2 in each size (``t * t`` of attention scores,
    ``b * t * d`` of a flattened batch), interpolated over the grid ``R + {0, 1, 2}^n``.

    ``grid`` maps each offset ``d`` in ``{0, 1, 2}^n`` to the `Signature` traced at ``base + d``. In the binomial
    basis the coefficients are the grid's forward differences, integers, so evaluation is exact:
    ``value(base + d) = sum_k coef[k] * prod_i C(d_i, k_i)``.
    """

    def __init__(self, base, grid):
        self.base, self.n = np.asarray(base, dtype=np.int64), len(base)
        self.sig = grid[(0,) * self.n]
        offsets = list(itertools.product(range(DEGREE + 1), repeat=self.n))
        for d in offsets[1:]:
            why = self.sig.mismatch(grid[d])
            if why is not None:
                raise NotDynamic(f"at sizes {tuple(int(v) for v in self.base + d)}: {why}")
        values = np.stack([grid[d].ints for d in offsets]).reshape((DEGREE + 1,) * self.n + (-1,))
        for axis in range(self.n):
            values = _forward_differences(values, axis)
        coef = values.reshape(len(offsets), -1)
        keep = [i for i in range(len(offsets)) if coef[i].any()]
        self.terms = [offsets[i] for i in keep]
        self.coef = coef[keep] if keep else np.zeros((0, coef.shape[1]), np.int64)
        self._holds = {}

    def at(self, sizes):
        """Every integer of the template at ``sizes`` (one per symbol)."""
        d = [int(v) for v in np.asarray(sizes, dtype=np.int64) - self.base]
        weights = np.array([_binomial_product(d, k) for k in self.terms], dtype=np.int64)
        return weights @ self.coef

    def check(self, sizes, sig):
        """``None`` when the template predicts the signature traced at ``sizes``, else why not."""
        why = self.sig.mismatch(sig)
        if why is not None:
            return f"at sizes {tuple(sizes)}: {why}"
        predicted = self.at(sizes)
        if not np.array_equal(predicted, sig.ints):
            k = int(np.flatnonzero(predicted != sig.ints)[0])
            return (f"at sizes {tuple(sizes)}: an integer of the trace is {int(sig.ints[k])}, not the "
                    f"{int(predicted[k])} the other sizes predict (it is no polynomial of degree <= 2 in each size)")
        return None

    def holds(self, sizes):
        """Whether every comparison the traced Python made on sizes comes out as recorded at ``sizes``."""
        sizes = tuple(int(s) for s in sizes)
        found = self._holds.get(sizes)
        if found is None:
            values = iter(self.at(sizes)[self.sig.log_ints:].tolist())
            found = all(_COMPARE[name](next(values) if a is _INT else a, next(values) if b is _INT else b) == result
                        for name, a, b, result in self.sig.log)
            self._holds[sizes] = found
        return found


def _forward_differences(values, axis):
    """Along ``axis`` (of length 3): ``[x0, x1 - x0, x2 - 2 x1 + x0]``."""
    x0, x1, x2 = (np.take(values, i, axis=axis) for i in range(3))
    return np.stack([x0, x1 - x0, x2 - 2 * x1 + x0], axis=axis)


def _binomial_product(d, k):
    out = 1
    for di, ki in zip(d, k):
        out *= 1 if ki == 0 else di if ki == 1 else di * (di - 1) // 2
    return out


def rebuild(gm, ints):
    """A copy of the template ``gm`` with its integers replaced by ``ints`` (`Fit.at`); constants are shared."""
    values = iter(int(v) for v in ints)

    def leaf(x):
        if _is_int(x):
            v = next(values)
            return type(x)(v) if isinstance(x, np.integer) else v
        return x
    graph, env = Graph(), {}
    for node in gm.graph.nodes:
        op, name, target, args, kwargs, meta, _ = _map(_node_parts(gm, node), leaf)
        new = graph.create_node(op, target, _remap(args, env), _remap(kwargs, env), name=name, type_expr=node.type)
        new.meta = meta
        env[node] = new
    return GraphModule(gm, graph)


def _remap(obj, env):
    return _map(obj, lambda x: env[x] if isinstance(x, Node) else x)
