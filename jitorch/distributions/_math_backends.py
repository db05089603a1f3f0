"""The two ways the gamma-family numerics (``_gamma_math.py``) run, behind one set of names: ``_TensorMath`` (jitorch
ops) and ``_ArrayMath`` (float64 NumPy arrays), and ``_host_float64``, which picks the array path where it applies.

The numerics are a few hundred small elementwise steps; as dispatched ops on a 64 x 10 batch they cost several times
torch's time, as NumPy calls about what torch's fused kernels do.

>>> import numpy as np
>>> import jitorch
>>> [a.dtype for a in _host_float64(jitorch.ones(2))], _host_float64(jitorch.ones(2, requires_grad=True)) is None
([dtype('float64')], True)
"""
from __future__ import annotations

import numpy as np

import jitorch as torch

from .._dispatch import TENSOR_TYPES
from .._dispatch_modes import MODES
from .._tensor import Tensor
from ..ops.special import DIGAMMA

__all__ = ["_ArrayMath", "_TensorMath", "_host_float64", "plain_host_array"]


class _TensorMath:
    """The functions the numerics below call, as jitorch ops: for tensors a tracing mode sees, tensors off the CPU,
    and gradients taken with ``create_graph`` (these stay differentiable)."""

    where, log, exp, sqrt, isnan, digamma = torch.where, torch.log, torch.exp, torch.sqrt, torch.isnan, torch.digamma
    zeros_like, ones_like, arange = torch.zeros_like, torch.ones_like, torch.arange

    @staticmethod
    def draws(kind, shape):
        return (torch.randn if kind == "normal" else torch.rand)(tuple(shape), dtype=torch.float64)

    @staticmethod
    def numel(x):
        return x.numel()


class _ArrayMath:
    """The same functions on float64 NumPy arrays: each of the numerics' hundred-odd small ops is then one NumPy
    call, not a dispatched op (what made Dirichlet, Beta and Gamma sampling and gradients several times torch's
    time). The draws still come from jitorch's generator, so a seed gives the same samples on either path."""

    where, log, exp, sqrt, isnan = np.where, np.log, np.exp, np.sqrt, np.isnan
    zeros_like, ones_like, arange = np.zeros_like, np.ones_like, np.arange

    @staticmethod
    def digamma(a):
        return DIGAMMA.kernel(np, a)

    @staticmethod
    def draws(kind, shape):
        return _TensorMath.draws(kind, shape)._data

    @staticmethod
    def numel(x):
        return x.size


def plain_host_array(value):
    """The NumPy array of a plain CPU tensor or parameter, outside any tracing mode; else None (subclasses, vmap's
    batched values, CUDA and meta tensors take the ops' path)."""
    if MODES or type(value) not in TENSOR_TYPES:
        return None
    if type(value) is not Tensor and type(value).__name__ != "Parameter":
        return None
    a = value._data
    return a if type(a) is np.ndarray else None


def _host_float64(*tensors):
    """The float64 NumPy arrays of ``tensors`` where the ``_ArrayMath`` path applies (plain CPU tensors, no tracing
    mode, no graph to build for a double backward); else None."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return None
    arrays = [plain_host_array(t) for t in tensors]
    if any(a is None for a in arrays):
        return None
    return [a.astype(np.float64, copy=False) for a in arrays]
