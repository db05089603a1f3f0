"""Discrete Fourier transform primitives, as ATen's: complex-to-complex, real-to-complex and complex-to-real.

``fft_c2c(x, dims, norm, forward)``, ``fft_r2c(x, dims, norm, onesided)`` (always forward) and ``fft_c2r(x, dims,
norm, last_dim_size)`` (always inverse) transform over ``dims`` at their current sizes; ``jitorch.fft`` pads, trims,
promotes and conjugates around them. ``norm`` is direction-free: ``"none"``, ``"sqrt"`` or ``"n"`` scales the result
by 1, 1/sqrt(N) or 1/N, N the number of points transformed.

Kernels call ``scipy.fft`` / ``cupyx.scipy.fft`` (``runtime.fft_module``). Backwards are PyTorch's: the adjoint of a
c2c transform is the unnormalized-alike c2c in the other direction; r2c's is a c2c of the gradient zero-padded to the
full spectrum, real part; c2r's is an r2c whose mirrored bins count twice (each stands for itself and its conjugate).

>>> import jitorch
>>> x = jitorch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
>>> jitorch.fft.rfft(x)
tensor([10.+0.j, -2.+2.j, -2.+0.j], grad_fn=<FftR2CBackward0>)
>>> jitorch.fft.irfft(jitorch.fft.rfft(x), n=4).sum().backward()
>>> x.grad
tensor([1., 1., 1., 1.])
"""
from __future__ import annotations

import numpy as np

from ..runtime import fft_module
from .table import Opaque, defop

NORMS = ("none", "sqrt", "n")
_LIBRARY = Opaque("FFT library call")


def _apply(op, *args, **attrs):
    from .._dispatch import apply

    return apply(op, *args, **attrs)


def _library_norm(norm, forward):
    # SciPy's (and NumPy's) names are relative to the direction: "backward" leaves the forward transform unscaled.
    if norm == "sqrt":
        return "ortho"
    return ("backward" if norm == "none" else "forward") if forward else ("forward" if norm == "none" else "backward")


def _complex_of(dtype):
    return np.result_type(dtype, np.complex64)


def _real_of(dtype):
    return np.empty(0, dtype).real.dtype


def _c2c_kernel(xp, a, dims, norm, forward):
    if not dims:
        return a.copy()
    lib = fft_module(xp)
    out = (lib.fftn if forward else lib.ifftn)(a, axes=dims, norm=_library_norm(norm, forward))
    return out.astype(a.dtype, copy=False)  # the library may widen; torch keeps complex64 as complex64


def _c2c_backward(ctx, g):
    attrs = ctx.attrs
    return _apply(FFT_C2C, g, dims=attrs["dims"], norm=attrs["norm"], forward=not attrs["forward"])


FFT_C2C = defop("fft_c2c", _c2c_kernel, _c2c_backward, _LIBRARY, grad_name="FftC2CBackward0")


def _r2c_kernel(xp, a, dims, norm, onesided):
    half = fft_module(xp).rfftn(a, axes=dims, norm=_library_norm(norm, True)).astype(_complex_of(a.dtype), copy=False)
    return half if onesided else _hermitian_fill(xp, half, dims, a.shape[dims[-1]])


def _hermitian_fill(xp, half, dims, n):
    """The full spectrum of a real signal from its one-sided half, as ATen fills it: X[-k] = conj(X[k]).

    Half the work of a complex transform, and the bins keep rfft's signs (a complex transform of the real input gives
    -0 imaginary parts where torch gives +0, which flips the angle of a negative bin from pi to -pi).
    """
    last = dims[-1]
    mirrored = n - half.shape[last]  # bins n // 2 + 1 .. n - 1 mirror bins n - n // 2 - 1 .. 1
    if mirrored <= 0:
        return half
    index = [slice(None)] * half.ndim
    index[last] = slice(mirrored, 0, -1)
    upper = half[tuple(index)]
    for d in dims[:-1]:  # index -k along the other transformed dims: reversed, then rolled so that 0 stays 0
        upper = xp.roll(xp.flip(upper, d), 1, d)
    return xp.concatenate([half, xp.conj(upper)], axis=last)


def _r2c_backward(ctx, g):
    from .. import _movement

    dims, norm = ctx.attrs["dims"], ctx.attrs["norm"]
    if ctx.attrs["onesided"]:
        # The one-sided transform is the full one with the upper bins dropped: put zeros back where they were.
        last = dims[-1]
        missing = ctx.in_meta[0][0][last] - g.shape[last]
        if missing > 0:
            zeros = g.new_zeros(tuple(missing if d == last else n for d, n in enumerate(g.shape)))
            g = _movement.cat([g, zeros], last)
    return _apply(FFT_C2C, g, dims=dims, norm=norm, forward=False).real


FFT_R2C = defop("fft_r2c", _r2c_kernel, _r2c_backward, _LIBRARY, meta=True, grad_name="FftR2CBackward0")


def _c2r_kernel(xp, a, dims, norm, last_dim_size):
    lib = fft_module(xp)
    sizes = [a.shape[d] for d in dims[:-1]] + [last_dim_size]
    out = lib.irfftn(a, s=sizes, axes=dims, norm=_library_norm(norm, False))
    return out.astype(_real_of(a.dtype), copy=False)


def _c2r_backward(ctx, g):
    from .. import _creation

    dims = ctx.attrs["dims"]
    last = dims[-1]
    grad = _apply(FFT_R2C, g, dims=dims, norm=ctx.attrs["norm"], onesided=True)
    # Bins 1 .. n - (n // 2 + 1) stand for themselves and their mirror images, which the forward filled in.
    doubled = g.shape[last] - grad.shape[last]
    if doubled > 0:
        weights = np.ones(grad.shape[last])
        weights[1:1 + doubled] = 2.0
        shape = [-1 if d == last else 1 for d in range(grad.dim())]
        grad = grad * _creation.tensor(weights, dtype=g.dtype, device=g.device).reshape(shape)
    return grad


FFT_C2R = defop("fft_c2r", _c2r_kernel, _c2r_backward, _LIBRARY, grad_name="FftC2RBackward0")
