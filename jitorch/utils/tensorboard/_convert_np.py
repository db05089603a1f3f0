"""Values to log as NumPy arrays (torch's ``_convert_np``): jitorch tensors on any device, arrays and numbers.

>>> import jitorch
>>> make_np(jitorch.ones(2, requires_grad=True)), make_np(3)
(array([1., 1.], dtype=float32), array([3]))
"""
from __future__ import annotations

import numpy as np

from ..._tensor import Tensor

__all__ = ["make_np"]


def make_np(x) -> np.ndarray:
    """``x`` (a jitorch tensor on any device, with or without grad, a NumPy array or a Python number) as an array."""
    if isinstance(x, np.ndarray):
        return x
    if np.isscalar(x):
        return np.array([x])
    if isinstance(x, Tensor):
        from ..._dtype import bfloat16, float16

        if x.dtype == bfloat16:  # as torch: PIL and NumPy's histogram do not take ml_dtypes' bfloat16
            x = x.to(float16)
        return x.detach().cpu().numpy()
    raise NotImplementedError(f"Got {type(x)}, but numpy array or torch tensor are expected.")
