"""``Distribution``: the base class with PyTorch's shapes, argument validation and sampling protocol."""
from __future__ import annotations

import warnings

import jitorch as torch

from . import constraints
from ._fast_checks import all_satisfied
from .utils import lazy_property

__all__ = ["Distribution"]


def _satisfied(constraint, value):
    """``bool(constraint.check(value).all())``, on the value's array where ``_fast_checks`` knows the constraint."""
    answer = all_satisfied(constraint, value)
    return bool(constraint.check(value).all()) if answer is None else answer


class Distribution:
    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value):
        if value not in (True, False):
            raise ValueError
        Distribution._validate_args = value

    def __init__(self, batch_shape=torch.Size(), event_shape=torch.Size(), validate_args=None):
        self._batch_shape = torch.Size(batch_shape)
        self._event_shape = torch.Size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            try:
                arg_constraints = self.arg_constraints
            except NotImplementedError:
                arg_constraints = {}
                warnings.warn(f"{self.__class__} does not define `arg_constraints`. Please set "
                              "`arg_constraints = {}` or initialize the distribution with `validate_args=False` to "
                              "turn off validation.", stacklevel=2)
            for param, constraint in arg_constraints.items():
                if constraints.is_dependent(constraint):
                    continue
                if param not in self.__dict__ and isinstance(getattr(type(self), param, None), lazy_property):
                    continue  # the other parametrization was given
                value = getattr(self, param)
                if not _satisfied(constraint, value):
                    raise ValueError(
                        f"Expected parameter {param} ({type(value).__name__} of shape {tuple(value.shape)}) "
                        f"of distribution {self!r} to satisfy the constraint {constraint!r}, "
                        f"but found invalid values:\n{value}")

    # A family lists in ``_batch_params`` its attributes that carry the batch dims first (tensors, or distributions it
    # is built on) and in ``_shared_attrs`` those without batch dims; ``expand`` then follows from them, where torch
    # spells it out per family. ``_batch_params`` has no default here: the class declaring it is the family that
    # ``expand`` rebuilds, so a subclass with its own ``__init__`` must still write its ``expand``, as in torch
    # (``_get_checked_instance``).
    _shared_attrs = ()

    def expand(self, batch_shape, _instance=None):
        """A ``batch_shape`` view of ``self``: each held batch parameter broadcast, keeping its dims right of the batch
        dims (an event dim, a categorical's events), no argument validation (the parameters were checked)."""
        owner = next((cls for cls in type(self).__mro__ if "_batch_params" in vars(cls)), None)
        if owner is None:
            raise NotImplementedError
        new = self._get_checked_instance(owner, _instance)
        batch_shape = torch.Size(batch_shape)
        ndims = len(self._batch_shape)
        for name in owner._batch_params:
            if name in self.__dict__:  # of ``probs`` and ``logits``, the given one (and the other once computed)
                value = self.__dict__[name]
                rest = value.batch_shape[ndims:] if isinstance(value, Distribution) else value.shape[ndims:]
                setattr(new, name, value.expand(batch_shape + tuple(rest)))
        for name in owner._shared_attrs:
            setattr(new, name, getattr(self, name))
        super(owner, new).__init__(batch_shape, self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def batch_shape(self):
        return self._batch_shape

    @property
    def event_shape(self):
        return self._event_shape

    @property
    def arg_constraints(self):
        raise NotImplementedError

    @property
    def support(self):
        raise NotImplementedError

    @property
    def mean(self):
        raise NotImplementedError(f"{self.__class__} does not implement mean")

    @property
    def mode(self):
        raise NotImplementedError(f"{self.__class__} does not implement mode")

    @property
    def variance(self):
        raise NotImplementedError(f"{self.__class__} does not implement variance")

    @property
    def stddev(self):
        return self.variance.sqrt()

    def sample(self, sample_shape=torch.Size()):
        with torch.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=torch.Size()):
        raise NotImplementedError

    def sample_n(self, n):
        return self.sample(torch.Size((n,)))

    def log_prob(self, value):
        raise NotImplementedError

    def cdf(self, value):
        raise NotImplementedError

    def icdf(self, value):
        raise NotImplementedError

    def enumerate_support(self, expand=True):
        raise NotImplementedError

    def entropy(self):
        raise NotImplementedError

    def _enumerated(self, values, expand):
        """``values``, the support listed along dim 0 (each an event), with the batch dims inserted after that dim:
        of size 1, or, ``expand``, of the batch shape (``enumerate_support``'s layout)."""
        n, event = values.shape[0], tuple(values.shape[1:])
        values = values.view((n,) + (1,) * len(self._batch_shape) + event)
        if expand:
            values = values.expand((n,) + tuple(self._batch_shape) + event)
        return values

    def perplexity(self):
        return torch.exp(self.entropy())

    def _extended_shape(self, sample_shape=torch.Size()):
        if not isinstance(sample_shape, torch.Size):
            sample_shape = torch.Size(sample_shape)
        return torch.Size(tuple(sample_shape) + tuple(self._batch_shape) + tuple(self._event_shape))

    def _validate_sample(self, value):
        if not torch.is_tensor(value):
            raise ValueError("The value argument to log_prob must be a Tensor")
        event_dim_start = len(value.size()) - len(self._event_shape)
        if tuple(value.size()[event_dim_start:]) != tuple(self._event_shape):
            raise ValueError(f"The right-most size of value must match event_shape: {value.size()} vs "
                             f"{self._event_shape}.")
        actual_shape = value.size()
        expected_shape = self._batch_shape + self._event_shape
        for i, j in zip(reversed(actual_shape), reversed(expected_shape)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(f"Value is not broadcastable with batch_shape+event_shape: {actual_shape} vs "
                                 f"{expected_shape}.")
        try:
            support = self.support
        except NotImplementedError:
            warnings.warn(f"{self.__class__} does not define `support` to enable sample validation. Please initialize "
                          "the distribution with `validate_args=False` to turn off validation.", stacklevel=2)
            return
        if not _satisfied(support, value):
            raise ValueError(
                f"Expected value argument ({type(value).__name__} of shape {tuple(value.shape)}) to be within the "
                f"support ({support!r}) of the distribution {self!r}, but found invalid values:\n{value}")

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(f"Subclass {self.__class__.__name__} of {cls.__name__} that defines a custom "
                                      "__init__() method must also define a custom .expand() method.")
        return self.__new__(type(self)) if _instance is None else _instance

    def __repr__(self):
        param_names = [k for k in self.arg_constraints if k in self.__dict__]
        args_string = ", ".join(
            f"{p}: {self.__dict__[p] if self.__dict__[p].numel() == 1 else self.__dict__[p].size()}"
            for p in param_names)
        return self.__class__.__name__ + "(" + args_string + ")"
