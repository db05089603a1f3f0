"""Sizes that remember how Python used them, while automatic dynamic shapes trace a call (see shape_fit.py).

Inside `recording_sizes`, ``Tensor.shape``, ``size()`` and ``len()`` hand out `SymSize` values: ints whose
comparisons (``t > 64``, ``min(t, 30)``) go into the recording's log with their outcome, whose arithmetic keeps the
type (``t * 2 > 100`` is seen too), and whose floors (``t // 2``, ``t % 8``, ``int(t / 3)``) are logged as values a
template must reproduce, since no polynomial is a floor. ``jitorch.arange``, ``zeros``, ``ones``, ``full`` and
friends note how they made their tensors, so a template can make them again at other sizes.

>>> import jitorch
>>> x = jitorch.ones(5, 3)
>>> script = {"__name__": "train"}  # comparisons are logged from the user's code, not from jitorch's own
>>> exec("wide = lambda x: x.shape[1] * 2 > 4", script)
>>> with recording_sizes() as rec:
...     flag = script["wide"](x)
...     pos = jitorch.arange(x.shape[0])
>>> rec.log, flag, list(rec.recipes.values())[0][1]
([('__gt__', 6, 4, True)], True, (5,))
"""
from __future__ import annotations

import contextlib
import operator
import sys
import threading

from .._creation import full
from .._tensor import Size, Tensor
from ..fx._created import watching_creation

__all__ = ["SymSize", "SymFloat", "NotDynamic", "Recording", "recording_sizes", "COMPARE"]

_COMPARISONS = {"__lt__": operator.lt, "__le__": operator.le, "__gt__": operator.gt, "__ge__": operator.ge,
                "__eq__": operator.eq, "__ne__": operator.ne}
# A log entry is (kind, lhs, rhs, result); a "read" (len(), a floor) holds its value as structure: nothing to check.
COMPARE = dict(_COMPARISONS, read=lambda a, b: True)
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


def _by_user():
    """Whether the size method running was called from outside jitorch. jitorch's own code compares sizes too
    (caches, layout choices), but what it decides shows in the graph, which the probes compare; its comparisons
    would only make probes disagree where a cache was warm for one and cold for another."""
    caller = sys._getframe(2).f_globals.get("__name__", "")
    return not (caller == "jitorch" or caller.startswith("jitorch."))


def _comparison(name, compare):
    def method(self, other):
        mine = int(self) if isinstance(self, int) else float(self)
        result = compare(mine, other)
        log = getattr(_state, "log", None)
        if log is not None and isinstance(other, (int, float)) and _by_user():
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
        if log is not None and out is not NotImplemented and _by_user():
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


class Recording:
    """What `recording_sizes` saw: ``log`` (comparisons and reads of sizes, in order) and ``recipes`` (each tensor a
    creation function made, by id: ``(function, args, kwargs)`` to make it again at other sizes)."""

    def __init__(self):
        self.log, self.recipes, self._keep = [], {}, []

    def made(self, out, recipe):
        self.recipes[id(out)] = recipe
        self._keep.append(out)  # ids stay unique while the recording lives


# ``*_like`` functions read a traced value: their recipe is ``full`` of its (symbolic) shape, and this fill value.
_LIKE = {"zeros_like": 0, "ones_like": 1, "empty_like": 0, "full_like": None}


def _recipe(rec):
    """What `watching_creation` reports, kept as ``rec``'s recipes: how to make each tensor again at other sizes.
    (The creation function's own arithmetic on sizes is jitorch's: `_by_user` keeps it out of the log.)"""
    def made(name, fn, args, kwargs, out):
        if name in _LIKE:
            like, value = args[0], _LIKE[name]
            value = kwargs.get("fill_value", args[1] if len(args) > 1 else None) if value is None else value
            kw = {"dtype": kwargs.get("dtype") or like.dtype, "device": kwargs.get("device") or like.device}
            rec.made(out, (full, (tuple(like.shape), value), kw))
        else:
            rec.made(out, (fn, args, kwargs))
    return made


@contextlib.contextmanager
def recording_sizes():
    """Within the block, the sizes tensors report on this thread are `SymSize`, and ``jitorch.arange`` and the other
    creation functions note how they made their tensors; yields the `Recording`."""
    rec = Recording()
    log = rec.log
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
        if threading.get_ident() == owner and _by_user():
            # len() hands Python a plain int whose comparisons nothing sees: the size it read is structure, so
            # a template only stands for sizes where it reads the same.
            log.append(("read", _Read("len", out), 0, True))
        return out

    Tensor.shape, Tensor.size, Tensor.__len__ = property(lambda self: sym(self._data.shape)), size, length
    _state.log = log
    try:
        with watching_creation(_recipe(rec)):
            yield rec
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
