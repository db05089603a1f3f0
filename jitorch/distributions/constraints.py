"""Constraints on distribution parameters and supports (the subset of ``torch.distributions.constraints`` used here)."""
from __future__ import annotations

import jitorch as torch

__all__ = ["Constraint", "boolean", "dependent", "dependent_property", "greater_than", "half_open_interval",
           "independent", "integer_interval", "interval", "is_dependent", "less_than", "lower_cholesky",
           "nonnegative_integer", "positive", "positive_definite", "real", "real_vector", "simplex", "unit_interval"]


class Constraint:
    is_discrete = False
    event_dim = 0

    def check(self, value):
        raise NotImplementedError

    def __repr__(self):
        return self.__class__.__name__[1:] + "()"


class _Dependent(Constraint):
    def __init__(self, *, is_discrete=False, event_dim=0):
        self.is_discrete = is_discrete
        self.event_dim = event_dim

    def __call__(self, *, is_discrete=False, event_dim=0):
        return _Dependent(is_discrete=is_discrete, event_dim=event_dim)

    def check(self, x):
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint):
    return isinstance(constraint, _Dependent)


class _DependentProperty(property, _Dependent):
    def __init__(self, fn=None, *, is_discrete=False, event_dim=0):
        property.__init__(self, fn)
        _Dependent.__init__(self, is_discrete=is_discrete, event_dim=event_dim)

    def __call__(self, fn):
        return _DependentProperty(fn, is_discrete=self.is_discrete, event_dim=self.event_dim)


class _IndependentConstraint(Constraint):
    def __init__(self, base_constraint, reinterpreted_batch_ndims):
        self.base_constraint = base_constraint
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims
        self.is_discrete = base_constraint.is_discrete
        self.event_dim = base_constraint.event_dim + reinterpreted_batch_ndims

    def check(self, value):
        result = self.base_constraint.check(value)
        if result.dim() < self.reinterpreted_batch_ndims:
            expected = self.base_constraint.event_dim + self.reinterpreted_batch_ndims
            raise ValueError(f"Expected value.dim() >= {expected} but got {value.dim()}")
        result = result.reshape(tuple(result.shape[:result.dim() - self.reinterpreted_batch_ndims]) + (-1,))
        return result.all(-1)

    def __repr__(self):
        return f"IndependentConstraint({self.base_constraint!r}, {self.reinterpreted_batch_ndims})"


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        return (value == 0) | (value == 1)


class _IntegerInterval(Constraint):
    is_discrete = True

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        return (value % 1 == 0) & (self.lower_bound <= value) & (value <= self.upper_bound)

    def __repr__(self):
        return f"IntegerInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _IntegerGreaterThan(Constraint):
    is_discrete = True

    def __init__(self, lower_bound):
        self.lower_bound = lower_bound

    def check(self, value):
        return (value % 1 == 0) & (value >= self.lower_bound)

    def __repr__(self):
        return f"IntegerGreaterThan(lower_bound={self.lower_bound})"


class _Real(Constraint):
    def check(self, value):
        return value == value  # False for NaN


class _GreaterThan(Constraint):
    def __init__(self, lower_bound):
        self.lower_bound = lower_bound

    def check(self, value):
        return self.lower_bound < value

    def __repr__(self):
        return f"GreaterThan(lower_bound={self.lower_bound})"


class _LessThan(Constraint):
    def __init__(self, upper_bound):
        self.upper_bound = upper_bound

    def check(self, value):
        return value < self.upper_bound

    def __repr__(self):
        return f"LessThan(upper_bound={self.upper_bound})"


class _Interval(Constraint):
    def __init__(self, lower_bound, upper_bound):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        return (self.lower_bound <= value) & (value <= self.upper_bound)

    def __repr__(self):
        return f"Interval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _HalfOpenInterval(_Interval):
    def check(self, value):
        return (self.lower_bound <= value) & (value < self.upper_bound)

    def __repr__(self):
        return f"HalfOpenInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _Simplex(Constraint):
    event_dim = 1

    def check(self, value):
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _LowerCholesky(Constraint):
    event_dim = 2

    def check(self, value):
        lower = (value.tril() == value).reshape(tuple(value.shape[:-2]) + (-1,)).all(-1)
        positive = (value.diagonal(dim1=-2, dim2=-1) > 0).all(-1)
        return lower & positive


class _PositiveDefinite(Constraint):
    event_dim = 2

    def check(self, value):
        sym = ((value - value.mT).abs() < 1e-6).reshape(tuple(value.shape[:-2]) + (-1,)).all(-1)
        return sym & (torch.linalg.eigvalsh(value) > 0).all(-1)


dependent = _Dependent()
dependent_property = _DependentProperty
independent = _IndependentConstraint
boolean = _Boolean()
nonnegative_integer = _IntegerGreaterThan(0)
integer_interval = _IntegerInterval
real = _Real()
real_vector = independent(real, 1)
positive = _GreaterThan(0.0)
greater_than = _GreaterThan
less_than = _LessThan
unit_interval = _Interval(0.0, 1.0)
interval = _Interval
half_open_interval = _HalfOpenInterval
simplex = _Simplex()
lower_cholesky = _LowerCholesky()
positive_definite = _PositiveDefinite()
