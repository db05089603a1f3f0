"""Automatic dynamic Python numbers: a float (or int) argument that changed becomes a run-time input of the graph.

torch.compile specializes a Python float or int argument on its first call and, when a later call passes another
value, recompiles once with that argument dynamic (``specialize_float = False``, automatic dynamic): a training
step ``step(x, y, lr)`` under a learning-rate schedule compiles twice, not once per value. Here the same: a call
that misses an entry only in plain number arguments is traced again with those arguments wrapped (`TracedFloat`,
`TracedInt`: they note comparisons, so a value that steers Python code stays specialized). When the new graph
equals the entry's (`signature`) except where the wrapped argument itself is an operand of ``add``/``sub``/``mul``
/``div`` (or a returned value), those operands become a 0-d tensor made from the argument on every call
(`number_tensor`, of the node's dtype: a Python number meets a float32 tensor in float32, as ATen's wrapped number)
and the entry guards only the argument's type (`AnyNumber`). Anything else (an arithmetic on the number in
Python, a shape, a branch, another op) keeps the value baked in, as before. A replay entry (graph breaks, Python
side effects) reruns its Python on every call and matches its segments' recorded constants, so its guards simply
widen (`widen_replay`: no recompile at all). ``dynamic=False`` specializes every value, as torch's.

>>> import jitorch
>>> f = jitorch.compile(lambda x, lr: x * lr + 1)
>>> [f(jitorch.ones(2), lr)[0].item() for lr in (0.5, 0.25, 2.0, 4.0)]
[1.5, 1.25, 3.0, 5.0]
>>> len(f.entries), f.entries[-1].number_inputs
(2, ('arg1',))
"""
from __future__ import annotations

import os
import sys

import numpy as np

from .._tensor import Tensor
from ..fx.make_fx import Primitive
from ..fx.node import Node
from .guards import argument_names
from .shape_fit import _map

__all__ = ["AnyNumber", "TracedFloat", "TracedInt", "has_numbers", "number_miss", "widen", "widen_replay",
           "traced_numbers", "signature", "generalize", "number_tensor"]

# Rows whose Python-number operand is the same value as a 0-d tensor of the result's dtype (ATen converts the
# wrapped number to the op's computation type, float for float32, double for float64; an int64 op keeps integers).
_REWRITABLE = frozenset({"add", "sub", "mul", "div"})
_RESULT_DTYPES = {"float": ("float32", "float64"), "int": ("float32", "float64", "int64")}


class AnyNumber:
    """The guard value of a number argument made a graph input: equal to any value of its type (``('float', v)``,
    `guards._constant`'s form), so one entry serves every learning rate."""

    __slots__ = ("kind",)

    def __init__(self, kind):
        self.kind = kind

    def __eq__(self, other):
        if type(other) is AnyNumber:
            return other.kind == self.kind
        return type(other) is tuple and len(other) == 2 and other[0] == self.kind

    __hash__ = None

    def __repr__(self):
        return f"any {self.kind} (a graph input)"


_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _by_user():
    """Whether the traced number's method running now was called from outside jitorch (the user's Python)."""
    return not sys._getframe(2).f_code.co_filename.startswith(_PKG)


class _Noting:
    """Any use of a traced number by the user's Python is noted (a comparison or truth test, arithmetic such as
    ``lr * 10`` or ``n // 2``, a conversion, rounding, formatting or hashing): its value may steer the Python
    (``max(lr, 1e-3)``, ``if lr * 10 > 1``, ``round(lr * 4)``), so no graph input can stand for it. Meeting a
    tensor (``lr * x``) and jitorch's own reads of it are not uses: they put the number in the graph, which
    `generalize` compares. (C code that reads a float's value directly, such as ``math.log(lr)``, is not seen:
    its result reaches the graph as another constant, which `generalize` refuses, unless it only steers Python.)"""

    def _note(self):
        self.steered = True

    def __eq__(self, other):
        self._note()
        return self._plain() == other

    def __ne__(self, other):
        self._note()
        return self._plain() != other

    def __lt__(self, other):
        self._note()
        return self._plain() < other

    def __le__(self, other):
        self._note()
        return self._plain() <= other

    def __gt__(self, other):
        self._note()
        return self._plain() > other

    def __ge__(self, other):
        self._note()
        return self._plain() >= other

    def __bool__(self):
        self._note()
        return bool(self._plain())


def _noting_binary(name):
    def method(self, other):
        if isinstance(other, Tensor):
            return NotImplemented  # the tensor's reflected operator takes the number: a graph operand
        if _by_user():
            self.steered = True
        return getattr(self._plain(), name)(other)
    method.__name__ = name
    return method


def _noting_unary(name):
    def method(self, *args):
        if _by_user():
            self.steered = True
        return getattr(self._plain(), name)(*args)
    method.__name__ = name
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
              "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__divmod__",
              "__rdivmod__", "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__lshift__",
              "__rlshift__", "__rshift__", "__rrshift__"):
    setattr(_Noting, _name, _noting_binary(_name))
for _name in ("__neg__", "__pos__", "__abs__", "__invert__", "__int__", "__float__", "__index__", "__round__",
              "__floor__", "__ceil__", "__trunc__", "__format__", "__str__", "__repr__"):
    setattr(_Noting, _name, _noting_unary(_name))


class TracedFloat(_Noting, float):
    """A float argument while its call is traced (see the module notes)."""

    steered = False

    def __hash__(self):  # (a dict keyed by the value: a use)
        if _by_user():
            self.steered = True
        return float.__hash__(self)

    def _plain(self):
        return float(self.real)


class TracedInt(_Noting, int):
    """An int argument while its call is traced (see the module notes)."""

    steered = False

    def __hash__(self):
        if _by_user():
            self.steered = True
        return int.__hash__(self)

    def _plain(self):
        return int(self.real)


def _number_kind(value):
    return {float: "float", int: "int"}.get(type(value))


def has_numbers(args, kwargs):
    """Whether the call passes a plain float or int (the only arguments `number_miss` can make inputs)."""
    return any(type(a) in (float, int) for a in args) or any(type(a) in (float, int) for a in kwargs.values())


def _number_diff(entry, guards):
    """The number arguments in which ``guards`` differ from ``entry``'s (with those the entry already takes as
    inputs), when they differ nowhere else and in at least one value it baked in; else None."""
    if len(entry.guards) != len(guards):
        return None
    names, new_value = [], False
    for (name, old), (name2, new) in zip(entry.guards, guards):
        if name != name2:
            return None
        if type(old) is AnyNumber:
            if old != new:
                return None
            names.append(name)
        elif old != new:
            if not (type(old) is tuple and type(new) is tuple and len(old) == len(new) == 2
                    and old[0] == new[0] and old[0] in ("float", "int")):
                return None
            names.append(name)
            new_value = True
    return names if new_value else None


def number_miss(entries, guards):
    """``(entry, names)`` for the latest whole-graph entry (one that kept a `signature`) whose guards differ from
    ``guards`` only in number arguments (``names``), else None."""
    for entry in reversed(entries):
        if entry.number_signature is not None:
            names = _number_diff(entry, guards)
            if names:
                return entry, names
    return None


def widen(guards, names):
    """``guards`` with the ``names`` arguments' values accepting any number of their type."""
    return [(n, AnyNumber(v.kind if type(v) is AnyNumber else v[0]) if n in names else v) for n, v in guards]


def widen_replay(entries, guards):
    """A replay entry (graph breaks or Python side effects) whose guards differ from ``guards`` only in number
    arguments, its guards widened to any value, or None. Its Python reruns on every call and its segments' ops are
    matched with their recorded constants (`replay`), so a number it reads is always this call's value. So does an
    eager entry's (``run`` None: random sampling in the call, ``gumbel_softmax`` with an annealed ``tau``): one for
    every value, instead of a trace per value up to the recompile limit."""
    for entry in entries:
        if entry.replay is not None or (entry.run is None and entry.dynamic is None and entry.break_reason):
            names = _number_diff(entry, guards)
            if names:
                entry.guards = widen(entry.guards, names)
                entry.number_inputs = tuple(dict.fromkeys(entry.number_inputs + tuple(names)))
                return entry
    return None


def traced_numbers(args, kwargs, names):
    """``(args, kwargs, {name: wrapped value})``: the call's arguments with the ``names`` numbers wrapped."""
    args, kwargs = list(args), dict(kwargs)
    wrapped = {}
    for i, name in enumerate(argument_names(args, kwargs)):
        if name in names:
            value = args[i] if i < len(args) else kwargs[name]
            t = TracedFloat(value) if type(value) is float else TracedInt(value)
            wrapped[name] = t
            if i < len(args):
                args[i] = t
            else:
                kwargs[name] = t
    return tuple(args), kwargs, wrapped


def _leaf_key(x):
    if isinstance(x, Node):
        return ("node", x.name)
    if isinstance(x, (TracedFloat, TracedInt)):
        x = x._plain()
    if type(x) in (float, int):
        return (type(x).__name__, repr(x))
    return ("other", repr(x))


def _constant_key(gm, node):
    obj = gm
    for part in node.target.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, Tensor) and type(obj._data) is np.ndarray:
        d = obj._data
        return ("tensor", d.shape, d.dtype.str, hash(np.ascontiguousarray(d).tobytes()))
    return ("object", id(obj))


def signature(gm):
    """Per node: ``(op, target, leaves of args and kwargs, meta value, constant)``, compared across two traces."""
    out = []
    for n in gm.graph.nodes:
        leaves = []
        _map((n.args, n.kwargs), lambda x: leaves.append(_leaf_key(x)) or x)
        val = repr(n.meta.get("val"))
        const = _constant_key(gm, n) if n.op == "get_attr" else None
        out.append((n.op, str(n.target), tuple(leaves), val, const))
    return out


def generalize(entry_signature, entry_values, gm, wrapped, flat_names, offset=0):
    """Rewrite ``gm`` (traced with the ``wrapped`` numbers) so those numbers are read from their placeholders on
    every call; True when done, False (``gm`` untouched) when the graphs differ elsewhere or a number is used where
    no input can stand for it. ``entry_values``: each number's value in the entry's own trace; ``flat_names``: the
    call's argument names, placeholders ``arg<offset + i>`` (a joint graph's parameters come first)."""
    if any(t.steered for t in wrapped.values()):
        return False
    new = signature(gm)
    if len(new) != len(entry_signature):
        return False
    ids = {id(t): name for name, t in wrapped.items()}
    nodes = list(gm.graph.nodes)
    uses = []  # (node, index among its args or None for the output, name)
    for node, old, cur in zip(nodes, entry_signature, new):
        if old[0] != cur[0] or old[1] != cur[1] or old[3] != cur[3] or old[4] != cur[4] or len(old[2]) != len(cur[2]):
            return False
        if old[2] == cur[2] and not any(isinstance(a, (TracedFloat, TracedInt)) for a in _leaves(node)):
            continue
        for leaf in _leaves(node):
            if isinstance(leaf, (TracedFloat, TracedInt)) and id(leaf) not in ids:
                return False
        found = _uses(node, ids)
        if found is None:
            return False
        # every differing leaf must be one of the wrapped numbers themselves, at the entry's value there
        plain = [_leaf_key(x) for x in _leaves(node)]
        for a, b, x in zip(old[2], plain, _leaves(node)):
            if a != b and (id(x) not in ids or a != _leaf_key(entry_values[ids[id(x)]])):
                return False
        uses += found
    if not uses:
        return False
    _rewrite(gm, uses, ids, flat_names, offset)
    return True


def _leaves(node):
    out = []
    _map((node.args, node.kwargs), lambda x: out.append(x) or x)
    return out


def _uses(node, ids):
    """Where ``node`` reads a wrapped number: ``[(node, arg index or None, name)]``; None when one is read where a
    graph input cannot stand for it (another row, a keyword, a nested argument, mixed dtypes)."""
    if node.op == "output":
        return [(node, None, None)]
    found = [(node, i, ids[id(a)]) for i, a in enumerate(node.args) if id(a) in ids]
    nested = sum(1 for x in _leaves(node) if id(x) in ids)
    if nested != len(found) or node.kwargs and any(id(x) in ids for x in _leaves(node)):
        return None
    if node.op != "call_function" or not isinstance(node.target, Primitive) or \
            node.target.op.name not in _REWRITABLE or node.kwargs:
        return None
    out_dtype = node.meta.get("val", (None, None))[1]
    for _, i, _ in found:
        kind = "float" if isinstance(node.args[i], float) else "int"
        if str(out_dtype) not in _RESULT_DTYPES[kind]:
            return None
    if any(not isinstance(a, Node) and id(a) not in ids for a in node.args):
        return None  # a second Python number beside it: the row's number-number form
    for a in node.args:
        if isinstance(a, Node) and ("val" not in a.meta or a.meta["val"][1] != out_dtype):
            return None  # a tensor of another dtype: promotion would differ from the wrapped number's
    return found


def number_tensor(value, dtype):
    """The 0-d tensor a number argument feeds the graph with (``dtype``: the node's result dtype name)."""
    return Tensor._make(np.array(value, dtype=dtype))


def _rewrite(gm, uses, ids, flat_names, offset):
    graph = gm.graph
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    by_name = {name: placeholders[f"arg{i + offset}"] for i, name in enumerate(flat_names)}
    last = [n for n in graph.nodes if n.op == "placeholder"][-1]
    made = {}
    for node, i, name in uses:
        if i is None:  # the output returns the number itself: the call's own value
            node.args = _map(node.args, lambda x: by_name[ids[id(x)]] if id(x) in ids else x)
            continue
        dtype = str(node.meta["val"][1])
        if (name, dtype) not in made:
            with graph.inserting_after(last):
                last = made[name, dtype] = graph.call_function(number_tensor, (by_name[name], dtype))
            last.meta["val"] = ((), np.dtype(dtype))
            if "phase" in by_name[name].meta:  # a joint graph: the forward makes it, the backward gets it saved
                last.meta["phase"] = by_name[name].meta["phase"]
        args = list(node.args)
        args[i] = made[name, dtype]
        node.args = tuple(args)
    gm.recompile()
