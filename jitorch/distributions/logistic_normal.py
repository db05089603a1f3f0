"""``LogisticNormal``: a ``Normal`` vector mapped onto the simplex by stick breaking (one more coordinate)."""
from __future__ import annotations

from . import constraints
from .normal import Normal
from .transformed_distribution import TransformedDistribution
from .transforms import StickBreakingTransform

__all__ = ["LogisticNormal"]


class LogisticNormal(TransformedDistribution):
    """``LogisticNormal(loc, scale)``: events of size ``loc.shape[-1] + 1`` on the simplex.

    >>> import jitorch
    >>> import jitorch.distributions as D
    >>> d = D.LogisticNormal(jitorch.zeros(2), jitorch.ones(2))
    >>> tuple(d.sample().shape), tuple(d.event_shape)
    ((3,), (3,))
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        base_dist = Normal(loc, scale, validate_args=validate_args)
        # Stick breaking needs an event dim: a scalar loc is one-dimensional.
        if not base_dist.batch_shape:
            base_dist = base_dist.expand([1])
        super().__init__(base_dist, StickBreakingTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LogisticNormal, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def loc(self):
        return self.base_dist.base_dist.loc

    @property
    def scale(self):
        return self.base_dist.base_dist.scale
