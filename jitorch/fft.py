"""``jitorch.fft``: discrete Fourier transforms, as ``torch.fft``.

Every transform is a composite of the three rows of ``ops/fft.py`` (``fft_c2c``, ``fft_r2c``, ``fft_c2r``), built as
ATen builds ``torch.fft``: the input is promoted (integers to the default float dtype; half precision is refused, as
on torch's CPU), padded with zeros or trimmed to ``n``/``s`` along the transformed dims, then transformed; the
inverse real transforms and the Hermitian ones conjugate around the rows. Gradients come from the rows' backwards,
so they follow PyTorch's complex convention, padding and trimming included.

>>> import jitorch
>>> jitorch.fft.fft(jitorch.tensor([1.0, 0.0, -1.0, 0.0]))
tensor([0.+0.j, 2.+0.j, 0.+0.j, 2.-0.j])
>>> jitorch.fft.irfft(jitorch.fft.rfft(jitorch.tensor([1.0, 2.0, 3.0])), n=3)
tensor([1., 2., 3.])
>>> jitorch.fft.fftfreq(4)
tensor([ 0.0000,  0.2500, -0.5000, -0.2500])
"""
from __future__ import annotations

import operator

import numpy as np

from . import _creation, _dtype, _movement
from ._dispatch import TORCH_TYPE_NAMES, apply
from ._pointwise import _write_out, check_out_tensor
from ._shape import wrap_dim
from ._tensor import Tensor
from .amp._cast_mode import autocast_policy
from .autograd.grad_mode import GradState
from .ops import fft as F

__all__ = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2", "hfft2", "ihfft2",
           "fftn", "ifftn", "rfftn", "irfftn", "hfftn", "ihfftn", "fftshift", "ifftshift", "fftfreq", "rfftfreq"]


# PyTorch's CPU autocast float32 list holds these transforms (not the n-d Hermitian ones, which refuse bfloat16):
# under autocast a bfloat16 activation is transformed in float32 instead of refused. CUDA autocast leaves them.
_FP32_ON_CPU = autocast_policy(cpu="fp32")


# -- argument handling --------------------------------------------------------------------------------------------
def _norm(norm, forward, fname):
    """NumPy's direction-relative norm name as the rows' direction-free scaling (ATen's ``norm_from_string``)."""
    if norm is None or norm == "backward":
        return "none" if forward else "n"
    if norm == "forward":
        return "n" if forward else "none"
    if norm == "ortho":
        return "sqrt"
    raise RuntimeError(f'{fname}: Invalid normalization mode: "{norm}" (expected "forward", "backward" or "ortho")')


def _type_name(t):
    return TORCH_TYPE_NAMES[t.dtype.name]


def _promote(x, fname, require_complex=False):
    """Integers (and bool) become the default float dtype; float32/float64 stay; half precision is an error."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{fname}(): argument 'input' must be Tensor, not {type(x).__name__}")
    if x.is_complex():
        return x
    if not x.is_floating_point():
        x = x.to(_dtype.get_default_dtype())
    if x.dtype not in (_dtype.float32, _dtype.float64):
        raise RuntimeError(f"{fname}: Unsupported dtype {_type_name(x)} (half-precision FFTs are not supported; "
                           "convert the input to float32)")
    return x.to(x.dtype.to_complex()) if require_complex else x


def _require_real(x, fname):
    if isinstance(x, Tensor) and x.is_complex():
        raise RuntimeError(f"{fname} expects a real input tensor, but got {_type_name(x)}")


def _wrap(dim, ndim, fname):
    if ndim == 0:
        raise IndexError(f"{fname}: Dimension specified as {dim} but tensor has no dimensions")
    return wrap_dim(dim, ndim, fname)


def _points(n, fname):
    n = operator.index(n)
    if n < 1:
        raise RuntimeError(f"{fname}: Invalid number of data points ({n}) specified")
    return n


def _resize(x, dims, sizes):
    """``x`` trimmed or zero-padded (at the end) so that ``x.shape[dims[i]] == sizes[i]``."""
    for d, n in zip(dims, sizes):
        have = x.shape[d]
        if have > n:
            x = x.narrow(d, 0, n)
        elif have < n:
            zeros = x.new_zeros(tuple(n - have if i == d else s for i, s in enumerate(x.shape)))
            x = _movement.cat([x, zeros], d)
    return x


def _shape_and_dims(x, s, dim, fname):
    """ATen's ``canonicalize_fft_shape_and_dim_args``: wrapped unique dims and the signal size along each."""
    ndim = x.dim()
    dims = None
    if dim is not None:
        dims = tuple(_wrap(d, ndim, fname) for d in ((dim,) if isinstance(dim, int) else dim))
        if len(set(dims)) != len(dims):
            raise RuntimeError(f"{fname}: FFT dims must be unique, got {list(dim)}")
    if s is not None:
        s = (s,) if isinstance(s, int) else tuple(s)
        if dims is not None and len(dims) != len(s):
            raise RuntimeError(f"{fname}: When given, dim and shape arguments must have the same length, got dim "
                               f"{list(dims)} and s {list(s)}")
        if len(s) > ndim:
            raise RuntimeError(f"{fname}: Got shape with {len(s)} values but input tensor only has {ndim} dimensions.")
        if dims is None:
            dims = tuple(range(ndim - len(s), ndim))
        sizes = tuple(x.shape[d] if operator.index(n) == -1 else operator.index(n) for d, n in zip(dims, s))
    else:
        dims = tuple(range(ndim)) if dims is None else dims
        sizes = tuple(x.shape[d] for d in dims)
    for n in sizes:
        _points(n, fname)
    return sizes, dims


def _out(result, out, fname):
    """torch's ``out=`` rules for the transforms: a complex (or real) out tensor, and no autograd through it."""
    if out is None:
        return result
    check_out_tensor(out, f"fft_{fname}")
    if result.is_complex() and not out.is_complex():
        raise RuntimeError(f"{fname} expects a complex output tensor, but got {_type_name(out)}")
    if not result.is_complex() and not out.is_floating_point():
        raise RuntimeError(f"{fname} expects a floating point output tensor, but got {_type_name(out)}")
    if result.requires_grad and GradState.enabled:
        raise RuntimeError(f"{fname}(): functions with out=... arguments don't support automatic differentiation, "
                           "but one of the arguments requires grad.")
    return _write_out(result, out, fname)


# -- one-dimensional transforms -----------------------------------------------------------------------------------
def _c2c_or_r2c(x, n, dim, norm, forward, onesided, fname):
    x = _promote(x, fname)
    d = _wrap(dim, x.dim(), fname)
    x = _resize(x, (d,), (_points(n, fname),)) if n is not None else x
    _points(x.shape[d], fname)
    mode = _norm(norm, forward, fname)
    if x.is_complex():
        return apply(F.FFT_C2C, x, dims=(d,), norm=mode, forward=forward)
    out = apply(F.FFT_R2C, x, dims=(d,), norm=mode, onesided=onesided)
    return out if forward else out.conj()  # an inverse real transform is the conjugate of the forward one


def _c2r(x, n, dim, norm, forward, fname):
    x = _promote(x, fname, require_complex=True)
    d = _wrap(dim, x.dim(), fname)
    n = _points(2 * (x.shape[d] - 1) if n is None else n, fname)
    x = _resize(x, (d,), (n // 2 + 1,))
    if forward:  # hfft: the forward transform of a Hermitian signal is the inverse one of its conjugate
        x = x.conj()
    return apply(F.FFT_C2R, x, dims=(d,), norm=_norm(norm, forward, fname), last_dim_size=n)


@_FP32_ON_CPU
def fft(input, n=None, dim=-1, norm=None, *, out=None):
    """One-dimensional discrete Fourier transform over ``dim`` (``n`` points: zero-padded or trimmed)."""
    return _out(_c2c_or_r2c(input, n, dim, norm, True, False, "fft"), out, "fft")


@_FP32_ON_CPU
def ifft(input, n=None, dim=-1, norm=None, *, out=None):
    """Inverse of ``fft`` (scaled by 1/n with the default ``norm="backward"``)."""
    return _out(_c2c_or_r2c(input, n, dim, norm, False, False, "ifft"), out, "ifft")


@_FP32_ON_CPU
def rfft(input, n=None, dim=-1, norm=None, *, out=None):
    """``fft`` of a real signal, keeping the ``n // 2 + 1`` non-negative frequencies."""
    _require_real(input, "rfft")
    return _out(_c2c_or_r2c(input, n, dim, norm, True, True, "rfft"), out, "rfft")


@_FP32_ON_CPU
def irfft(input, n=None, dim=-1, norm=None, *, out=None):
    """Inverse of ``rfft``: a real signal of ``n`` points (default ``2 * (input.size(dim) - 1)``)."""
    return _out(_c2r(input, n, dim, norm, False, "irfft"), out, "irfft")


@_FP32_ON_CPU
def hfft(input, n=None, dim=-1, norm=None, *, out=None):
    """The real ``fft`` of a Hermitian-symmetric signal given by its first half."""
    return _out(_c2r(input, n, dim, norm, True, "hfft"), out, "hfft")


@_FP32_ON_CPU
def ihfft(input, n=None, dim=-1, norm=None, *, out=None):
    """Inverse of ``hfft``: the one-sided ``ifft`` of a real signal."""
    _require_real(input, "ihfft")
    return _out(_c2c_or_r2c(input, n, dim, norm, False, True, "ihfft"), out, "ihfft")


# -- n-dimensional transforms -------------------------------------------------------------------------------------
def _c2cn(x, s, dim, norm, forward, fname):
    sizes, dims = _shape_and_dims(x, s, dim, fname)
    x = _resize(_promote(x, fname, require_complex=True), dims, sizes)
    return apply(F.FFT_C2C, x, dims=dims, norm=_norm(norm, forward, fname), forward=forward)


@_FP32_ON_CPU
def fftn(input, s=None, dim=None, norm=None, *, out=None):
    """``fft`` over several dims (all by default, or the last ``len(s)``), each padded or trimmed to ``s``."""
    return _out(_c2cn(input, s, dim, norm, True, "fftn"), out, "fftn")


@_FP32_ON_CPU
def ifftn(input, s=None, dim=None, norm=None, *, out=None):
    """Inverse of ``fftn``."""
    return _out(_c2cn(input, s, dim, norm, False, "ifftn"), out, "ifftn")


def _real_shape_and_dims(x, s, dim, fname):
    sizes, dims = _shape_and_dims(x, s, dim, fname)
    if not dims:
        raise RuntimeError(f"{fname} must transform at least one axis")
    return sizes, dims


@_FP32_ON_CPU
def rfftn(input, s=None, dim=None, norm=None, *, out=None):
    """``fftn`` of a real signal, one-sided in the last transformed dim."""
    if isinstance(input, Tensor) and input.is_complex():
        raise RuntimeError(f"rfftn expects a real-valued input tensor, but got {_type_name(input)}")
    sizes, dims = _real_shape_and_dims(input, s, dim, "rfftn")
    x = _resize(_promote(input, "rfftn"), dims, sizes)
    return _out(apply(F.FFT_R2C, x, dims=dims, norm=_norm(norm, True, "rfftn"), onesided=True), out, "rfftn")


def _c2r_shape_and_dims(x, s, dim, fname):
    """The transformed dims, the input sizes along them (the last one halved) and the output's last size."""
    sizes, dims = _real_shape_and_dims(x, s, dim, fname)
    if s is None or tuple((s,) if isinstance(s, int) else s)[-1] == -1:
        last = 2 * (x.shape[dims[-1]] - 1)
    else:
        last = sizes[-1]
    last = _points(last, fname)
    return sizes[:-1] + (last // 2 + 1,), dims, last


@_FP32_ON_CPU
def irfftn(input, s=None, dim=None, norm=None, *, out=None):
    """Inverse of ``rfftn``: a real signal (last transformed size ``s[-1]``, default ``2 * (size - 1)``)."""
    sizes, dims, last = _c2r_shape_and_dims(input, s, dim, "irfftn")
    x = _resize(_promote(input, "irfftn", require_complex=True), dims, sizes)
    return _out(apply(F.FFT_C2R, x, dims=dims, norm=_norm(norm, False, "irfftn"), last_dim_size=last), out, "irfftn")


def hfftn(input, s=None, dim=None, norm=None, *, out=None):
    """``fftn`` of a Hermitian-symmetric signal given by its half along the last dim: a real result."""
    sizes, dims, last = _c2r_shape_and_dims(input, s, dim, "hfftn")
    x = _resize(_promote(input, "hfftn", require_complex=True), dims, sizes)
    mode = _norm(norm, True, "hfftn")
    if len(dims) > 1:
        x = apply(F.FFT_C2C, x, dims=dims[:-1], norm=mode, forward=True)
    return _out(apply(F.FFT_C2R, x.conj(), dims=dims[-1:], norm=mode, last_dim_size=last), out, "hfftn")


def ihfftn(input, s=None, dim=None, norm=None, *, out=None):
    """Inverse of ``hfftn``: the one-sided ``ifftn`` of a real signal."""
    _require_real(input, "ihfftn")
    sizes, dims = _real_shape_and_dims(input, s, dim, "ihfftn")
    x = _resize(_promote(input, "ihfftn"), dims, sizes)
    mode = _norm(norm, False, "ihfftn")
    result = apply(F.FFT_R2C, x, dims=dims[-1:], norm=mode, onesided=True).conj()
    if len(dims) > 1:
        result = apply(F.FFT_C2C, result, dims=dims[:-1], norm=mode, forward=False)
    return _out(result, out, "ihfftn")


@_FP32_ON_CPU
def fft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """``fftn`` over the last two dims."""
    return fftn(input, s, dim, norm, out=out)


@_FP32_ON_CPU
def ifft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """``ifftn`` over the last two dims."""
    return ifftn(input, s, dim, norm, out=out)


@_FP32_ON_CPU
def rfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """``rfftn`` over the last two dims."""
    return rfftn(input, s, dim, norm, out=out)


@_FP32_ON_CPU
def irfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """``irfftn`` over the last two dims."""
    return irfftn(input, s, dim, norm, out=out)


def hfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """``hfftn`` over the last two dims."""
    return hfftn(input, s, dim, norm, out=out)


def ihfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """``ihfftn`` over the last two dims."""
    return ihfftn(input, s, dim, norm, out=out)


# -- helpers: shifts and sample frequencies -----------------------------------------------------------------------
def _shift(x, dim, up, fname):
    dims = tuple(range(x.dim())) if dim is None else tuple(
        _wrap(d, x.dim(), fname) for d in ((dim,) if isinstance(dim, int) else dim))
    return _movement.roll(x, [(x.shape[d] + up) // 2 for d in dims], dims)


def fftshift(input, dim=None):
    """Move the zero-frequency term to the centre (``roll`` by ``size // 2`` along ``dim``, all dims by default)."""
    return _shift(input, dim, 0, "fftshift")


def ifftshift(input, dim=None):
    """Inverse of ``fftshift`` (``roll`` by ``(size + 1) // 2``)."""
    return _shift(input, dim, 1, "ifftshift")


def _frequencies(k, n, d, dtype, device, requires_grad, out, fname):
    dtype = _dtype.get_default_dtype() if dtype is None else _dtype.to_dtype(dtype)
    if out is not None:
        check_out_tensor(out, f"fft_{fname}")
        dtype = out.dtype
    if dtype.category < _dtype.FLOAT:
        raise RuntimeError(f"{fname} requires a floating point or complex dtype, got {dtype}")
    # Integers exactly in ``dtype``, then one multiply by 1 / (n * d) in ``dtype``: torch's rounding. n * d == 0 gives
    # inf (torch's C++ division), not ZeroDivisionError.
    result = _creation.tensor(k, dtype=dtype, device=device) * float(np.divide(1.0, n * d))
    if out is not None:
        return _write_out(result, out, fname)
    return result.requires_grad_(requires_grad) if requires_grad else result


def fftfreq(n, d=1.0, *, out=None, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    """Sample frequencies of an ``n``-point ``fft`` with sample spacing ``d``: ``[0, 1, ..., -2, -1] / (n * d)``."""
    n = operator.index(n)
    k = np.concatenate([np.arange((n + 1) // 2), np.arange(-(n // 2), 0)]).astype(np.int64)
    return _frequencies(k, n, d, dtype, device, requires_grad, out, "fftfreq")


def rfftfreq(n, d=1.0, *, out=None, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    """Sample frequencies of an ``n``-point ``rfft``: ``[0, 1, ..., n // 2] / (n * d)``."""
    n = operator.index(n)
    return _frequencies(np.arange(n // 2 + 1, dtype=np.int64), n, d, dtype, device, requires_grad, out, "rfftfreq")
