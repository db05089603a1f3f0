"""The modules a compiled function reaches by name: its bound ``self``, its closure cells, the globals its code names.

``jitorch.compile`` reads their parameters as graph inputs and records their buffer updates functionally, so a
``@compile`` training step over a global ``model`` trains compiled like ``compile(model)``.

>>> import jitorch
>>> net = jitorch.nn.Linear(2, 2)
>>> modules_named_by(lambda x: net(x)) == [net]
True
"""
from __future__ import annotations

from ..nn.modules.module import Module

__all__ = ["modules_named_by"]


def modules_named_by(fn):
    """Modules a function reaches directly: its bound ``self``, its closure cells and the globals its code names
    (through ``__wrapped__`` decorators)."""
    found = [getattr(fn, "__self__", None)]
    func = getattr(fn, "__func__", fn)
    while getattr(func, "__wrapped__", None) is not None:  # decorators (functools.wraps), a compiled function
        func = func.__wrapped__
        found.append(getattr(func, "__self__", None))
        func = getattr(func, "__func__", func)
    code = getattr(func, "__code__", None)
    if code is not None:
        found += [c.cell_contents for c in (func.__closure__ or ()) if _filled(c)]
        names = getattr(func, "__globals__", {})
        found += [names[n] for n in code.co_names if n in names]
    return [m for m in found if isinstance(m, Module)]


def _filled(cell):
    try:
        cell.cell_contents
    except ValueError:  # an empty cell (a name assigned later)
        return False
    return True
