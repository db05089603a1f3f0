"""Which tensors a traced call made itself: ``jitorch.zeros`` and the other creation functions note theirs.

A tracer that captures such a tensor as a constant must not let the call's in-place writes change that constant
(``m = jitorch.zeros(2); m.add_(1)`` would add 1 again on every run of the graph), while a tensor from outside
(a global the function updates) is the function's real side effect.

>>> import jitorch
>>> seen = {}
>>> with noting_created(seen):
...     m = jitorch.zeros(2)
>>> id(m) in seen
True
"""
from __future__ import annotations

import contextlib
import sys
import threading

from .. import _creation_watchers

__all__ = ["watching_creation", "noting_created", "CREATION"]

# The creation functions that report what they make (`jitorch._creation_watchers.noted`).
CREATION = ("zeros", "ones", "full", "empty", "arange", "eye", "linspace", "zeros_like", "ones_like", "empty_like",
            "full_like", "tensor")


@contextlib.contextmanager
def watching_creation(made):
    """Within the block, each tensor ``zeros`` or another of `CREATION` makes on this thread is reported as
    ``made(name, fn, args, kwargs, tensor)``, ``fn`` being the public function (``jitorch.zeros``), however the
    code reached it (library code calls ``jitorch._creation.zeros``). A tensor made into an ``out=`` is not reported,
    only the result written there."""
    module = sys.modules["jitorch"]
    watcher = (threading.get_ident(), lambda name, args, kwargs, out: made(name, getattr(module, name), args, kwargs,
                                                                           out))
    _creation_watchers.WATCHERS.append(watcher)
    try:
        yield
    finally:
        _creation_watchers.WATCHERS.remove(watcher)


def noting_created(created):
    """Within the block, the tensors the creation functions make on this thread are noted in the dict ``created``
    (id -> tensor: kept alive so that ids stay unique)."""
    return watching_creation(lambda name, fn, args, kwargs, out: created.__setitem__(id(out), out))
