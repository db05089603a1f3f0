"""Argument and sample validation of the common constraints on NumPy arrays: the answer of
``bool(constraint.check(value).all())`` without a dispatched op per comparison.

Validation runs on every construction and every ``log_prob`` (``validate_args`` defaults to on, as torch's), and a
check is three to six ops on small tensors: dispatching them cost more than the distribution's own math. Here the
same comparisons run on the value's array, for plain CPU tensors of the dtypes whose comparisons NumPy makes as ATen
does (float32/float64 and the integers), constraints of the exact built-in classes and bounds that are Python
numbers; anything else answers ``None`` and the caller runs ``constraint.check`` as before.

>>> import jitorch
>>> from jitorch.distributions import constraints
>>> all_satisfied(constraints.simplex, jitorch.tensor([0.25, 0.75])), all_satisfied(constraints.positive,
...                                                                                   jitorch.tensor([0.0]))
(True, False)
"""
from __future__ import annotations

import numpy as np

from .._tensor import Tensor
from ..ops.reduction import SUM
from . import constraints as C
from ._math_backends import plain_host_array

__all__ = ["all_satisfied"]

_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8))


def _plain_array(value):
    """The NumPy array of a plain CPU tensor of a handled dtype, outside any tracing mode; else None."""
    a = plain_host_array(value)
    return a if a is not None and a.dtype in _DTYPES else None


def _number(bound, a):
    """``bound`` where comparing it with ``a`` in NumPy is the comparison torch makes: a Python int within an integer
    array's range, a Python int or float against a float array (cast to its dtype in both). Else None: a float
    bound promotes an integer tensor to the default dtype in torch, to float64 in NumPy; a NumPy scalar promotes."""
    if type(bound) is int:
        if a.dtype.kind == "f":
            return bound
        info = np.iinfo(a.dtype)
        return bound if info.min <= bound <= info.max else None
    if type(bound) is float and a.dtype.kind == "f":
        return bound
    return None


def _is_integral(a):
    # ``value % 1 == 0``: ATen's remainder is ``x - floor(x)`` for a divisor of 1, 0 exactly at the finite integers.
    return a.dtype.kind != "f" or bool((np.isfinite(a) & (np.floor(a) == a)).all())


def _within(a, lower, upper, upper_open=False):
    """``lower <= a`` and ``a <= upper`` (``<`` if ``upper_open``) everywhere; a None bound is not checked. By the
    extremes, no mask: a NaN extreme fails every comparison, as a NaN entry fails them in torch's check."""
    if a.size == 0:
        return True
    if lower is not None and not lower <= a.min():
        return False
    if upper is None:
        return True
    top = a.max()
    return bool(top < upper) if upper_open else bool(top <= upper)


def _all_elementwise(constraint, a):
    """Whether an event_dim-0 constraint holds at every entry of ``a``, or None where it is not handled here."""
    kind = type(constraint)
    if kind is C._Real:
        return a.dtype.kind != "f" or not bool(np.isnan(a).any())
    if kind is C._Boolean:
        return bool(((a == 0) | (a == 1)).all())
    bounds = [getattr(constraint, name) for name in getattr(kind, "_names", ())]
    numbers = [_number(b, a) for b in bounds]
    if any(n is None for n in numbers):
        return None
    if kind is C._GreaterThan:
        return a.size == 0 or bool(numbers[0] < a.min())
    if kind is C._GreaterThanEq:
        return _within(a, numbers[0], None)
    if kind is C._LessThan:
        return a.size == 0 or bool(a.max() < numbers[0])
    if kind is C._Interval:
        return _within(a, *numbers)
    if kind is C._HalfOpenInterval:
        return _within(a, *numbers, upper_open=True)
    if kind is C._IntegerInterval:
        return _is_integral(a) and _within(a, *numbers)
    if kind is C._IntegerGreaterThan:
        return _is_integral(a) and _within(a, numbers[0], None)
    if kind is C._IntegerLessThan:
        return _is_integral(a) and _within(a, None, numbers[0])
    return None


def _all(constraint, a):
    """``constraint.check`` all-reduced on the array ``a``, or None where this module does not know the constraint
    (or the check would raise: the caller's ``check`` then raises torch's error)."""
    kind = type(constraint)
    if kind is C._IndependentConstraint:
        base = constraint.base_constraint
        if type(base) is C._IndependentConstraint or a.ndim - base.event_dim < constraint.reinterpreted_batch_ndims:
            return None
        return _all(base, a)
    if kind is C._Simplex:
        if a.ndim == 0 or a.dtype.kind != "f":
            return None
        total = SUM.kernel(np, a, (a.ndim - 1,), False, a.dtype)
        return bool((a >= 0).all()) and bool((np.abs(total - 1) < 1e-6).all())
    if kind is C._OneHot:
        if a.ndim == 0:
            return None
        # Entries of 0 and 1 sum exactly in any order; otherwise the first test already fails.
        return bool(((a == 0) | (a == 1)).all()) and bool((a.sum(-1) == 1).all())
    if kind is C._LowerCholesky:
        if a.ndim < 2:
            return None
        return bool((np.tril(a) == a).all()) and bool((np.diagonal(a, axis1=-2, axis2=-1) > 0).all())
    if kind is C._LowerTriangular:
        if a.ndim < 2:
            return None
        return bool((np.tril(a) == a).all())
    return _all_elementwise(constraint, a)


def all_satisfied(constraint, value):
    """``bool(constraint.check(value).all())`` computed on ``value``'s array, or ``None`` where it is not handled
    here (the caller then runs ``constraint.check``)."""
    a = _plain_array(value) if isinstance(value, Tensor) else None
    if a is None:
        return None
    with np.errstate(invalid="ignore"):
        return _all(constraint, a)
