"""``jitorch.masked``: reductions and normalizations that skip masked-out elements, and ``MaskedTensor``, as
``torch.masked``.

Each op takes ``mask``, a bool tensor broadcastable to the input (never of more dims); True keeps an element.
The ops are composites (``where`` with the op's identity, then the plain op), so autograd and dtypes are the
plain op's and masked-out elements get zero gradient.

>>> import jitorch
>>> x = jitorch.tensor([1., 2., 3.])
>>> jitorch.masked.sum(x, mask=jitorch.tensor([True, False, True]))
tensor(4.)
"""
from __future__ import annotations

from .maskedtensor import MaskedTensor, as_masked_tensor, is_masked_tensor, masked_tensor
from ._normalizations import log_softmax, normalize, softmax, softmin
from ._reductions import (amax, amin, argmax, argmin, cumprod, cumsum, logaddexp, logsumexp, mean, median, norm, prod,
                          std, sum, var)

__all__ = ["amax", "amin", "argmax", "argmin", "as_masked_tensor", "cumprod", "cumsum", "is_masked_tensor",
           "log_softmax", "logaddexp", "logsumexp", "masked_tensor", "MaskedTensor", "mean", "median", "norm",
           "normalize", "prod", "softmax", "softmin", "std", "sum", "var"]
