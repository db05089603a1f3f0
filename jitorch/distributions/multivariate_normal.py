"""``MultivariateNormal``, parametrized by ``covariance_matrix``, ``precision_matrix`` or ``scale_tril``."""
from __future__ import annotations

import math

import jitorch as torch

from . import constraints
from ._mixins import MeanModeAtLoc
from .distribution import Distribution
from .utils import _standard_normal, lazy_property

__all__ = ["MultivariateNormal"]


def _batch_mahalanobis(bL, bx):
    """Squared Mahalanobis distance ``x^T (L L^T)^-1 x``, the batch dims of ``bL`` and ``bx`` broadcast."""
    shape = tuple(torch.broadcast_shapes(tuple(bL.shape[:-2]), tuple(bx.shape[:-1])))
    bL = bL.expand(shape + tuple(bL.shape[-2:]))
    bx = bx.expand(shape + tuple(bx.shape[-1:]))
    sol = torch.linalg.solve_triangular(bL, bx.unsqueeze(-1), upper=False).squeeze(-1)
    return sol.pow(2).sum(-1)


def _batch_mv(bmat, bvec):
    """Matrix-vector products over broadcast batches."""
    return torch.matmul(bmat, bvec.unsqueeze(-1)).squeeze(-1)


def _precision_to_scale_tril(P):
    """The Cholesky factor of ``P^-1`` without inverting ``P``: ``flip(cholesky(flip(P)))^-T`` is lower triangular."""
    Lf = torch.linalg.cholesky(torch.flip(P, (-2, -1)))
    L_inv = torch.transpose(torch.flip(Lf, (-2, -1)), -2, -1)
    Id = torch.eye(P.shape[-1], dtype=P.dtype, device=P.device)
    return torch.linalg.solve_triangular(L_inv, Id, upper=False)


class MultivariateNormal(MeanModeAtLoc, Distribution):
    arg_constraints = {"loc": constraints.real_vector, "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite, "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True
    # Of the three matrices, the given one and those computed so far (lazily) are expanded.
    _batch_params = ("loc", "covariance_matrix", "scale_tril", "precision_matrix")
    _shared_attrs = ("_unbroadcasted_scale_tril",)

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args=None):
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        if (covariance_matrix is not None) + (scale_tril is not None) + (precision_matrix is not None) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.")
        matrix = next(m for m in (scale_tril, covariance_matrix, precision_matrix) if m is not None)
        if matrix.dim() < 2:
            what = "scale_tril matrix" if scale_tril is not None else (
                "covariance_matrix" if covariance_matrix is not None else "precision_matrix")
            raise ValueError(f"{what} must be at least two-dimensional, with optional leading batch dimensions")
        batch_shape = torch.broadcast_shapes(tuple(matrix.shape[:-2]), tuple(loc.shape[:-1]))
        if scale_tril is not None:
            self.scale_tril = scale_tril.expand(tuple(batch_shape) + (-1, -1))
        elif covariance_matrix is not None:
            self.covariance_matrix = covariance_matrix.expand(tuple(batch_shape) + (-1, -1))
        else:
            self.precision_matrix = precision_matrix.expand(tuple(batch_shape) + (-1, -1))
        self.loc = loc.expand(tuple(batch_shape) + (-1,))
        super().__init__(batch_shape, self.loc.shape[-1:], validate_args=validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = torch.linalg.cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = _precision_to_scale_tril(precision_matrix)

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(tuple(self._batch_shape) + tuple(self._event_shape) * 2)

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        return (L @ L.mT).expand(tuple(self._batch_shape) + tuple(self._event_shape) * 2)

    @lazy_property
    def precision_matrix(self):
        return torch.linalg.inv(self.covariance_matrix)

    @property
    def variance(self):
        return self._unbroadcasted_scale_tril.pow(2).sum(-1).expand(self._batch_shape + self._event_shape)

    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        eps = _standard_normal(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + _batch_mv(self._unbroadcasted_scale_tril, eps)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        diff = value - self.loc
        M = _batch_mahalanobis(self._unbroadcasted_scale_tril, diff)
        half_log_det = self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + M) - half_log_det

    def entropy(self):
        half_log_det = self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        H = 0.5 * self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + half_log_det
        return H if len(self._batch_shape) == 0 else H.expand(self._batch_shape)
