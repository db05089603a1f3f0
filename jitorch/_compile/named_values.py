"""Plain data a compiled function reads by name, guarded by value: a trace runs the function's Python once, so
``x * SCALE`` bakes SCALE's value into the graph as a constant, and a later ``SCALE = 3.0`` must retrace instead of
reusing 2.0 (torch.compile guards the globals it reads the same way).

What is read again on every call, for the compiled function, the user's helpers it names
(`reached.functions_reached`) and, for a compiled module, the ``forward`` of each of its modules' own classes:
- the numbers, strings, None and tuples or lists of them held by a global the code names or by a closure cell, and
  NumPy arrays and scalars (by value; arrays over `guards._SMALL_ARRAY` elements by contents), and lists or tuples
  of them or of other objects (entry by entry up to `_SHORT_LIST` entries, longer ones by their entries'
  identities and the values of their arrays; a list the code mutates, ``self.queue.pop(0)``, by identity and, while
  short, by entries);
- those an object held there has under an attribute name the code uses (``cfg.temperature``, ``config.LR``,
  ``self.cfg.scale``: one object deep below a module or plain object), or a dict under a string constant of the
  code (``table["shift"]``);
- tensors held the same ways, by identity (a rebound ``W``), and functions and classes (a rebound helper).

Python-level random numbers (``random.random()``, ``np.random.rand()``) would be frozen the same way; a function whose
code names a source of them runs eagerly (`NamedValues.random_source`).

>>> SCALE = 2.0
>>> watched = NamedValues(lambda x: x * SCALE)
>>> watched.values()
[('global SCALE', ('float', 2.0))]
"""
from __future__ import annotations

import operator
import random as _random
import sys
import types

import numpy as np

from .._tensor import Tensor
from ..autograd.grad_mode import GradState
from ..nn.modules.module import Module
from .guards import _SIMPLE, _SIMPLE_TYPES, _Same, _constant
from .reached import _LIBRARY, functions_reached

__all__ = ["NamedValues"]

_MISSING = object()
_CODE_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)
_RANDOM_TYPES = (_random.Random, np.random.Generator, np.random.RandomState)
# NumPy values a trace turns into graph constants (``x.new_tensor(self.mask)``): guarded by value up to
# `guards._SMALL_ARRAY` elements, larger arrays by identity and contents (array_contents.py).
_NUMPY_TYPES = (np.ndarray, np.generic)


def _plain(value):
    # Lists too: ``loss_weights[0] = w`` between calls must retrace (the guard reads the entries again each call).
    return isinstance(value, _SIMPLE) or (type(value) in (tuple, list) and all(isinstance(v, _SIMPLE) for v in value))


# A list the code calls one of these on may be the function's own record (``calls.append(n)``, ``history.append(h)``):
# it is guarded by identity, and by its entries only while short (a record grows with every call). A call that did
# mutate it runs in replay mode (side_effects.py), whose guards ignore the entries; a whole-call graph, which may
# have read them as constants (``x * self.scales[0]``), retraces when a short one changes.
_LIST_MUTATORS = frozenset(("append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"))
_SHORT_LIST = 16


def _guarded(value, names):
    """The guard stand-in of a plain value (`_plain`) read by code using ``names``."""
    if type(value) is list and not _LIST_MUTATORS.isdisjoint(names):
        # Held, not by id: a list replaced between calls (``self.queue = [...]``) is freed and its id reused.
        entries = tuple([_constant(v) for v in value]) if len(value) <= _SHORT_LIST else \
            ("long", len(value), _arrays_in(value))
        return ("list", _Same(value), entries)
    return _constant(value)


def _namespace(obj):
    """Where attribute names of ``obj`` are looked up, or None for values whose attributes are code or tensors
    rather than settings."""
    if isinstance(obj, (Tensor, *_CODE_TYPES)) or not hasattr(obj, "__dict__"):
        return None
    return obj.__dict__  # plain objects, modules (``self.cfg``) and Python modules (``config.LR``)


def _random_source(obj, names):
    """A name for ``obj`` when it hands out Python-level random numbers, else None."""
    if obj is _random or obj is np.random:
        return obj.__name__
    if obj is np and "random" in names:
        return "numpy.random"
    owner = getattr(obj, "__self__", None)  # ``from random import uniform``: a bound method of random's instance
    if isinstance(obj, _RANDOM_TYPES) or isinstance(owner, _RANDOM_TYPES):
        return f"{type(owner if isinstance(owner, _RANDOM_TYPES) else obj).__module__}.{getattr(obj, '__name__', '')}"
    return None


class _SameEntries:
    """Equal to another `_SameEntries` of a container holding the very same objects, in order (held, as `_Same`)."""

    __slots__ = ("entries",)

    def __init__(self, entries):
        self.entries = entries

    def __eq__(self, other):
        return type(other) is _SameEntries and len(other.entries) == len(self.entries) and \
            all(map(operator.is_, other.entries, self.entries))

    __hash__ = None

    def __repr__(self):
        return f"the {len(self.entries)} entries at {', '.join(f'{id(v):#x}' for v in self.entries[:4])}..."


def _entries_guard(value):
    """A list or tuple of arrays or objects: entry by entry (small arrays by value, as arguments) while short; a
    longer one (a module's table of 200 tensors whose forward reads its ``len``) by its entries' identities, one
    cheap pass per call, and its NumPy arrays by value (`_arrays_in`: changed in place, a trace's constant is stale).
    """
    if len(value) <= _SHORT_LIST:
        return (type(value).__name__, tuple([_constant(v) for v in value]))
    return (type(value).__name__, _SameEntries(tuple(value)), _arrays_in(value))


def _entry_attributes(out, label, entries, names, versions=False):
    """The attributes the code uses of the user's objects in a list (``BLOCKS[0].scale``), as of one held by name."""
    for i in [i for i, v in enumerate(entries) if type(v) is not Tensor and type(v) not in _SIMPLE_TYPES]:
        v = entries[i]
        if not isinstance(v, (Module, *_NUMPY_TYPES, *_CODE_TYPES)) and type(getattr(v, "__dict__", None)) is dict \
                and not (type(v).__module__ or "").startswith(_LIBRARY):
            _attributes(out, f"{label}[{i}]", v, names, depth=0, versions=versions)


def _arrays_in(value):
    """The NumPy arrays and scalars among a long list's entries, by value (`guards._constant`); tensors, held by
    the graph itself, cost a type check each."""
    return tuple([_constant(v) for v in value if type(v) is not Tensor and isinstance(v, _NUMPY_TYPES)])


class NamedValues:
    """The plain values a function reads by name (see the module notes); `values` reads them for one call."""

    def __init__(self, fn, module=None):
        self._probes = []  # (label, read, names): read() is the current value, names what the code calls on it
        self._modules = set()  # ids of the modules whose attributes are probed
        self.random_source = None
        reached = functions_reached(fn)
        for m in module.modules() if module is not None else ():
            forward = type(m).__dict__.get("forward")
            if isinstance(forward, types.FunctionType) and not (forward.__module__ or "").startswith(_LIBRARY):
                self._module_probes(f"module {type(m).__name__}", m, _code_names(forward.__code__))
                reached += functions_reached(forward)
        for func, selves, _ in reached:
            if func is not None:
                names = _code_names(func.__code__)
                for obj in selves:
                    if obj is not None:
                        self._probe("self", lambda obj=obj: obj, names)
                self._watch(func, names)

    def _module_probes(self, label, m, names):
        """A module's own plain attributes are guarded with its state (`guards.guard_values`); what the code reads
        of it besides (a plain object ``self.cfg``, a tensor that is neither parameter nor buffer ``self.mask``) is
        probed attribute by attribute: a model of many blocks must not cost a walk of each per call."""
        if id(m) in self._modules:
            return
        self._modules.add(id(m))
        for name in names:
            value = m.__dict__.get(name, _MISSING)
            # (plain values are the module's guarded attributes, except lists: those are probed here)
            if value is not _MISSING and (type(value) is list or not _plain(value)) and not isinstance(value, Module):
                self._probe(f"{label}.{name}", lambda m=m, name=name: m.__dict__.get(name, _MISSING), names)

    def _watch(self, func, names):
        scope = func.__globals__
        for name in names:
            if name in scope:
                self._probe(f"global {name}", lambda scope=scope, name=name: scope.get(name, _MISSING), names)
        for name, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
            self._probe(f"cell {name}", lambda cell=cell: _cell_value(cell), names)

    def _probe(self, label, read, names):
        value = read()
        found = _random_source(value, names)
        if found is not None:
            self.random_source = self.random_source or found
        if isinstance(value, Module):
            self._module_probes(label, value, names)
        elif not _library_module(value):
            self._probes.append((label, read, names))

    def random_reason(self):
        """Why a function that reads Python-level random numbers runs eagerly."""
        return (f"the code reads Python-level random numbers ({self.random_source}): a graph would freeze the values "
                f"drawn while tracing; draw them with jitorch (torch.rand) to compile")

    def values(self, versions=False):
        """``[(label, constant)]`` for this call: plain values by value, functions and classes by identity; tensors
        by identity, or with ``versions`` held and with their version (a read of their values may have decided the
        path the code took: vmap's memo of clean calls)."""
        out = []
        for label, read, names in self._probes:
            value = read()
            if value is _MISSING:
                out.append((label, None))
            elif _plain(value):
                out.append((label, _guarded(value, names)))
            elif isinstance(value, _NUMPY_TYPES):
                out.append((label, _constant(value)))  # x.new_tensor(self.mask): baked in, so guarded by value
            elif type(value) in (list, tuple):  # of other entries (arrays, objects)
                out.append((label, _guarded(value, names) if type(value) is list and not _LIST_MUTATORS.isdisjoint(
                    names) else _entries_guard(value)))
                _entry_attributes(out, label, value, names, versions)
            elif isinstance(value, _CODE_TYPES):
                out.append((label, ("id", id(value))))
            elif isinstance(value, Tensor):
                _tensor(out, label, value, versions)
            else:
                _attributes(out, label, value, names, depth=1, versions=versions)
        return out


def _code_names(code):
    """Names a code object and the code nested in it (comprehensions, inner functions) use, sorted: globals and
    attributes alike, and the string constants that may be dict keys."""
    def collect(c):
        found = set(c.co_names)
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                found |= collect(const)
            elif type(const) is str and len(const) <= 64:
                found.add(const)
        return found
    return tuple(sorted(collect(code)))


def _library_module(value):
    """Python modules whose attributes are code, not settings: the standard library, installed packages, jitorch."""
    if not isinstance(value, types.ModuleType):
        return False
    root = value.__name__.split(".")[0]
    path = getattr(value, "__file__", None) or ""
    return (root in sys.stdlib_module_names or value.__name__.startswith(_LIBRARY[:-1]) or "site-packages" in path
            or "dist-packages" in path or not path)


def _attributes(out, label, obj, names, depth, versions=False):
    space = obj if type(obj) is dict else _namespace(obj)  # subscripts use string constants: ``table["shift"]``
    if space is None:
        return
    for name in names:
        value = space.get(name, _MISSING)
        if value is _MISSING:
            continue
        if _plain(value):
            out.append((f"{label}.{name}", _guarded(value, names)))
        elif isinstance(value, _NUMPY_TYPES):
            out.append((f"{label}.{name}", _constant(value)))
        elif isinstance(value, Tensor):
            _tensor(out, f"{label}.{name}", value, versions)
        elif depth and not isinstance(value, Module):
            _attributes(out, f"{label}.{name}", value, names, depth - 1, versions)


def _tensor(out, label, t, versions=False):
    """A tensor read by name is a constant of the graph, guarded by identity (the graph holds it, so its id is not
    reused), except one that requires grad in grad mode: that is a graph input, looked up on every call and guarded
    by layout with the parameters (`reached.FreeTensors`)."""
    if versions:
        out.append((label, ("tensor", _Same(t), t._version)))
    elif not (t._requires_grad and GradState.enabled):
        out.append((label, ("tensor", id(t))))


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell (a name assigned later)
        return _MISSING
