"""CPU float32 ``where``, ``clamp`` and ``masked_fill`` past the dispatcher, for `_pointwise` and `_indexing_masks`.

A small call spent most of its time in the dispatcher's promotion (a bool mask with float32 branches is float32;
float32 with a Python number is float32, whose range needs no check): these call the row's native kernel
(`ops.native_select`) themselves, so the bits are the row's, and record the node the dispatcher would. Each returns
None where it does not apply (another dtype, a device array, broadcast operands): the caller takes the general path.
"""
from __future__ import annotations

import numpy as np

from ._creation_watchers import WATCHERS
from ._dispatch import _NO_ATTRS, MODES, TENSOR_TYPES, sync_view
from ._dispatch_fast import keep_result
from ._grad_state import GradState
from ._pointwise_checks import FLOAT32_MAX
from .autograd.graph import named
from .ops import native_select
from .ops import pointwise as P

__all__ = ["where_float32", "clamp_float32", "masked_fill_float32"]

_F32 = np.dtype(np.float32)
_BOOL = np.dtype(np.bool_)
_INF = float("inf")
_EXACT_INT = 1 << 24  # integers float32 holds exactly: the general path's ``np.full`` and a number's cast agree


def _synced(t):
    if t._base is not None and t._view_ver != t._ver_owner._ver:
        sync_view(t)
    return t._data


def _branch(v):
    """``v`` as the kernel takes it (a float32 CPU tensor's array, a Python number), else None."""
    if type(v) in TENSOR_TYPES:
        d = v._data
        return _synced(v) if type(d) is np.ndarray and d.dtype is _F32 else None
    if type(v) is float:  # (a finite number past float32's range: the general path raises)
        return v if -FLOAT32_MAX <= v <= FLOAT32_MAX or v != v or abs(v) == _INF else None
    return v if type(v) is int else None  # (ints past 62 bits: `native_select` refuses)


def where_float32(condition, input, other):
    """`where` of a CPU bool mask and float32 branches (tensors of its shape, 0-d tensors, numbers) through
    `native_select.where`, or None for the general path."""
    c = condition._data
    if type(c) is not np.ndarray or c.dtype is not _BOOL:
        return None
    a, b = _branch(input), _branch(other)
    if a is None or b is None:
        return None
    out = native_select.where(_synced(condition), a, b)
    if out is None:
        return None
    return keep_result(P.WHERE, (condition, input, other), _NO_ATTRS, out,
                       (type(input) in TENSOR_TYPES and input._requires_grad) or
                       (type(other) in TENSOR_TYPES and other._requires_grad))


def masked_fill_float32(input, mask, value):
    """`masked_fill` of a CPU float32 tensor by a same-shape bool mask with a Python number (which needs no range
    check into float32) through `native_select.where`, or None (also while a trace watches the value's creation)."""
    if MODES or WATCHERS or type(input) not in TENSOR_TYPES or type(mask) not in TENSOR_TYPES:
        return None
    x, m = input._data, mask._data
    if type(x) is not np.ndarray or x.dtype is not _F32 or type(m) is not np.ndarray or m.dtype is not _BOOL or \
            x.shape != m.shape:
        return None
    if type(value) is not float and not (type(value) is int and -_EXACT_INT <= value <= _EXACT_INT):
        return None
    out = native_select.where(_synced(mask), value, _synced(input))
    if out is None:
        return None
    if not (input._requires_grad and GradState.enabled):
        return keep_result(P.WHERE, (), _NO_ATTRS, out, False)
    # the general path's node: a where of a 0-d value tensor
    value = keep_result(P.WHERE, (), _NO_ATTRS, np.full((), value, _F32), False)
    return named(keep_result(P.WHERE, (mask, value, input), _NO_ATTRS, out, True), "MaskedFillBackward0")


def clamp_float32(input, min, max):
    """`clamp` of a CPU float32 tensor by Python numbers (or None) through `native_select.clamp_scalars`, or None."""
    x = input._data
    if type(x) is not np.ndarray or x.dtype is not _F32 or not (_plain_bound(min) and _plain_bound(max)):
        return None
    out = native_select.clamp_scalars(P.CLAMP, _synced(input), min, max)
    if out is None:
        return None
    t = keep_result(P.CLAMP, (input, min, max), _NO_ATTRS, out, input._requires_grad)
    return named(t, "ClampBackward1") if t.grad_fn is not None else t  # ATen's Scalar overload


def _plain_bound(b):
    # (a bool bound is refused or converted by the general path; an int past 62 bits converts there too)
    if type(b) is float:  # (nan and inf: NumPy's path; numbers past float32's range: the general path raises)
        return -FLOAT32_MAX <= b <= FLOAT32_MAX
    return b is None or (type(b) is int and -(1 << 62) < b < (1 << 62))
