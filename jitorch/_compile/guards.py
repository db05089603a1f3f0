"""Guards: what a compiled graph assumed about its call, as named values; a call whose values differ retraces.

Each tensor argument contributes its shape, dtype, device and strides (the kernels are specialized on all four);
other arguments were baked into the graph as constants, so their values are guarded too. Grad mode and, for
modules, the ``training`` flags, parameter and buffer identities and every public plain-data attribute
(``momentum``, ``eps``, ``p``, a user's ``self.temperature``) complete the key.

>>> import jitorch
>>> names = [n for n, _ in guard_values((jitorch.ones(2, 3), 4), {})]
>>> names[:4], names[-3:]
(['arg0.shape', 'arg0.dtype', 'arg0.device', 'arg0.stride'], ['arg1', 'aliases', 'grad_mode'])
"""
from __future__ import annotations

import numpy as np

from .._tensor import Tensor
from ..autograd.grad_mode import GradState

__all__ = ["guard_values", "first_failure", "argument_names"]

_SIMPLE = (int, float, bool, str, bytes, type(None), complex)


class _Same:
    """Equal to another `_Same` of the very same object. It holds the object, so that an entry's guard keeps it
    alive: an ``id`` alone can be reused by a new object once the old one is freed, and would then match it."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return type(other) is _Same and other.obj is self.obj

    __hash__ = None

    def __repr__(self):
        return f"the {type(self.obj).__name__} object at {id(self.obj):#x}"


_SMALL_ARRAY = 4096  # elements: NumPy arrays up to this size are guarded by value, larger ones by identity


def _constant(value):
    """A stand-in for a non-tensor argument, compared with ``==``: plain data (NumPy scalars and small arrays too)
    by value, anything else by identity (`_Same`)."""
    if isinstance(value, _SIMPLE):
        return (type(value).__name__, value)
    if isinstance(value, (tuple, list)) and all(isinstance(v, _SIMPLE) for v in value):
        return (type(value).__name__, tuple(value))
    if isinstance(value, np.generic):  # a timestep from np.arange, an index from randint
        return (f"numpy.{value.dtype}", value.item())
    if type(value) is np.ndarray and value.size <= _SMALL_ARRAY:
        return ("ndarray", value.shape, value.dtype.str, value.tobytes())
    return _Same(value)


def structure_key(spec):
    """A comparable key of a `jitorch.utils._pytree` spec that keeps dict key order (dicts compare equal in any
    order, but their leaves are numbered in insertion order).

    >>> from jitorch.utils._pytree import tree_flatten
    >>> structure_key(tree_flatten({"b": 1, "a": 2})[1]) == structure_key(tree_flatten({"a": 2, "b": 1})[1])
    False
    """
    kind, inner = spec
    if kind is None:
        return None
    if kind is dict:
        return (dict, tuple((k, structure_key(v)) for k, v in inner.items()))
    return (kind, tuple(structure_key(v) for v in inner))


def _layout(t):
    d = t._data
    return ("tensor", tuple(d.shape), str(d.dtype), str(t.device), tuple(d.strides))


def guard_values(args, kwargs, module=None, params=None, by_value=False):
    """``[(name, value), ...]`` for one call; equal lists mean the same compiled entry applies.

    ``params``: ``tuple(module.parameters())`` when the caller already has it (one traversal per call).
    ``by_value``: a training call, whose graph takes the parameters as inputs: those a module marks in
    ``_guard_by_value`` (tensors looked up by name on every call) are guarded by layout instead of identity.
    """
    out = []
    for name, a in zip(argument_names(args, kwargs), (*args, *kwargs.values())):
        if isinstance(a, Tensor):
            d = a._data
            out += [(f"{name}.shape", tuple(d.shape)), (f"{name}.dtype", str(d.dtype)),
                    (f"{name}.device", str(a.device)), (f"{name}.stride", tuple(d.strides))]
        else:
            out.append((name, _constant(a)))
    # The graph reads an argument passed twice (``f(x, x)``, self-attention's ``q = k = v``) from one input:
    # another call with distinct tensors must not reuse it.
    first = {}
    out.append(("aliases", tuple(first.setdefault(id(a), i) for i, a in enumerate((*args, *kwargs.values()))
                                 if isinstance(a, Tensor))))
    out.append(("grad_mode", GradState.enabled))
    if module is not None:
        mods = tuple(module.modules())
        out.append(("training", tuple(m.training for m in mods)))
        params = tuple(module.parameters()) if params is None else params
        marked = {id(m._parameters[k]) for m in mods if "_guard_by_value" in m.__dict__ for k in m._guard_by_value} \
            if by_value else ()
        out.append(("parameters", tuple(_layout(p) if id(p) in marked else id(p) for p in params)))
        # The graph reads buffers as constants and writes BatchNorm's statistics back into them: a buffer
        # replaced by another tensor (``bn.running_mean = t``) must retrace, or the old one is read and written.
        out.append(("buffers", tuple(id(b) for m in mods for b in m._buffers.values())))
        # Plain-data attributes (``momentum``, ``eps``, dropout's ``p``, a user's ``self.temperature``) were baked
        # into the graph as constants: changing one must retrace.
        out.append(("attributes", tuple(_plain_attributes(m) for m in mods)))
    return out


def argument_names(args, kwargs):
    """The guards' names of the flat arguments: ``arg0, arg1, ...``, then the keywords."""
    return [f"arg{i}" for i in range(len(args))] + list(kwargs)


def _plain_attributes(module):
    """``(name, value)`` of a module's public plain-data attributes (numbers, strings, None and tuples of them)."""
    return tuple((k, v) for k, v in module.__dict__.items()
                 if k[0] != "_" and k != "training" and (isinstance(v, _SIMPLE) or (
                     type(v) is tuple and all(isinstance(e, _SIMPLE) for e in v))))


def first_failure(expected, got):
    """A readable description of the first guard that differs between two `guard_values` lists."""
    for (name, want), (name2, have) in zip(expected, got):
        if name != name2:
            return f"argument structure: expected {name}, got {name2}"
        if want != have:
            return f"{name}: expected {want!r}, got {have!r}"
    return f"number of guarded values: expected {len(expected)}, got {len(got)}"
