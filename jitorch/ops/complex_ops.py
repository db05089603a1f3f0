"""Complex-number primitives: the conjugate, the real and imaginary parts, and the real <-> complex views.

Gradients follow PyTorch's convention for complex autograd (the conjugate Wirtinger derivative, so a real loss
``L`` of ``z = x + iy`` has gradient ``dL/dx + i dL/dy``): ``x.real`` passes ``g + 0j`` back, ``x.imag`` passes
``g * 1j``, ``x.conj()`` passes ``g.conj()``. ``real``, ``imag``, ``view_as_real`` and ``view_as_complex`` are views
(writes through them reach the base), as in PyTorch; ``conj_physical`` is a copy (jitorch has no lazy conjugate bit).

>>> import jitorch
>>> z = jitorch.tensor([3.0 + 4.0j], requires_grad=True)
>>> z.imag.sum().backward()
>>> z.grad
tensor([0.+1.j])
"""
from __future__ import annotations

import numpy as np

from ..runtime import strided_view
from .table import Opaque, View, defop

# The code generator has no complex types: these rows run their kernels, never inside a fused group.
_NO_CODEGEN = Opaque("complex values (no complex types in the code generator)")


def _apply(op, *args, **attrs):
    from .._dispatch import apply

    return apply(op, *args, **attrs)


def _complex_of(real_dtype):
    return np.result_type(real_dtype, np.complex64)


CONJ = defop("conj_physical", lambda xp, a: xp.conj(a), lambda ctx, g: _apply(CONJ, g), _NO_CODEGEN,
             grad_name="ConjPhysicalBackward0")


def _real_backward(ctx, g):
    return g.to(ctx.in_meta[0][1])  # g + 0j: the imaginary part does not reach the output


def _imag_backward(ctx, g):
    return g.to(ctx.in_meta[0][1]) * 1j


REAL = defop("real", lambda xp, a: a.real, _real_backward, View(), view=True, meta=True, grad_name="RealBackward0")
IMAG = defop("imag", lambda xp, a: a.imag, _imag_backward, View(), view=True, meta=True, grad_name="ImagBackward0")


def _view_as_real_kernel(xp, a):
    # ``a.real`` shares ``a``'s memory and byte strides; the pair (real, imag) is one float element apart.
    half = a.itemsize // 2
    return strided_view(xp, a.real, a.shape + (2,), [s // half for s in a.strides] + [1], 0)


def _view_as_complex_kernel(xp, a):
    # The caller checked the layout (last dim of size 2 and stride 1, even strides), so the reinterpretation is a view.
    return a.view(_complex_of(a.dtype))[..., 0]


def _view_as_real_backward(ctx, g):
    return _apply(VIEW_AS_COMPLEX, g.contiguous())


VIEW_AS_REAL = defop("view_as_real", _view_as_real_kernel, _view_as_real_backward, View(), view=True,
                     grad_name="ViewAsRealBackward0")
VIEW_AS_COMPLEX = defop("view_as_complex", _view_as_complex_kernel, lambda ctx, g: _apply(VIEW_AS_REAL, g), View(),
                        view=True, grad_name="ViewAsComplexBackward0")
