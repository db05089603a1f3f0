"""Helpers shared by the distributions: argument broadcasting and probs/logits conversion."""
from __future__ import annotations

from numbers import Number

import jitorch as torch
import jitorch.nn.functional as F

__all__ = ["broadcast_all", "clamp_probs", "lazy_property", "logits_to_probs", "probs_to_logits"]


def broadcast_all(*values):
    """Broadcast numbers and tensors together; numbers take the dtype of the first tensor (or the default dtype)."""
    if not all(torch.is_tensor(v) or isinstance(v, Number) for v in values):
        raise ValueError("Input arguments must all be instances of numbers.Number, torch.Tensor or objects "
                         "implementing __torch_function__.")
    if not all(torch.is_tensor(v) for v in values):
        ref = next((v for v in values if torch.is_tensor(v)), None)
        dtype = ref.dtype if ref is not None else torch.get_default_dtype()
        device = ref.device if ref is not None else None
        values = [v if torch.is_tensor(v) else torch.tensor(v, dtype=dtype, device=device) for v in values]
    return torch.broadcast_tensors(*values)


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
        instance.__dict__[self.wrapped.__name__] = value
        return value
