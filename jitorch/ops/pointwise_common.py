"""What the elementwise rows share: PyTorch's dtype refusals (its ``"kernel" not implemented for 'Bool'`` errors),
the conjugating wrapper that makes a real backward formula a complex one, the plain-array product of the
first-order backwards, and half types' formulas computed in float32 (`_widened`).

Split from ``pointwise.py`` (the binary, comparison and ternary rows) and shared with ``pointwise_unary.py``.

>>> import numpy as np
>>> _reject_bool("abs_cpu", np.zeros(2, np.float32)) is None
True
"""
from __future__ import annotations

import numpy as np

from .. import _dtype
from .._dispatch_fast import plain_binary
from .half_cast import converted, scalar_as

_HALVES = _dtype.HALF_NP
_COMPLEX64 = np.dtype(np.complex64)


def _not_implemented(kernel_name, a):
    """PyTorch's dtype-dispatch error: ``NotImplementedError`` (a ``RuntimeError``) naming the kernel and dtype."""
    from .._dispatch import TORCH_TYPE_NAMES
    from .._dtype import FROM_NP

    return NotImplementedError(f'"{kernel_name}" not implemented for \'{TORCH_TYPE_NAMES[FROM_NP[a.dtype].name]}\'')


def _reject_bool(kernel_name, *arrays):
    # Kernels receive promoted operands: a bool array here means the op computes in bool, which PyTorch rejects.
    for a in arrays:
        if getattr(a, "dtype", None) == np.bool_:
            raise _not_implemented(kernel_name, a)


def _reject_bool_complex(kernel_name, *arrays):
    # Rounding division, remainders and atan2 have no complex kernels in PyTorch (NumPy's would raise TypeError).
    _reject_bool(kernel_name, *arrays)
    for a in arrays:
        if getattr(a, "dtype", None) is not None and a.dtype.kind == "c":
            raise _not_implemented(kernel_name, a)


_F32 = np.dtype(np.float32)


def _widened(fn, *arrays):
    """``fn`` of the arrays, half types computed on float32 copies and rounded once to their dtype (ATen's opmath)."""
    low = arrays[0].dtype.itemsize < 4
    out = fn(*(converted(a, _F32) for a in arrays)) if low else fn(*arrays)
    return converted(out, arrays[0].dtype)


def half_with_number(fn, a, b):
    """``fn(a, b)`` for a half-type array ``a`` and a Python number ``b`` as ATen computes it: the number converted
    to ``a``'s dtype (through float32, as a Scalar), both in float32, the result rounded once (NumPy would take
    ml_dtypes' bfloat16 with a Python float to float64); None for other operands."""
    if type(b) not in (int, float) or getattr(a, "dtype", None) not in _HALVES:
        return None
    return converted(fn(converted(a, _F32), scalar_as(b, a.dtype)), a.dtype)


def _holomorphic(backward):
    """The backward of a holomorphic op for complex values too, from its real formula ``g * f'(x)``.

    PyTorch's gradient at complex ``z`` is ``g * conj(f'(z))`` (the conjugate Wirtinger derivative), which is the real
    formula run on ``conj(g)`` and conjugated: a row keeps one formula for both, and real gradients skip the wrapper.
    """
    def run(ctx, *grads):
        g = grads[0]
        try:
            real = g is None or g._data.dtype.kind != "c"
        except RuntimeError:  # a sparse gradient (sparse=True embeddings of a computed weight) has no array
            real = not g.is_complex()
        if real:
            return backward(ctx, *grads)
        out = backward(ctx, *(x.conj() if x is not None else None for x in grads))
        if isinstance(out, tuple):
            return tuple(o.conj() if o is not None else None for o in out)
        return out.conj()

    return run


def _times(g, other):
    out = plain_binary(np.multiply, g, other)  # first-order backward: the product without its dispatch
    return g * other if out is None else out
