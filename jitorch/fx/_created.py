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

from .._tensor import Tensor

__all__ = ["watching_creation", "noting_created", "CREATION"]

CREATION = ("zeros", "ones", "full", "empty", "arange", "eye", "linspace", "zeros_like", "ones_like", "empty_like",
            "full_like", "tensor")


@contextlib.contextmanager
def watching_creation(made):
    """Within the block, each tensor ``jitorch.zeros`` or another of `CREATION` makes on this thread (not into an
    ``out=``) is reported as ``made(name, fn, args, kwargs, tensor)``, ``fn`` being the unwatched function."""
    module, owner = sys.modules["jitorch"], threading.get_ident()
    originals = {name: getattr(module, name) for name in CREATION}

    def watched(name, fn):
        def make(*args, **kwargs):
            out = fn(*args, **kwargs)
            if isinstance(out, Tensor) and threading.get_ident() == owner and kwargs.get("out") is None:
                made(name, fn, args, kwargs, out)
            return out
        make.__name__ = fn.__name__
        return make

    for name, fn in originals.items():
        setattr(module, name, watched(name, fn))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(module, name, fn)


def noting_created(created):
    """Within the block, the tensors the creation functions make on this thread are noted in the dict ``created``
    (id -> tensor: kept alive so that ids stay unique)."""
    return watching_creation(lambda name, fn, args, kwargs, out: created.__setitem__(id(out), out))
