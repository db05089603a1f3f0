"""Helpers shared by the distributions: argument broadcasting, probs/logits conversion, triangular packing."""
from __future__ import annotations

from numbers import Number

import jitorch as torch
import jitorch.nn.functional as F

__all__ = ["broadcast_all", "clamp_probs", "lazy_property", "logits_to_probs", "probs_to_logits", "tril_matrix_to_vec",
           "vec_to_tril_matrix"]

euler_constant = 0.57721566490153286060  # Euler-Mascheroni constant


def broadcast_all(*values):
    """Broadcast numbers and tensors together; numbers take the dtype of the first tensor (or the default dtype)."""
    if not all(torch.is_tensor(v) or isinstance(v, Number) for v in values):
        raise ValueError("Input arguments must all be instances of Number, torch.Tensor or objects "
                         "implementing __torch_function__.")
    if not all(torch.is_tensor(v) for v in values):
        ref = next((v for v in values if torch.is_tensor(v)), None)
        dtype = ref.dtype if ref is not None else torch.get_default_dtype()
        device = ref.device if ref is not None else None
        values = [v if torch.is_tensor(v) else torch.tensor(v, dtype=dtype, device=device) for v in values]
    return torch.broadcast_tensors(*values)


def _one_of(probs, logits):
    """The check of every ``probs``-or-``logits`` distribution."""
    if (probs is None) == (logits is None):
        raise ValueError("Either `probs` or `logits` must be specified, but not both.")


def clamp_probs(probs):
    eps = torch.finfo(probs.dtype).eps
    return probs.clamp(min=eps, max=1 - eps)


def logits_to_probs(logits, is_binary=False):
    return torch.sigmoid(logits) if is_binary else F.softmax(logits, dim=-1)


def probs_to_logits(probs, is_binary=False):
    ps_clamped = clamp_probs(probs)
    if is_binary:
        return torch.log(ps_clamped) - torch.log1p(-ps_clamped)
    return torch.log(ps_clamped)


class lazy_property:
    """Computed on first access, then stored on the instance (like ``torch.distributions.utils.lazy_property``)."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        self.__doc__ = wrapped.__doc__

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return self
        with torch.enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


def _delegated(holder, name):
    """A read-only property reading ``name`` off the attribute ``holder``: the parameters of a family that is built
    on another distribution (``LogNormal.loc`` is ``base_dist.loc``) are that one's."""
    return property(lambda self: getattr(getattr(self, holder), name), doc=f"``self.{holder}.{name}``")


def _standard_normal(shape, dtype, device):
    return torch.randn(tuple(shape), dtype=dtype, device=device)


def _sum_rightmost(value, dim):
    """Sum out the ``dim`` rightmost dims of ``value``."""
    if dim == 0:
        return value
    return value.reshape(tuple(value.shape[:value.dim() - dim]) + (-1,)).sum(-1)


def _tril_mask(n, diag, device):
    arange = torch.arange(n, device=device)
    return arange < arange.view(-1, 1) + (diag + 1)


def tril_matrix_to_vec(mat, diag=0):
    """The lower triangle (from diagonal ``diag``) of a batch of ``n x n`` matrices, in row order."""
    n = mat.shape[-1]
    if diag < -n or diag >= n:
        raise ValueError(f"diag ({diag}) provided is outside [{-n}, {n - 1}].")
    return mat[..., _tril_mask(n, diag, mat.device)]


def vec_to_tril_matrix(vec, diag=0):
    """Inverse of ``tril_matrix_to_vec``: the ``n x n`` matrix whose lower triangle from ``diag`` is ``vec``."""
    n = (-(1 + 2 * diag) + ((1 + 2 * diag) ** 2 + 8 * vec.shape[-1] + 4 * abs(diag) * (diag + 1)) ** 0.5) / 2
    if round(n) - n > torch.finfo(vec.dtype).eps:
        raise ValueError(f"The size of last dimension is {vec.shape[-1]} which cannot be expressed as "
                         "the lower triangular part of a square D x D matrix.")
    n = round(n)
    mask = _tril_mask(n, diag, vec.device)
    # A scatter into zeros, not an in-place index_put: the result stays differentiable in ``vec``.
    flat = torch.zeros(tuple(vec.shape[:-1]) + (n * n,), dtype=vec.dtype, device=vec.device)
    index = mask.reshape(-1).nonzero().squeeze(-1).expand(tuple(vec.shape[:-1]) + (-1,))
    return flat.scatter(-1, index, vec).reshape(tuple(vec.shape[:-1]) + (n, n))
