"""``LKJCholesky``: Cholesky factors of correlation matrices, with density ``det(L L^T)^(concentration - 1)``
(Lewandowski, Kurowicka & Joe 2009), sampled by the onion method: each row a Beta-distributed radius in a uniform
direction on the sphere."""
from __future__ import annotations

import math

import jitorch as torch

from . import constraints
from .beta import Beta
from .distribution import Distribution
from .utils import broadcast_all

__all__ = ["LKJCholesky"]


class LKJCholesky(Distribution):
    """``LKJCholesky(dim, concentration=1.0)``: events of shape ``(dim, dim)``.

    >>> import jitorch
    >>> import jitorch.distributions as D
    >>> d = D.LKJCholesky(3, jitorch.tensor(2.0))
    >>> round(d.log_prob(jitorch.eye(3)).item(), 4)
    -0.6155
    """

    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky
    _batch_params = ("concentration", "_beta")
    _shared_attrs = ("dim",)

    def __init__(self, dim, concentration=1.0, validate_args=None):
        if dim < 2:
            raise ValueError(f"LKJCholesky: expected dim to be an integer greater than or equal to 2. Found dim={dim}.")
        self.dim = dim
        (self.concentration,) = broadcast_all(concentration)
        batch_shape = self.concentration.size()
        event_shape = torch.Size((dim, dim))
        # Row i's squared radius is Beta(i/2, concentration + (dim - 2 - i)/2) (row 0 is fixed at e_0).
        marginal_conc = self.concentration + 0.5 * (self.dim - 2)
        offset = torch.arange(self.dim - 1, dtype=self.concentration.dtype, device=self.concentration.device)
        offset = torch.cat([offset.new_zeros((1,)), offset])
        beta_conc1 = offset + 0.5
        beta_conc0 = marginal_conc.unsqueeze(-1) - 0.5 * offset
        self._beta = Beta(beta_conc1, beta_conc0)
        super().__init__(batch_shape, event_shape, validate_args)

    def sample(self, sample_shape=torch.Size()):
        with torch.no_grad():
            y = self._beta.sample(sample_shape).unsqueeze(-1)
            u_normal = torch.randn(self._extended_shape(sample_shape), dtype=y.dtype, device=y.device).tril(-1)
            u_hypersphere = u_normal / u_normal.norm(dim=-1, keepdim=True)
            # Row 0 is all zeros (its direction is 0/0): its off-diagonal part is 0 and its diagonal 1.
            first_row = torch.arange(self.dim, device=y.device).unsqueeze(-1) == 0
            u_hypersphere = torch.where(first_row, 0.0, u_hypersphere)
            w = torch.sqrt(y) * u_hypersphere
            eps = torch.finfo(w.dtype).tiny
            diag_elems = torch.clamp(1 - torch.sum(w**2, dim=-1), min=eps).sqrt()
            return w + torch.diag_embed(diag_elems)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        diag_elems = value.diagonal(dim1=-1, dim2=-2)[..., 1:]
        order = torch.arange(2, self.dim + 1, device=self.concentration.device)
        order = 2 * (self.concentration - 1).unsqueeze(-1) + self.dim - order
        unnormalized_log_pdf = torch.sum(order * diag_elems.log(), dim=-1)
        dm1 = self.dim - 1
        alpha = self.concentration + 0.5 * dm1
        denominator = torch.lgamma(alpha) * dm1
        numerator = torch.mvlgamma(alpha - 0.5, dm1)
        pi_constant = 0.5 * dm1 * math.log(math.pi)
        normalize_term = pi_constant + numerator - denominator
        return unnormalized_log_pdf - normalize_term
