"""Tensor methods PyTorch has that are spellings of existing functions: in-place forms (``lgamma_``, ``gcd_``,
``renorm_``, ``arccosh_``...), method forms (``diagflat``, ``hardshrink``, ``prelu``, ``igamma``), Python-callable
maps over CPU tensors (``apply_``, ``map_``, ``map2_``) and layout queries (``dim_order``, ``const_data_ptr``).

>>> import jitorch
>>> x = jitorch.tensor([1.0, 3.0])
>>> x.lgamma_() is x, x.apply_(lambda v: v * 2).tolist()
(True, [0.0, 1.3862943649291992])
"""
from __future__ import annotations

import numpy as np

from . import _aten_aliases, _aten_misc, _dtype, _math_extra, _movement_extra, special
from ._pointwise import _composite_inplace
from ._tensor import Tensor
from .nn import functional as F

__all__ = ["igamma", "igammac"]


def igamma(input, other, *, out=None):
    """``torch.igamma``: ``special.gammainc``."""
    return special.gammainc(input, other, out=out)


def igammac(input, other, *, out=None):
    """``torch.igammac``: ``special.gammaincc``."""
    return special.gammaincc(input, other, out=out)


def _on_cpu(name, t):
    if type(t._data) is not np.ndarray:
        raise TypeError(f"{name} is only implemented on CPU tensors")


def apply_(self, callable):
    """Replace each element by ``callable(element)`` (a Python loop: CPU tensors only, as in PyTorch)."""
    _on_cpu("apply_", self)
    data = self._data
    values = [callable(v) for v in data.reshape(-1).tolist()]
    self.copy_(Tensor._make(np.asarray(values, dtype=data.dtype).reshape(data.shape)))
    return self


def map_(self, tensor, callable):
    """``self[i] = callable(self[i], tensor[i])`` with ``tensor`` broadcast to ``self``'s shape."""
    _on_cpu("map_", self)
    other = np.broadcast_to(tensor._data, self._data.shape)
    values = [callable(a, b) for a, b in zip(self._data.reshape(-1).tolist(), other.reshape(-1).tolist())]
    self.copy_(Tensor._make(np.asarray(values, dtype=self._data.dtype).reshape(self._data.shape)))
    return self


def map2_(self, x, y, callable):
    """``self[i] = callable(self[i], x[i], y[i])`` with ``x`` and ``y`` broadcast to ``self``'s shape."""
    _on_cpu("map2_", self)
    shape = self._data.shape
    xs, ys = (np.broadcast_to(t._data, shape).reshape(-1).tolist() for t in (x, y))
    values = [callable(a, b, c) for a, b, c in zip(self._data.reshape(-1).tolist(), xs, ys)]
    self.copy_(Tensor._make(np.asarray(values, dtype=self._data.dtype).reshape(shape)))
    return self


def dim_order(self, *, ambiguity_check=False):
    """The dims from outermost to innermost in memory (ties, e.g. size-1 dims, keep their logical order)."""
    strides = self.stride()
    order = sorted(range(self.dim()), key=lambda d: -strides[d])
    if ambiguity_check and len(set(strides)) != len(strides):
        raise RuntimeError("The tensor does not have unique dim order, or cannot map to exact one of the given "
                           "memory formats.")
    return tuple(order)


def new_empty_strided(self, size, stride, *, dtype=None, device=None, requires_grad=False):
    from ._creation import empty_strided

    out = empty_strided(size, stride, dtype=dtype or self.dtype, device=device or self.device)
    return out.requires_grad_() if requires_grad else out


_METHODS = {
    "arccosh_": Tensor.acosh_, "arcsinh_": Tensor.asinh_, "arctanh_": Tensor.atanh_, "arctan2_": Tensor.atan2_,
    "diagflat": lambda self, offset=0: _movement_extra.diagflat(self, offset),
    "hardshrink": lambda self, lambd=0.5: F.hardshrink(self, lambd),
    "prelu": lambda self, weight: F.prelu(self, weight),
    "igamma": igamma, "igammac": igammac,
    "unsafe_chunk": _aten_aliases.unsafe_chunk, "unsafe_split": _aten_aliases.unsafe_split,
    "unsafe_split_with_sizes": lambda self, split_sizes, dim=0: _aten_aliases._writable_pieces(
        self.split_with_sizes(split_sizes, dim)),
    "_is_view": lambda self: self._base is not None,
    "chalf": lambda self, memory_format=None: self.to(_dtype.complex64),
    "const_data_ptr": Tensor.data_ptr, "is_neg": _aten_aliases.is_neg,
    "apply_": apply_, "map_": map_, "map2_": map2_, "dim_order": dim_order,
    "new_empty_strided": new_empty_strided,
    "histogram": lambda self, bins, *, range=None, weight=None, density=False: _aten_misc.histogram(
        self, bins, range=range, weight=weight, density=density),
    "to_dense": lambda self, dtype=None, *, masked_grad=None: self if dtype is None else self.to(dtype),
    "is_set_to": lambda self, tensor: (self.data_ptr() == tensor.data_ptr() and self.shape == tensor.shape
                                       and self.stride() == tensor.stride() and self.device == tensor.device),
}
# Devices jitorch never has: PyTorch's Tensor answers False for them.
for _device_flag in ("is_mps", "is_xla", "is_ipu", "is_maia", "is_mtia", "is_vulkan"):
    if not hasattr(Tensor, _device_flag):
        setattr(Tensor, _device_flag, property(lambda self: False))
for _fn in (_math_extra.gcd, _math_extra.lcm, _math_extra.ldexp, _math_extra.heaviside, _math_extra.lgamma,
            _math_extra.digamma, _math_extra.i0, _math_extra.renorm, _math_extra.mvlgamma, igamma, igammac):
    _METHODS[_fn.__name__ + "_"] = _composite_inplace(_fn)
_METHODS["polygamma_"] = lambda self, n: self.copy_(_math_extra.polygamma(n, self.clone() if self.requires_grad
                                                                          else self))
_METHODS["conj_physical_"] = lambda self: self.copy_(_movement_extra.conj_physical(self)) if self.is_complex() \
    else self
for _name, _fn in _METHODS.items():
    if not hasattr(Tensor, _name):
        setattr(Tensor, _name, _fn)
