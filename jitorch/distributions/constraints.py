"""Constraints on distribution parameters and supports: ``torch.distributions.constraints``.

A constraint's ``check(value)`` returns a bool tensor over the batch dims (the rightmost ``event_dim`` dims are
reduced); ``biject_to``/``transform_to`` (``constraint_registry.py``) map each constraint type to a transform.
"""
from __future__ import annotations

import jitorch as torch

from .utils import _delegated

__all__ = ["Constraint", "boolean", "cat", "corr_cholesky", "dependent", "dependent_property", "greater_than",
           "greater_than_eq", "independent", "integer_interval", "interval", "half_open_interval", "is_dependent",
           "less_than", "lower_cholesky", "lower_triangular", "MixtureSameFamilyConstraint", "multinomial",
           "nonnegative", "nonnegative_integer", "one_hot", "positive", "positive_semidefinite", "positive_definite",
           "positive_integer", "real", "real_vector", "simplex", "square", "stack", "symmetric", "unit_interval"]


class Constraint:
    is_discrete = False
    event_dim = 0

    def check(self, value):
        raise NotImplementedError

    def __repr__(self):
        return self.__class__.__name__[1:] + "()"


def _flat_all(value, keep):
    """``value.all()`` over every dim after the first ``keep`` (the event dims of a matrix constraint)."""
    return value.reshape(tuple(value.shape[:keep]) + (-1,)).all(-1)


class _Dependent(Constraint):
    """A placeholder whose value depends on other parameters (``Uniform.support`` on ``low``/``high``); validation
    skips it. ``is_discrete``/``event_dim`` may be left unknown (NotImplemented), as torch's."""

    def __init__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        self._is_discrete = is_discrete
        self._event_dim = event_dim

    @property
    def is_discrete(self):
        if self._is_discrete is NotImplemented:
            raise NotImplementedError(".is_discrete cannot be determined statically")
        return self._is_discrete

    @property
    def event_dim(self):
        if self._event_dim is NotImplemented:
            raise NotImplementedError(".event_dim cannot be determined statically")
        return self._event_dim

    def __call__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        if is_discrete is NotImplemented:
            is_discrete = self._is_discrete
        if event_dim is NotImplemented:
            event_dim = self._event_dim
        return _Dependent(is_discrete=is_discrete, event_dim=event_dim)

    def check(self, x):
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint):
    return isinstance(constraint, _Dependent)


class _DependentProperty(property, _Dependent):
    """``@constraints.dependent_property``: a property on the instance, a dependent constraint on the class."""

    def __init__(self, fn=None, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        property.__init__(self, fn)
        self._is_discrete = is_discrete
        self._event_dim = event_dim

    def __call__(self, fn):
        return _DependentProperty(fn, is_discrete=self._is_discrete, event_dim=self._event_dim)


def _checked_base(base_constraint):
    """The constraint that an independent or mixture constraint wraps (and whose ``is_discrete`` is theirs)."""
    if not isinstance(base_constraint, Constraint):
        raise AssertionError(f"base_constraint must be a Constraint, got {type(base_constraint).__name__}")
    return base_constraint


class _IndependentConstraint(Constraint):
    def __init__(self, base_constraint, reinterpreted_batch_ndims):
        self.base_constraint = _checked_base(base_constraint)
        if not isinstance(reinterpreted_batch_ndims, int) or reinterpreted_batch_ndims < 0:
            raise AssertionError(f"reinterpreted_batch_ndims must be an int >= 0, got {reinterpreted_batch_ndims!r}")
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims

    is_discrete = _delegated("base_constraint", "is_discrete")

    @property
    def event_dim(self):
        return self.base_constraint.event_dim + self.reinterpreted_batch_ndims

    def check(self, value):
        result = self.base_constraint.check(value)
        if result.dim() < self.reinterpreted_batch_ndims:
            expected = self.base_constraint.event_dim + self.reinterpreted_batch_ndims
            raise ValueError(f"Expected value.dim() >= {expected} but got {value.dim()}")
        return _flat_all(result, result.dim() - self.reinterpreted_batch_ndims)

    def __repr__(self):
        return f"{self.__class__.__name__[1:]}({self.base_constraint!r}, {self.reinterpreted_batch_ndims})"


class MixtureSameFamilyConstraint(Constraint):
    """The support of a mixture: the component support checked with the value broadcast over the components."""

    def __init__(self, base_constraint):
        self.base_constraint = _checked_base(base_constraint)

    is_discrete = _delegated("base_constraint", "is_discrete")
    event_dim = _delegated("base_constraint", "event_dim")

    def check(self, value):
        result = self.base_constraint.check(value.unsqueeze(-1 - self.event_dim))
        if value.dim() < self.event_dim:
            raise ValueError(f"Expected value.dim() >= {self.event_dim} but got {value.dim()}")
        return _flat_all(result, value.dim() - self.event_dim)

    def __repr__(self):
        return f"{self.__class__.__name__}({self.base_constraint!r})"


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        return (value == 0) | (value == 1)


class _OneHot(Constraint):
    is_discrete = True
    event_dim = 1

    def check(self, value):
        is_boolean = (value == 0) | (value == 1)
        return is_boolean.all(-1) & value.sum(-1).eq(1)


class _Bounds(Constraint):
    """A constraint with bounds, printed as torch prints them: ``Name(lower_bound=..., upper_bound=...)``."""

    _names = ()

    def __init__(self, *bounds):
        for name, bound in zip(self._names, bounds):
            setattr(self, name, bound)

    def __repr__(self):
        args = ", ".join(f"{name}={getattr(self, name)}" for name in self._names)
        return f"{self.__class__.__name__[1:]}({args})"


class _IntegerInterval(_Bounds):
    is_discrete = True
    _names = ("lower_bound", "upper_bound")

    def check(self, value):
        return (value % 1 == 0) & (self.lower_bound <= value) & (value <= self.upper_bound)


class _IntegerLessThan(_Bounds):
    is_discrete = True
    _names = ("upper_bound",)

    def check(self, value):
        return (value % 1 == 0) & (value <= self.upper_bound)


class _IntegerGreaterThan(_Bounds):
    is_discrete = True
    _names = ("lower_bound",)

    def check(self, value):
        return (value % 1 == 0) & (value >= self.lower_bound)


class _Real(Constraint):
    def check(self, value):
        return value == value  # False for NaN


class _GreaterThan(_Bounds):
    _names = ("lower_bound",)

    def check(self, value):
        return self.lower_bound < value


class _GreaterThanEq(_Bounds):
    _names = ("lower_bound",)

    def check(self, value):
        return self.lower_bound <= value


class _LessThan(_Bounds):
    _names = ("upper_bound",)

    def check(self, value):
        return value < self.upper_bound


class _Interval(_Bounds):
    _names = ("lower_bound", "upper_bound")

    def check(self, value):
        return (self.lower_bound <= value) & (value <= self.upper_bound)


class _HalfOpenInterval(_Bounds):
    _names = ("lower_bound", "upper_bound")

    def check(self, value):
        return (self.lower_bound <= value) & (value < self.upper_bound)


class _Simplex(Constraint):
    event_dim = 1

    def check(self, value):
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _Multinomial(Constraint):
    """Non-negative counts summing to at most ``upper_bound`` (torch does not check integrality either)."""

    is_discrete = True
    event_dim = 1

    def __init__(self, upper_bound):
        self.upper_bound = upper_bound

    def check(self, x):
        return (x >= 0).all(-1) & (x.sum(-1) <= self.upper_bound)


class _LowerTriangular(Constraint):
    event_dim = 2

    def check(self, value):
        return _flat_all(value.tril() == value, value.dim() - 2)


class _LowerCholesky(Constraint):
    event_dim = 2

    def check(self, value):
        lower = _flat_all(value.tril() == value, value.dim() - 2)
        return lower & (value.diagonal(dim1=-2, dim2=-1) > 0).all(-1)


class _CorrCholesky(Constraint):
    event_dim = 2

    def check(self, value):
        tol = torch.finfo(value.dtype).eps * value.size(-1) * 10  # 10 ulps per summed square
        row_norm = torch.linalg.norm(value.detach(), dim=-1)
        unit_row_norm = (row_norm - 1.0).abs().le(tol).all(-1)
        return _LowerCholesky().check(value) & unit_row_norm


class _Square(Constraint):
    event_dim = 2

    def check(self, value):
        return torch.full(tuple(value.shape[:-2]), value.shape[-2] == value.shape[-1], dtype=torch.bool,
                          device=value.device)


def _refined(coarse, fine):
    """Each matrix constraint checks its parent's first: ``coarse`` where it fails anywhere (``fine`` may not apply
    then, an eigendecomposition of a non-square matrix), else ``fine()``, as torch."""
    return coarse if not bool(coarse.all()) else fine()


def _per_distinct_matrix(check, value):
    """``check(value)`` once per distinct matrix: stride-0 batch dims (a covariance expanded over a batch of means)
    are narrowed to one matrix and the answer expanded back: the same answer from far fewer factorizations."""
    strides = value.stride()[:-2] if value.dim() > 2 else ()
    if 0 not in strides or any(n == 0 for n in value.shape):
        return check(value)
    batch = tuple(value.shape[:-2])
    for dim, stride in enumerate(strides):
        if stride == 0:
            value = value.narrow(dim, 0, 1)
    return check(value).expand(batch)


class _Symmetric(_Square):
    def check(self, value):
        return _refined(super().check(value), lambda: _per_distinct_matrix(
            lambda v: torch.isclose(v, v.mT, atol=1e-6).all(-2).all(-1), value))


class _PositiveSemidefinite(_Symmetric):
    def check(self, value):
        return _refined(super().check(value), lambda: _per_distinct_matrix(
            lambda v: torch.linalg.eigvalsh(v).ge(0).all(-1), value))


class _PositiveDefinite(_Symmetric):
    def check(self, value):
        # torch's test: the Cholesky factorization succeeds (info == 0).
        return _refined(super().check(value), lambda: _per_distinct_matrix(
            lambda v: torch.linalg.cholesky_ex(v).info.eq(0), value))


def _checked_parts(cseq):
    """``cseq``, checked to hold constraints, as a list: the parts of a cat or stack constraint."""
    if not all(isinstance(c, Constraint) for c in cseq):
        raise AssertionError("All elements of cseq must be Constraint instances")
    return list(cseq)


def _any_discrete(self):
    """A cat or stack constraint is discrete where any of its parts is."""
    return any(c.is_discrete for c in self.cseq)


class _Cat(Constraint):
    """Constraints applied to consecutive slices of ``lengths`` along ``dim``."""

    is_discrete = property(_any_discrete)

    def __init__(self, cseq, dim=0, lengths=None):
        self.cseq = _checked_parts(cseq)
        self.lengths = list([1] * len(self.cseq) if lengths is None else lengths)
        if len(self.lengths) != len(self.cseq):
            raise AssertionError(f"lengths ({len(self.lengths)}) must match cseq ({len(self.cseq)})")
        self.dim = dim

    @property
    def event_dim(self):
        return max(c.event_dim for c in self.cseq)

    def check(self, value):
        checks, start = [], 0
        for constr, length in zip(self.cseq, self.lengths):
            checks.append(constr.check(value.narrow(self.dim, start, length)))
            start += length
        return torch.cat(checks, self.dim)


class _Stack(Constraint):
    """One constraint per index of ``dim``."""

    is_discrete = property(_any_discrete)

    def __init__(self, cseq, dim=0):
        self.cseq = _checked_parts(cseq)
        self.dim = dim

    @property
    def event_dim(self):
        dim = max(c.event_dim for c in self.cseq)
        return dim + 1 if self.dim + dim < 0 else dim

    def check(self, value):
        parts = [value.select(self.dim, i) for i in range(value.size(self.dim))]
        return torch.stack([c.check(v) for v, c in zip(parts, self.cseq)], self.dim)


dependent = _Dependent()
dependent_property = _DependentProperty
independent = _IndependentConstraint
boolean = _Boolean()
one_hot = _OneHot()
nonnegative_integer = _IntegerGreaterThan(0)
positive_integer = _IntegerGreaterThan(1)
integer_interval = _IntegerInterval
real = _Real()
real_vector = independent(real, 1)
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
greater_than = _GreaterThan
greater_than_eq = _GreaterThanEq
less_than = _LessThan
multinomial = _Multinomial
unit_interval = _Interval(0.0, 1.0)
interval = _Interval
half_open_interval = _HalfOpenInterval
simplex = _Simplex()
lower_triangular = _LowerTriangular()
lower_cholesky = _LowerCholesky()
corr_cholesky = _CorrCholesky()
square = _Square()
symmetric = _Symmetric()
positive_semidefinite = _PositiveSemidefinite()
positive_definite = _PositiveDefinite()
cat = _Cat
stack = _Stack
