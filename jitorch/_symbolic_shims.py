"""``torch.sym_*``: the size arithmetic helpers that code written for torch.compile's symbolic shapes calls
(``sym_max(a, b)`` where ``max`` would pin a symbol). jitorch's compiler specializes sizes to Python ints, so each
is its plain Python operation, with torch's result types; ``SymInt``/``SymFloat``/``SymBool`` exist for the
``isinstance`` checks such code makes, and no value is ever one.

>>> sym_max(2, 3.0), sym_int(-3.7), sym_ite(False, "a", "b")
(3.0, -3, 'b')
"""
from __future__ import annotations

import builtins
import math

import numpy as np

__all__ = ["SymInt", "SymFloat", "SymBool", "sym_int", "sym_float", "sym_max", "sym_min", "sym_not", "sym_sqrt",
           "sym_sum", "sym_ite", "sym_constrain_range", "sym_constrain_range_for_size"]

_INT64_MAX = 2 ** 63 - 1


class SymInt:
    """A symbolic integer size under torch.compile; jitorch never makes one (sizes are specialized ints)."""


class SymFloat:
    """A symbolic float under torch.compile; jitorch never makes one."""


class SymBool:
    """A symbolic bool under torch.compile; jitorch never makes one."""


def _widened(a, b, pick):
    result = pick(a, b)
    floating = isinstance(a, (float, np.floating)) or isinstance(b, (float, np.floating))
    return builtins.float(result) if floating else result


def sym_max(a, b):
    """``max(a, b)``, a float when either is (as torch's).

    >>> sym_max(2, 3), sym_max(3.0, 2)
    (3, 3.0)
    """
    return _widened(a, b, builtins.max)


def sym_min(a, b):
    """``min(a, b)``, a float when either is (as torch's).

    >>> sym_min(2, 3.0)
    2.0
    """
    return _widened(a, b, builtins.min)


def sym_int(a):
    """``a`` truncated to an int.

    >>> sym_int(3.7)
    3
    """
    return math.trunc(a) if isinstance(a, float) else builtins.int(a)


def sym_float(a):
    """``float(a)``.

    >>> sym_float(3)
    3.0
    """
    return builtins.float(a)


def sym_not(a):
    """``not a``.

    >>> sym_not(True)
    False
    """
    return not a


def sym_sqrt(a):
    """``math.sqrt(a)``.

    >>> sym_sqrt(4)
    2.0
    """
    return math.sqrt(a)


def sym_sum(args):
    """``sum(args)`` (torch's spelling keeps the sum one symbolic node).

    >>> sym_sum([1, 2, 3])
    6
    """
    return builtins.sum(args)


def sym_ite(b, t, f):
    """``t if b else f``.

    >>> sym_ite(True, 1, 2)
    1
    """
    return t if b else f


def sym_constrain_range(size, min=None, max=None):
    """Checks ``min <= size <= max`` (torch's error when not); under torch.compile it also constrains a symbol.

    >>> sym_constrain_range(2, min=0, max=3) is None
    True
    """
    low = -_INT64_MAX - 1 if min is None else min
    high = _INT64_MAX if max is None else max
    if not low <= size <= high:
        raise RuntimeError(f"Invalid value range for {size} between [{low}, {high}].")


def sym_constrain_range_for_size(size, min=None, max=None):
    """As ``sym_constrain_range`` for a value used as a size (at least 0).

    >>> sym_constrain_range_for_size(4, max=10) is None
    True
    """
    sym_constrain_range(size, min=0 if min is None else min, max=max)
