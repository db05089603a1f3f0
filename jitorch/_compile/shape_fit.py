"""Fit the integers of traced graphs over sizes: the machinery behind automatic dynamic shapes.

A graph traced at several sizes of its dynamic dimensions (the symbols) is flattened into a `Signature`: the
structure (node kinds, names, targets, dtypes, floats, strings, constants) and, apart, every integer it holds
(view shapes, split sizes, each node's shape and strides in ``meta``, the sizes a creation function made a constant
with) together with every comparison the traced Python made on a size it read through ``Tensor.shape`` or
``size()`` (`sym_sizes.recording_sizes`; ``len(x)``, ``t // 2``, ``t % 8`` and ``int(t / 3)`` are structure: no
polynomial is a floor). Graphs traced on the grid
``R + {0, 1, 2}^n`` (``R``: the real sizes) give each integer a polynomial of degree <= 2 in each size (`Fit`),
checked at one more point by the caller; `rebuild` turns the template graph into the graph for other sizes, and
`Fit.holds` says whether every recorded comparison still comes out the same there (else those sizes take another
branch of the Python code).

>>> import jitorch
>>> from jitorch._compile.sym_sizes import recording_sizes
>>> from jitorch._compile.trace import trace
>>> def f(x):
...     return x.view(x.shape[0] * x.shape[0], -1).sum(1)
>>> sigs = {}
>>> for n in (3, 4, 5, 6):
...     with recording_sizes() as rec:
...         gm = trace(f, (jitorch.ones(n, n, 2),), {}).gm
...     sigs[n] = Signature(gm, rec)
>>> fit = Fit((3,), {(0,): sigs[3], (1,): sigs[4], (2,): sigs[5]})
>>> fit.check((6,), sigs[6]) is None
True
>>> print(rebuild(sigs[3], fit.at((9,))).code.strip().splitlines()[1].strip())
view = _view(arg0, shape = (81, 2));  arg0 = None
"""
from __future__ import annotations

import itertools

import numpy as np

from .._tensor import Tensor
from ..fx.graph import Graph
from ..fx.graph_module import GraphModule
from ..fx.node import Node
from .sym_sizes import COMPARE, NotDynamic

__all__ = ["Signature", "Fit", "rebuild"]

_INT = object()  # where a signature's structure holds one of its integers
DEGREE = 2  # of the fitted polynomials in each size (`Fit` interpolates on 3 points per symbol)
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


# Recorder notes about Python's later reads of a value (segment_training.py), not about what the graph computes:
# they follow the order in which earlier calls touched the inputs, so traces may differ there. Copied from the base.
_BOOKKEEPING = ("used",)


def _node_parts(gm, node, recipes):
    """What a node contributes to a signature: kind, name, target, arguments, metadata and, for a constant, the
    object itself, or how a creation function made it (``("recipe", fn, args, kwargs)``: sizes in its arguments)."""
    const = None
    if node.op == "get_attr":
        const = _fetch(gm, node.target)
        recipe = recipes.get(id(const))
        if recipe is not None:
            const = ("recipe",) + recipe
    meta = {k: v for k, v in sorted(node.meta.items()) if k not in _BOOKKEEPING}
    return (node.op, node.name, node.target, node.args, node.kwargs, meta, const)


def _fetch(gm, target):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


class Signature:
    """A traced graph and its comparison log as ``structure`` (leaves compared across traces) and ``ints``."""

    def __init__(self, gm, recording=None):
        self.gm, self.structure, ints = gm, [], []
        log = recording.log if recording is not None else []
        self.recipes = recording.recipes if recording is not None else {}

        def leaf(x):
            if _is_int(x):
                ints.append(int(x))
                self.structure.append(_INT)
            else:
                self.structure.append(x.name if isinstance(x, Node) else x)
            return x
        _map([_node_parts(gm, n, self.recipes) for n in gm.graph.nodes], leaf)
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
            found = all(COMPARE[name](next(values) if a is _INT else a, next(values) if b is _INT else b) == result
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


def rebuild(sig, ints):
    """A copy of the template ``sig.gm`` with its integers replaced by ``ints`` (`Fit.at`); constants are shared,
    except those a creation function made, which are made again with the new sizes."""
    values = iter(int(v) for v in ints)

    def leaf(x):
        if _is_int(x):
            v = next(values)
            return type(x)(v) if isinstance(x, np.integer) else v
        return x
    gm, graph, env, made = sig.gm, Graph(), {}, {}
    for node in gm.graph.nodes:
        op, name, target, args, kwargs, meta, const = _map(_node_parts(gm, node, sig.recipes), leaf)
        new = graph.create_node(op, target, _remap(args, env), _remap(kwargs, env), name=name, type_expr=node.type)
        new.meta = dict(meta, **{k: node.meta[k] for k in _BOOKKEEPING if k in node.meta})
        env[node] = new
        if isinstance(const, tuple) and const[:1] == ("recipe",):
            made[target] = const[1](*const[2], **const[3])
    out = GraphModule(gm, graph)
    for target, tensor in made.items():
        out.__dict__[target] = tensor  # a tensor constant: a plain attribute (get_attr targets here have no dots)
    return out


def _remap(obj, env):
    return _map(obj, lambda x: env[x] if isinstance(x, Node) else x)
