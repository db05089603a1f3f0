"""The update primitives the optimizers are written in: on arrays (the fast path) or on tensors (``differentiable``).

Each primitive is one of the tensor ops PyTorch's single-tensor optimizer implementations use (``add_`` with
``alpha``, ``addcmul_``, ``addcdiv_``, ``lerp_`` ...), with the same order of operations and scalars rounded to the
array's precision first, so float32 updates agree with PyTorch's to the last bits (PyTorch's CPU kernels fuse
``a + alpha * b`` and ``lerp`` into FMAs, which round once where NumPy rounds twice). ``ARRAY_OPS`` works in place
on the NumPy/CuPy arrays behind the tensors, with no autograd and no dispatch: the caller bumps the version counters
of what it changed (``touched``), as a real in-place op would.
Float16/bfloat16 arrays compute in float32 and round once per op, like PyTorch's "opmath" kernels.
``TENSOR_OPS`` runs the same update with jitorch tensor ops so autograd records it (``differentiable=True``).

>>> import numpy as np
>>> a = np.ones(3, dtype=np.float32)
>>> ARRAY_OPS.addcmul_(a, np.full(3, 2, np.float32), np.full(3, 3, np.float32), value=0.5)
array([4., 4., 4.], dtype=float32)
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .._tensor import Tensor
from ..ops.muladd_ops import ADDCMUL, LERP_SCALAR
from ..ops.scaled_add_ops import scaled_add_arrays
from ..runtime import array_module_for
# The step-count and capture helpers live in `_step_capture`; the optimizers import them from here too.
from ._step_capture import (advance_step, capturing, count_up, guard_hyperparameters, increment_step,  # noqa: F401
                            refuse_capture)

__all__ = ["ARRAY_OPS", "TENSOR_OPS", "ops_for", "increment_step", "advance_step", "count_up", "refuse_capture",
           "capturing", "hyper"]

_HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
_REAL_OF = {np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}
_F32 = np.float32
_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))  # what the lerp and addcmul rows' kernels take natively


def _row_in_place(row, a, *args):
    """``a[...] = row(a, *args)`` through the row's kernel (ATen's multiply-adds, rounded once) for NumPy float32 and
    float64 arrays of one shape; ``None`` for the others."""
    if type(a) is not np.ndarray or a.dtype not in _NATIVE or not a.size:
        return None
    for b in args:
        if type(b) is np.ndarray and (b.dtype != a.dtype or b.shape != a.shape):
            return None
    a[...] = row.kernel(np, a, *args)
    return a


def _xp(arr):
    return np if isinstance(arr, np.ndarray) else array_module_for("cuda")  # meta arrays are NumPy arrays


def _f32(arr):
    return arr.astype(_F32)


def _addc_(a, t1, t2, value, ufunc):
    """``a += (value * t1) <ufunc> t2`` in place (``multiply`` or ``divide``), half types computed in float32."""
    if a.dtype in _HALF:
        a[...] = _f32(a) + getattr(_xp(a), ufunc)(value * _f32(t1), _f32(t2))
        return a
    xp = _xp(a)
    tmp = xp.empty_like(a)
    if value == 1:
        getattr(xp, ufunc)(t1, t2, out=tmp)
    else:
        xp.multiply(t1, value, out=tmp)
        getattr(xp, ufunc)(tmp, t2, out=tmp)
    xp.add(a, tmp, out=a)
    return a

class _ArrayOps:
    """In-place primitives on arrays; ``a`` is the array written (or the template of a new result)."""

    differentiable = False

    @staticmethod
    def unwrap(t, real=True):
        """The array behind ``t``; with ``real``, complex arrays as real views with a trailing (re, im) axis."""
        data = t._data
        kind = _REAL_OF.get(data.dtype) if real else None
        return data if kind is None else data[..., None].view(kind)

    @staticmethod
    def wrap(arr):
        return Tensor._make(arr)

    @staticmethod
    def touched(*tensors):
        for t in tensors:
            t._bump_version()

    @staticmethod
    def new_state_from(a):
        return a.copy()

    # -- results in new arrays (ufuncs return scalars for 0-d inputs, so results go to explicit ``out`` arrays) ----
    @staticmethod
    def neg(a):
        xp = _xp(a)
        return xp.negative(a, out=xp.empty_like(a))

    @staticmethod
    def add(a, b, alpha=1.0):
        """``a + alpha * b`` (``torch.add(a, b, alpha=alpha)``)."""
        if alpha != 1 and type(b) is np.ndarray and (out := scaled_add_arrays(a, b, alpha)) is not None:
            return out  # ATen's fused multiply-add, rounded once
        xp = _xp(a)
        out = xp.empty_like(a)
        if a.dtype in _HALF:
            out[...] = _f32(a) + _f32(b) * alpha
        elif alpha == 1:
            xp.add(a, b, out=out)
        else:
            xp.add(a, xp.multiply(b, alpha, out=out), out=out)
        return out

    @staticmethod
    def add_scalar(a, s):
        xp = _xp(a)
        out = xp.empty_like(a)
        if a.dtype in _HALF:
            out[...] = _f32(a) + s
        else:
            xp.add(a, s, out=out)
        return out

    @staticmethod
    def sqrt(a):
        xp = _xp(a)
        out = xp.empty_like(a)
        if a.dtype in _HALF:
            out[...] = xp.sqrt(_f32(a))
        else:
            xp.sqrt(a, out=out)
        return out

    @staticmethod
    def addcmul(a, t1, t2, value=1.0):
        """``a + value * t1 * t2`` in a new array."""
        return _ArrayOps.addcmul_(a.copy(), t1, t2, value)

    # -- in place ---------------------------------------------------------------------------------------------------
    @staticmethod
    def add_(a, b, alpha=1.0):
        if a.dtype in _HALF:
            a[...] = _f32(a) + _f32(b) * alpha
            return a
        if alpha != 1 and type(b) is np.ndarray and b.shape == a.shape and scaled_add_arrays(a, b, alpha, out=a) \
                is not None:
            return a
        xp = _xp(a)
        xp.add(a, b if alpha == 1 else xp.multiply(b, alpha, out=xp.empty_like(a)), out=a)
        return a

    @staticmethod
    def add_scalar_(a, s):
        if a.dtype in _HALF:
            a[...] = _f32(a) + s
        else:
            _xp(a).add(a, s, out=a)
        return a

    @staticmethod
    def mul_(a, s):
        if a.dtype in _HALF:
            a[...] = _f32(a) * s
        else:
            _xp(a).multiply(a, s, out=a)
        return a

    @staticmethod
    def mul_t_(a, b):
        if a.dtype in _HALF:
            a[...] = _f32(a) * _f32(b)
        else:
            _xp(a).multiply(a, b, out=a)
        return a

    @staticmethod
    def div_t_(a, b):
        if a.dtype in _HALF:
            a[...] = _f32(a) / _f32(b)
        else:
            _xp(a).divide(a, b, out=a)
        return a

    @staticmethod
    def div_scalar_(a, s):
        if a.dtype in _HALF:
            a[...] = _f32(a) / s
        else:
            _xp(a).divide(a, s, out=a)
        return a

    @staticmethod
    def sqrt_(a):
        if a.dtype in _HALF:
            a[...] = _xp(a).sqrt(_f32(a))
        else:
            _xp(a).sqrt(a, out=a)
        return a

    @staticmethod
    def addcmul_(a, t1, t2, value=1.0):
        """``a += value * t1 * t2`` as PyTorch's kernel: ``fma(value * t1, t2, a)``."""
        if _row_in_place(ADDCMUL, a, t1, t2, float(value)) is not None:
            return a
        return _addc_(a, t1, t2, value, "multiply")

    @staticmethod
    def addcdiv_(a, t1, t2, value=1.0):
        """``a += value * t1 / t2``, in PyTorch's kernel order."""
        return _addc_(a, t1, t2, value, "divide")

    @staticmethod
    def lerp_(a, b, weight):
        """``a += weight * (b - a)``, with PyTorch's two formulas (exact at both ends of the weight range)."""
        if _row_in_place(LERP_SCALAR, a, b, float(weight)) is not None:
            return a  # ATen's vectorized lerp: one multiply-add from the nearer end
        half = a.dtype in _HALF
        xp = _xp(a)
        if half:
            diff = xp.subtract(_f32(b), _f32(a), out=xp.empty(a.shape, dtype=_F32))
        else:
            diff = xp.subtract(b, a, out=xp.empty_like(a))
        # The complement is computed in the kernel's precision, not in Python's double.
        scalar = _F32 if half else a.dtype.type
        w = scalar(weight)
        if abs(w) < 0.5:
            xp.multiply(diff, float(w), out=diff)
            if half:
                a[...] = _f32(a) + diff
            else:
                xp.add(a, diff, out=a)
        else:
            xp.multiply(diff, float(scalar(1) - w), out=diff)
            if half:
                a[...] = _f32(b) - diff
            else:
                xp.subtract(b, diff, out=a)
        return a

    @staticmethod
    def maximum_(a, b):
        _xp(a).maximum(a, b, out=a)
        return a


def _c(x):
    # Inputs are cloned so no autograd node saves a tensor that a later in-place update changes (the state
    # tensors, the parameter): PyTorch's differentiable code paths clone for the same reason.
    return x.clone() if isinstance(x, Tensor) else x


class _TensorOps:
    """The same primitives as jitorch tensor ops, recorded by autograd; hyperparameters may be tensors.

    In-place primitives write with ``copy_`` so the update is one differentiable node per op; the ``*_`` results
    that callers rebind (``sqrt_``) are new tensors.
    """

    differentiable = True

    @staticmethod
    def unwrap(t, real=True):
        # complex tensors as real views with a trailing (re, im) axis, as ARRAY_OPS.unwrap (torch's view_as_real):
        # an update squaring the gradient must square each part, not the complex number
        if real and t.is_complex():
            from .._movement_extra import view_as_real

            return view_as_real(t)
        return t

    @staticmethod
    def wrap(t):
        return t

    @staticmethod
    def touched(*tensors):
        return None

    @staticmethod
    def new_state_from(a):
        return a.detach().clone()

    @staticmethod
    def neg(a):
        return -_c(a)

    @staticmethod
    def add(a, b, alpha=1.0):
        if type(alpha) is float or type(alpha) is int:
            return _c(a).add(_c(b), alpha=alpha)  # a number alpha: ATen's fused multiply-add, as torch's step
        return _c(a) + _c(b) * _c(alpha)

    @staticmethod
    def add_scalar(a, s):
        return _c(a) + _c(s)

    @staticmethod
    def sqrt(a):
        # A clone: sqrt saves its output for backward, and callers update this result in place.
        return _c(a).sqrt().clone()

    @staticmethod
    def addcmul(a, t1, t2, value=1.0):
        return _c(a) + _c(t1) * _c(t2) * _c(value)

    @staticmethod
    def add_(a, b, alpha=1.0):
        return a.copy_(_TensorOps.add(a, b, alpha))

    @staticmethod
    def add_scalar_(a, s):
        return a.copy_(_c(a) + _c(s))

    @staticmethod
    def mul_(a, s):
        return a.copy_(_c(a) * _c(s))

    @staticmethod
    def mul_t_(a, b):
        return a.copy_(_c(a) * _c(b))

    @staticmethod
    def div_t_(a, b):
        return a.copy_(_c(a) / _c(b))

    @staticmethod
    def div_scalar_(a, s):
        return a.copy_(_c(a) / _c(s))

    @staticmethod
    def sqrt_(a):
        return _c(a).sqrt().clone()

    @staticmethod
    def addcmul_(a, t1, t2, value=1.0):
        return a.copy_(_c(a) + _c(t1) * _c(t2) * _c(value))

    @staticmethod
    def addcdiv_(a, t1, t2, value=1.0):
        return a.copy_(_c(a) + _c(t1) / _c(t2) * _c(value))

    @staticmethod
    def lerp_(a, b, weight):
        a0 = _c(a)
        return a.copy_(a0 + (_c(b) - a0) * _c(weight))

    @staticmethod
    def maximum_(a, b):
        from .._pointwise import maximum

        return a.copy_(maximum(_c(a), _c(b)))


ARRAY_OPS = _ArrayOps()
TENSOR_OPS = _TensorOps()


def ops_for(group):
    """The primitives a parameter group's update runs with (tensor ops while a CPU graph captures: it records them)."""
    return TENSOR_OPS if group.get("differentiable", False) or capturing() else ARRAY_OPS


def hyper(value, ops):
    """A hyperparameter as the primitives take it: a Python float on arrays; may stay a tensor when differentiable."""
    if isinstance(value, Tensor):
        return value.squeeze() if ops.differentiable else float(value.item())
    # NumPy float64 scalars would make float32 updates compute in float64; Python floats keep the array's dtype.
    return value if ops.differentiable else float(value)
