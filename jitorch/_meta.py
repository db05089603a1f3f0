"""The ``meta`` device at the tensor level: rows run on meta arrays, mixed devices, printing and refused reads.

A meta tensor is a ``Tensor`` whose array is a :class:`runtime.meta.MetaArray`: shape, dtype and strides, no data.
The dispatcher hands a row whose first tensor is meta to :func:`kernel_of`, the row's kernel run on the meta arrays
(cheap: the arrays answer ufuncs and the common NumPy calls by shape rules) with every output made meta. Creation
functions reach ``runtime.array_module_for("meta")``; in-place samplers draw from :class:`runtime.meta.MetaRNG`, so
initializing a module built under ``with jitorch.device("meta")`` does no work, as in torch.

>>> import jitorch
>>> x = jitorch.empty(3, 4, device="meta")
>>> (x @ jitorch.empty(4, 5, device="meta")).relu().sum(0)
tensor(..., device='meta', size=(5,))
"""
from __future__ import annotations

from .ops.random_ops import RANDOM_ROWS
from .ops.table import Opaque
from .runtime.meta import MetaArray, as_meta, as_meta_all, data_dependent, empty

__all__ = ["kernel_of", "mixed", "meta_repr"]

_KERNELS: dict = {}


def kernel_of(op):
    """``op``'s kernel for meta arrays: the row's own kernel, its outputs made meta (random rows draw nothing)."""
    kernel = _KERNELS.get(op)
    if kernel is None:
        kernel = _KERNELS[op] = _meta_kernel(op)
    return kernel


def _meta_kernel(op):
    if op in RANDOM_ROWS:
        def draw(xp, ref, *args, shape=None, **attrs):
            return empty(ref.shape if shape is None else shape, ref.dtype)
        return draw
    if isinstance(op.fusion, Opaque) and "data-dependent" in op.fusion.why:
        def refuse(xp, *args, **attrs):
            data_dependent(op.name)
        return refuse
    row = op.kernel

    def kernel(xp, *datas, **attrs):
        return as_meta_all(row(xp, *datas, **attrs))
    return kernel


def mixed(op, args, attrs, run):
    """``run(op, args, attrs)`` for tensors on the meta device and others: as torch, a CPU 0-d tensor joins any
    device (it becomes meta here); anything else is refused against the device of the first other tensor."""
    from ._tensor import Tensor

    tensors = [a for a in args if isinstance(a, Tensor)]
    expected = next(t for t in tensors if not (t.is_cpu and t._data.ndim == 0)).device
    for t in tensors:
        if t.device != expected and not (t.is_cpu and t._data.ndim == 0):
            raise RuntimeError(f"Tensor on device {t.device} is not on the expected device {expected}!")
    args = tuple(Tensor._make(as_meta(a._data)) if isinstance(a, Tensor) and type(a._data) is not MetaArray else a
                 for a in args)
    return run(op, args, attrs)


def meta_repr(t, suffixes):
    """torch's ``tensor(..., device='meta', size=(3, 4))``: the dtype shown unless it is the default float (with no
    values to show, an int64 meta tensor names its dtype too)."""
    from . import _dtype

    shape = tuple(t.shape)
    items = ["...", "device='meta'", f"size={shape}"]
    if t.dtype is not _dtype.get_default_dtype():
        items.append(f"dtype={t.dtype}")
    return f"tensor({', '.join(items + suffixes)})"
