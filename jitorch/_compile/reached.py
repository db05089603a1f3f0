"""The modules a compiled function reaches by name: its bound ``self``, its closure cells, the globals its code names,
and the same for the user's plain functions it names, two calls deep (jitorch's own functions are not followed).

``jitorch.compile`` reads their parameters as graph inputs and records their buffer updates functionally, so a
``@compile`` training step over a global ``model`` trains compiled like ``compile(model)``. Tensors that require grad
reached the same way (``w = torch.randn(3, 3, requires_grad=True)`` used inside the function) are held by a
`FreeTensors` module as its parameters, so they are graph inputs that get gradients too. Everything is looked up
again on every call, so a tensor rebound between calls (``w = (w - lr * w.grad).requires_grad_()``) is the new one.

>>> import jitorch
>>> net = jitorch.nn.Linear(2, 2)
>>> modules_named_by(lambda x: net(x)) == [net]
True
>>> w = jitorch.ones(2, requires_grad=True)
>>> [t is w for t in tensors_named_by(lambda x: x * w)]
[True]
"""
from __future__ import annotations

from types import FunctionType as _FunctionType

from .._tensor import Tensor
from ..nn.modules.module import Module

__all__ = ["reached_by", "modules_named_by", "tensors_named_by", "functions_reached", "FreeTensors", "NamedObjects"]


class FreeTensors(Module):
    """Tensors that require grad, reached by a compiled function by name, held as this module's parameters: the
    compiled training graph takes them as inputs and hands back their gradients, as for a module's parameters.
    Plain tensors, not `Parameter` s, and possibly results of other ops: they are placed in the table directly."""

    def __init__(self, tensors, by_name=0):
        super().__init__()
        # The first ``by_name`` were found by name this call (a global ``w``, a closure cell) and are looked up again
        # on every call; a training entry guards every parameter by shape, dtype, device and strides (guards.py),
        # so ``w = (w - lr * w.grad).requires_grad_()`` keeps the compiled entry.
        for i, t in enumerate(tensors):
            self._parameters[f"tensor{i}"] = t


def reached_by(fn, named=None):
    """``(modules, tensors that require grad)`` a function reaches by name (see `modules_named_by`): one walk, each
    object once, in order. ``named``: what a `NamedObjects` of ``fn`` read for this call."""
    modules, tensors, seen = [], [], set()
    for obj in _named(fn) if named is None else named:
        # A small container's entries count as named: ``params["w"]`` is looked up again on every call too.
        entries = _entries(obj)
        for item in [obj] if entries is None else [obj, *entries]:
            if id(item) in seen:
                continue
            seen.add(id(item))
            if isinstance(item, Module):
                modules.append(item)
            elif isinstance(item, Tensor) and item.requires_grad:
                tensors.append(item)
    return modules, tensors


_MAX_ENTRIES = 64


def _entries(obj):
    """The values of a dict, list or tuple of at most `_MAX_ENTRIES` entries, else None."""
    if type(obj) in (dict, list, tuple) and len(obj) <= _MAX_ENTRIES:
        return list(obj.values()) if type(obj) is dict else list(obj)
    return None


def tensors_named_by(fn):
    """Tensors that require grad among what a function reaches by name (see `modules_named_by`)."""
    return reached_by(fn)[1]


def modules_named_by(fn):
    """Modules a function reaches directly: its bound ``self``, its closure cells and the globals its code names
    (through ``__wrapped__`` decorators)."""
    return reached_by(fn)[0]


_HELPER_DEPTH = 2  # plain functions followed below the compiled one (``loss_fn`` -> ``mlp`` -> ``layer``)
_LIBRARY = __name__.split(".")[0] + "."


def functions_reached(fn):
    """``[(function, bound selves, objects it names)]`` for a function and the user's plain functions it names, a few
    calls deep, depth first: ``function`` unwrapped from bound methods and ``__wrapped__`` decorators (None when
    there is no Python code, a module say), and the objects its code reaches directly: its closure cells' contents
    and the globals it names.

    >>> scale = 2.0
    >>> [(f.__name__, named) for f, _, named in functions_reached(lambda x: x * scale)]
    [('<lambda>', [2.0])]
    """
    return [(func, selves, named) for func, selves, named, _ in _walk(fn)]


def _walk(fn):
    """`functions_reached` with each function's depth (the compiled one at 0)."""
    out, seen = [], set()

    def visit(f, depth):
        if id(f) in seen:
            return
        seen.add(id(f))
        selves = [getattr(f, "__self__", None)]
        func = getattr(f, "__func__", f)
        while getattr(func, "__wrapped__", None) is not None:  # decorators (functools.wraps), a compiled function
            func = func.__wrapped__
            selves.append(getattr(func, "__self__", None))
            func = getattr(func, "__func__", func)
        code = getattr(func, "__code__", None)
        named = []
        if code is not None:
            named += [c.cell_contents for c in (func.__closure__ or ()) if _filled(c)]
            names = getattr(func, "__globals__", {})
            named += [names[n] for n in code.co_names if n in names]
        out.append((func if code is not None else None, selves, named, depth))
        if depth < _HELPER_DEPTH:
            for obj in named:
                if isinstance(obj, _FunctionType) and not (obj.__module__ or "").startswith(_LIBRARY):
                    visit(obj, depth + 1)

    visit(fn, 0)
    return out


def _named(fn):
    """Every object a function reaches directly (see `modules_named_by`), and what the user's plain functions it
    names reach, a few calls deep: a helper's global ``w`` is looked up by name on every call too."""
    return [obj for _, selves, named in functions_reached(fn) for obj in (*selves, *named)]


def _filled(cell):
    try:
        cell.cell_contents
    except ValueError:  # an empty cell (a name assigned later)
        return False
    return True


class NamedObjects:
    """`_named` for every call of one compiled function: the walk of its code (which cells and global names it and
    its helpers read) is done once, and redone only when a helper it followed is rebound; a call only reads the
    current objects under those names (~1 us against ~3 us for a fresh walk of a one-line function).

    >>> scale = 2.0
    >>> NamedObjects(lambda x: x * scale).read()
    [None, 2.0]
    """

    def __init__(self, fn):
        self.fn = fn
        self._plan = None  # [(selves, cells, globals dict, names, follows)] in `functions_reached` order
        self._followed = None  # the helpers the walk followed, in order (held: an id could be reused)

    def _build(self):
        self._plan = [(selves, func.__closure__ or (), func.__globals__, func.__code__.co_names,
                       depth < _HELPER_DEPTH) if func is not None else (selves, (), {}, (), False)
                      for func, selves, _, depth in _walk(self.fn)]
        self._followed = self._read()[1]

    def _read(self):
        out, followed = [], []
        for selves, cells, scope, names, follows in self._plan:
            start = len(out) + len(selves)
            out += selves
            for cell in cells:
                try:
                    out.append(cell.cell_contents)
                except ValueError:  # an empty cell (a name assigned later)
                    pass
            out += [scope[n] for n in names if n in scope]
            if follows:
                followed += [o for o in out[start:] if isinstance(o, _FunctionType)
                             and not (o.__module__ or "").startswith(_LIBRARY)]
        return out, followed

    def read(self):
        """The objects the function reaches by name now, as `_named` lists them."""
        if self._plan is None:
            self._build()
        out, followed = self._read()
        if followed != self._followed:  # a helper was rebound, defined or removed: walk the code again
            self._build()
            out = self._read()[0]
        return out

