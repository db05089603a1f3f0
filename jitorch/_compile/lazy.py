"""Deferred tensors for replaying a graph-broken function: shapes now, values at the next flush.

When a compiled function has graph breaks, each later call reruns its Python with the ops deferred (see replay.py).
An op's result is a `LazyTensor` whose ``_data`` is a `LazyArray`: it answers ``shape``, ``ndim``, ``dtype``,
``strides``... from what the recorded trace saw (guards make those equal), so Python code computing shapes runs
without a flush. Anything that needs the values (any other attribute, ``np.asarray``, indexing the array) first
*flushes*: the pending segment runs compiled and the array gets its real values. So a read the tracer did not
foresee costs speed, never correctness.

>>> import numpy as np
>>> class Owner:
...     def materialize(self, arr):
...         arr.set_real(np.arange(3.0))
>>> a = LazyArray(Owner(), None, ((3,), np.dtype("float32"), (4,)))
>>> a.shape, a.ndim, a.size
((3,), 1, 3)
>>> float(a.sum())  # not a shape query: it flushes (here, the toy owner supplies the values)
3.0
"""
from __future__ import annotations

import numpy as np

from .. import _dtype
from .._device import device as _device_cls
from .._tensor import Size, Tensor

__all__ = ["LazyArray", "LazyTensor", "lazy_tensor", "realize"]


class _Flags:
    __slots__ = ("c_contiguous", "f_contiguous", "writeable")

    def __init__(self, shape, strides, itemsize):
        expect, c = itemsize, True
        for n, s in zip(reversed(shape), reversed(strides)):
            if n != 1 and s != expect:
                c = False
            expect *= n
        self.c_contiguous, self.f_contiguous, self.writeable = c, len(shape) <= 1 and c, True


class LazyArray:
    """The stand-in for a deferred op's array: geometry from the trace, values from ``owner.materialize(self)``."""

    __slots__ = ("owner", "node", "shape", "dtype", "strides", "real", "source", "__weakref__")

    def __init__(self, owner, node, meta):
        self.owner, self.node, self.real, self.source = owner, node, None, None
        self.shape, self.dtype, self.strides = meta

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: self.size * self.dtype.itemsize)
    flags = property(lambda self: _Flags(self.shape, self.strides, self.dtype.itemsize))

    def set_real(self, arr, source=None):
        """Store the values; ``source`` is the Tensor the graph produced (its view fields are copied on realize)."""
        self.real, self.source = arr, source

    def force(self):
        if self.real is None:
            self.owner.materialize(self)
        return self.real

    def __getattr__(self, name):  # every other ndarray attribute reads values
        return getattr(self.force(), name)

    def __array__(self, dtype=None, copy=None):
        arr = self.force()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def __getitem__(self, key):
        return self.force()[key]

    def __setitem__(self, key, value):
        self.force()[key] = value

    def __len__(self):
        return len(self.shape) and self.shape[0]

    def __iter__(self):
        return iter(self.force())

    def __repr__(self):
        return f"LazyArray(shape={self.shape}, dtype={self.dtype}, realized={self.real is not None})"


def _grad_fn(self):
    arr = self.__dict__.get("_data")
    if type(arr) is LazyArray and getattr(arr.owner, "training", False):
        # The history comes with the values (a training replay's flush).
        if arr.real is None:
            arr.owner.materialize(arr, "a deferred tensor's autograd history was read (grad_fn, is_leaf, a hook, "
                                       "backward)")
        realize(self)
        return self.grad_fn
    return self.__dict__.get("grad_fn")


def _set_grad_fn(self, value):
    self.__dict__["grad_fn"] = value


class LazyTensor(Tensor):
    """A `Tensor` over a `LazyArray`; once realized its class is set back to `Tensor`.

    The properties a device check would read from the array's type (``device``, ``is_cpu``...) answer from the trace:
    replay only runs on CPU. Under a training replay ``grad_fn`` (and so ``is_leaf``, hooks, ``backward``) realizes
    the tensor first: its history is the compiled segment's, known only once it ran.
    """

    grad_fn = property(_grad_fn, _set_grad_fn)
    _stands_for_plain_tensor = True  # f"{loss:.4f}" formats the number, as for a Tensor

    def detach(self):
        return _alias(Tensor.detach(self))

    data = property(lambda self: _alias(Tensor.data.fget(self)), Tensor.data.fset)

    device = property(lambda self: _device_cls("cpu"))
    is_cuda = property(lambda self: False)
    is_cpu = property(lambda self: True)
    dtype = property(lambda self: _dtype.FROM_NP[self._data.dtype])
    shape = property(lambda self: Size(self._data.shape))

    def data_ptr(self):
        realize(self)
        return self.data_ptr()


def _alias(t):
    """An alias of a deferred tensor made without an op (``detach()``, ``.data``): deferred too, realized with it."""
    arr = t.__dict__.get("_data")
    if type(arr) is LazyArray:
        t.__class__ = LazyTensor
        t.__dict__["_lazy_alias"] = True
        if arr.real is not None:
            realize(t)
        elif hasattr(arr.owner, "adopt"):
            arr.owner.adopt(arr, t)
    return t


def lazy_tensor(arr):
    t = object.__new__(LazyTensor)
    t._data = arr
    return t


def realize(t):
    """Give ``t`` (any Tensor holding a `LazyArray`) its real array and make it a plain `Tensor` again.

    The tensor a deferred op returned takes the graph output's fields (a view keeps its base; a training replay's
    value its ``grad_fn``) and shares its version counter, so saved-tensor checks see in-place writes to either. An
    alias made without an op (``detach()``, ``.data``) keeps its own fields: it only gets the array.
    """
    d = t.__dict__
    alias = d.pop("_lazy_alias", False) or type(t) is not LazyTensor
    arr = d.get("_data")
    if type(arr) is LazyArray:
        real = arr.force()
        source = arr.source
        if source is not None and not alias:
            d.pop("_requires_grad", None)  # the recorded flag stood in until now; the output's own one holds
            d.update(source.__dict__)
            if source._ver_owner is None:
                t._ver_owner = source
        owner = d.get("_ver_owner")
        if alias and owner is not None and owner._ver_owner is not None:
            t._ver_owner = owner._ver_owner  # a detach() of a realized tensor: one level to the shared counter
        t._data = real
    if type(t) is LazyTensor:
        t.__class__ = Tensor
    return t
