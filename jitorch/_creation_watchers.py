"""Tensor creation reported while a trace runs: what a traced call made itself (see ``jitorch/fx/_created.py``).

Each creation function of ``_creation.py``, ``_creation_filled.py`` and ``_ranges.py`` ends with
``noted(...) if WATCHERS else t``: outside a trace, one test of an empty list.
"""
from __future__ import annotations

import threading

__all__ = ["WATCHERS", "noted"]

# (thread id, callback) of each `jitorch.fx._created.watching_creation` block running now. Empty outside traces, so
# a creation function pays one test of it; mutated in place, never rebound (the creation modules hold it).
WATCHERS: list = []


def noted(name, made, args, **kwargs):
    """``made`` after reporting it to this thread's `WATCHERS` as ``callback(name, args, kwargs, made)``, ``name``
    being the creation function that made it from ``args`` and ``kwargs`` (those not at their defaults).

    Each creation function calls this where it returns, while `WATCHERS` is not empty: a tensor counts as made by a
    traced call however the code reached the function (``jitorch.zeros`` or ``_creation.zeros``). One made by a
    creation function calling another (``zeros_like``: ``zeros``) is reported by both, the outer one last.

    >>> import jitorch
    >>> seen = []
    >>> WATCHERS.append((threading.get_ident(), lambda name, args, kwargs, made: seen.append((name, args, kwargs))))
    >>> _ = jitorch._creation.zeros(2, dtype=jitorch.int64)
    >>> WATCHERS.clear(); seen
    [('zeros', (2,), {'dtype': jitorch.int64})]
    """
    owner = threading.get_ident()
    kwargs = {k: v for k, v in kwargs.items() if v is not None and v is not False}
    for thread, report in list(WATCHERS):
        if thread == owner:
            report(name, args, kwargs, made)
    return made
