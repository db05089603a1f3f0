"""Temporary attribute changes on modules and namespaces, as torch's ``config.patch`` and ``backends.*.flags`` make
them: set for a block or a decorated call, then put back exactly what was there before.

>>> import types
>>> ns = types.SimpleNamespace(a=1)
>>> with AttrPatch([(ns, "a", 2), (ns, "b", 3)]):
...     ns.a, ns.b
(2, 3)
>>> ns.a, hasattr(ns, "b")
(1, False)
"""
from __future__ import annotations

import contextlib

__all__ = ["AttrPatch"]

_UNSET = object()


class AttrPatch(contextlib.ContextDecorator):
    """Set ``(owner, name, value)`` triples on entry; on exit (exception or not) restore each previous value, and delete
    again a name the owner's ``__dict__`` did not hold (so a flag read through a module ``__getattr__`` default stays
    unset). Usable as a context manager and as a decorator; entries nest, each restoring its own prior values.

    >>> import types
    >>> ns = types.SimpleNamespace(x=0)
    >>> @AttrPatch([(ns, "x", 5)])
    ... def read():
    ...     return ns.x
    >>> read(), ns.x
    (5, 0)
    """

    def __init__(self, changes):
        self.changes = list(changes)
        # A stack, not one slot: a decorated function may call itself.
        self._priors = []

    def __enter__(self):
        self._priors.append([(owner, name, vars(owner).get(name, _UNSET)) for owner, name, _ in self.changes])
        for owner, name, value in self.changes:
            setattr(owner, name, value)
        return self

    def __exit__(self, *exc):
        for owner, name, value in reversed(self._priors.pop()):
            if value is not _UNSET:
                setattr(owner, name, value)
            elif name in vars(owner):
                delattr(owner, name)
        return False
