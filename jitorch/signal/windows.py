"""``torch.signal.windows``: window functions of length ``M`` (SciPy's definitions), computed as torch computes them.

Each window is a ``linspace`` of phases followed by pointwise ops, the same steps and the same precision as
``torch.signal.windows`` (ATen's ``linspace`` fills float32 windows in float32), so values agree with torch's to the
last bits and the result lives on ``device`` (NumPy or CuPy) without a host round trip. ``sym=False`` gives the
periodic window for spectral analysis (the first ``M`` points of the symmetric window of ``M + 1``). As in torch,
``hann``, ``hamming``, ``general_hamming`` and ``nuttall`` are ``general_cosine`` and report errors under that name, and
``requires_grad=True`` makes the phase ``linspace`` a leaf, so the window itself comes out of a graph.

>>> import jitorch
>>> jitorch.signal.windows.bartlett(5)
tensor([0.0000, 0.5000, 1.0000, 0.5000, 0.0000])
>>> jitorch.signal.windows.hann(4, sym=False, dtype=jitorch.float64)
tensor([0.0000, 0.5000, 1.0000, 0.5000], dtype=jitorch.float64)
"""
from __future__ import annotations

import math
from collections.abc import Iterable

from .. import _creation, _dtype, _ranges

__all__ = ["bartlett", "blackman", "cosine", "exponential", "gaussian", "general_cosine", "general_hamming", "hamming",
           "hann", "kaiser", "nuttall"]


def _checks(name, M, dtype, layout):
    """torch's ``_window_function_checks``: the dtype resolved from the default, then M, layout and dtype checked."""
    dtype = _dtype.get_default_dtype() if dtype is None else dtype
    if M < 0:
        raise ValueError(f"{name} requires non-negative window length, got M={M}")
    if layout is not _dtype.strided:
        raise ValueError(f"{name} is implemented for strided tensors only, got: {layout}")
    if dtype not in (_dtype.float32, _dtype.float64):
        raise ValueError(f"{name} expects float32 or float64 dtypes, got: {dtype}")
    return dtype


def _trivial(M, dtype, layout, device, requires_grad, one=True):
    """The window for ``M == 0`` (empty) and, where torch short-cuts it, ``M == 1`` (``[1.]``); else None."""
    if M == 0 or (one and M == 1):
        make = _creation.empty if M == 0 else _creation.ones
        return make((M,), dtype=dtype, layout=layout, device=device, requires_grad=requires_grad)
    return None


def _phases(start, end, M, dtype, layout, device, requires_grad):
    return _ranges.linspace(start, end, M, dtype=dtype, layout=layout, device=device, requires_grad=requires_grad)


def exponential(M, *, center=None, tau=1.0, sym=True, dtype=None, layout=_dtype.strided, device=None,
                requires_grad=False):
    """The exponential (Poisson) window ``exp(-|n - center| / tau)``; ``center`` only for ``sym=False``.

    >>> import jitorch
    >>> jitorch.signal.windows.exponential(5, tau=2.0)
    tensor([0.3679, 0.6065, 1.0000, 0.6065, 0.3679])
    """
    dtype = _checks("exponential", M, dtype, layout)
    if tau <= 0:
        raise ValueError(f"Tau must be positive, got: {tau} instead.")
    if sym and center is not None:
        raise ValueError("Center must be None for symmetric windows")
    empty = _trivial(M, dtype, layout, device, requires_grad, one=False)
    if empty is not None:
        return empty
    if center is None:
        center = (M if not sym and M > 1 else M - 1) / 2.0
    constant = 1 / tau
    k = _phases(-center * constant, (-center + (M - 1)) * constant, M, dtype, layout, device, requires_grad)
    return k.abs().neg().exp()


def cosine(M, *, sym=True, dtype=None, layout=_dtype.strided, device=None, requires_grad=False):
    """The cosine (sine) window ``sin(pi (n + 0.5) / M)``, as SciPy's.

    >>> import jitorch
    >>> jitorch.signal.windows.cosine(4)
    tensor([0.3827, 0.9239, 0.9239, 0.3827])
    """
    dtype = _checks("cosine", M, dtype, layout)
    empty = _trivial(M, dtype, layout, device, requires_grad, one=False)
    if empty is not None:
        return empty
    constant = math.pi / (M + 1 if not sym and M > 1 else M)
    k = _phases(0.5 * constant, (0.5 + (M - 1)) * constant, M, dtype, layout, device, requires_grad)
    return k.sin()


def gaussian(M, *, std=1.0, sym=True, dtype=None, layout=_dtype.strided, device=None, requires_grad=False):
    """The Gaussian window ``exp(-(n / (2 std))^2)`` around the centre.

    >>> import jitorch
    >>> jitorch.signal.windows.gaussian(3, std=2.0)
    tensor([0.8825, 1.0000, 0.8825])
    """
    dtype = _checks("gaussian", M, dtype, layout)
    if std <= 0:
        raise ValueError(f"Standard deviation must be positive, got: {std} instead.")
    empty = _trivial(M, dtype, layout, device, requires_grad, one=False)
    if empty is not None:
        return empty
    start = -(M if not sym and M > 1 else M - 1) / 2.0
    constant = 1 / (std * math.sqrt(2))
    k = _phases(start * constant, (start + (M - 1)) * constant, M, dtype, layout, device, requires_grad)
    return k.pow(2).neg().exp()


def kaiser(M, *, beta=12.0, sym=True, dtype=None, layout=_dtype.strided, device=None, requires_grad=False):
    """The Kaiser window ``I0(beta sqrt(1 - (2n/N - 1)^2)) / I0(beta)``, ``N = M - 1`` (``M`` when ``sym=False``).

    >>> import jitorch
    >>> jitorch.signal.windows.kaiser(3, beta=1.0)
    tensor([0.7898, 1.0000, 0.7898])
    """
    dtype = _checks("kaiser", M, dtype, layout)
    if beta < 0:
        raise ValueError(f"beta must be non-negative, got: {beta} instead.")
    empty = _trivial(M, dtype, layout, device, requires_grad)
    if empty is not None:
        return empty
    # beta rounded to the window's dtype first, as torch does, so the square root never sees a negative rounding error
    beta = _creation.tensor(beta, dtype=dtype, device=device)
    start = -beta
    constant = 2.0 * beta / (M if not sym else M - 1)
    end = beta.minimum(start + (M - 1) * constant)
    k = _phases(start, end, M, dtype, layout, device, requires_grad)
    return (beta * beta - k.pow(2)).sqrt().i0() / beta.i0()


def general_cosine(M, *, a, sym=True, dtype=None, layout=_dtype.strided, device=None, requires_grad=False):
    """The generalized cosine window ``sum_i (-1)^i a[i] cos(2 pi i n / N)``, ``N = M - 1`` (``M`` when ``sym=False``).

    >>> import jitorch
    >>> jitorch.signal.windows.general_cosine(5, a=[0.5, 0.5])
    tensor([0.0000, 0.5000, 1.0000, 0.5000, 0.0000])
    """
    dtype = _checks("general_cosine", M, dtype, layout)
    empty = _trivial(M, dtype, layout, device, requires_grad)
    if empty is not None:
        return empty
    if not isinstance(a, Iterable):
        raise TypeError("Coefficients must be a list/tuple")
    if not a:
        raise ValueError("Coefficients cannot be empty")
    constant = 2 * math.pi / (M if not sym else M - 1)
    k = _phases(0, (M - 1) * constant, M, dtype, layout, device, requires_grad)
    a_i = _creation.tensor([(-1) ** i * w for i, w in enumerate(a)], device=device, dtype=dtype,
                           requires_grad=requires_grad)
    i = _ranges.arange(a_i.shape[0], dtype=a_i.dtype, device=a_i.device, requires_grad=a_i.requires_grad)
    return (a_i.unsqueeze(-1) * (i.unsqueeze(-1) * k).cos()).sum(0)


def general_hamming(M, *, alpha=0.54, sym=True, dtype=None, layout=_dtype.strided, device=None, requires_grad=False):
    """The generalized Hamming window ``alpha - (1 - alpha) cos(2 pi n / N)``.

    >>> import jitorch
    >>> jitorch.signal.windows.general_hamming(3, alpha=0.6)
    tensor([0.2000, 1.0000, 0.2000])
    """
    return general_cosine(M, a=[alpha, 1.0 - alpha], sym=sym, dtype=dtype, layout=layout, device=device,
                          requires_grad=requires_grad)


def hamming(M, *, sym=True, dtype=None, layout=_dtype.strided, device=None, requires_grad=False):
    """The Hamming window, ``general_hamming`` with ``alpha=0.54``.

    >>> import jitorch
    >>> jitorch.signal.windows.hamming(3)
    tensor([0.0800, 1.0000, 0.0800])
    """
    return general_hamming(M, sym=sym, dtype=dtype, layout=layout, device=device, requires_grad=requires_grad)


def hann(M, *, sym=True, dtype=None, layout=_dtype.strided, device=None, requires_grad=False):
    """The Hann window ``sin^2(pi n / N)``, ``general_hamming`` with ``alpha=0.5``.

    >>> import jitorch
    >>> jitorch.signal.windows.hann(3)
    tensor([0., 1., 0.])
    """
    return general_hamming(M, alpha=0.5, sym=sym, dtype=dtype, layout=layout, device=device,
                           requires_grad=requires_grad)


def blackman(M, *, sym=True, dtype=None, layout=_dtype.strided, device=None, requires_grad=False):
    """The Blackman window, ``general_cosine`` with ``a=[0.42, 0.5, 0.08]``.

    >>> import jitorch
    >>> jitorch.signal.windows.blackman(3)
    tensor([-1.4901e-08,  1.0000e+00, -1.4901e-08])
    """
    dtype = _checks("blackman", M, dtype, layout)
    return general_cosine(M, a=[0.42, 0.5, 0.08], sym=sym, dtype=dtype, layout=layout, device=device,
                          requires_grad=requires_grad)


def bartlett(M, *, sym=True, dtype=None, layout=_dtype.strided, device=None, requires_grad=False):
    """The Bartlett (triangular) window ``1 - |2n/N - 1|``.

    >>> import jitorch
    >>> jitorch.signal.windows.bartlett(4, sym=False)
    tensor([0.0000, 0.5000, 1.0000, 0.5000])
    """
    dtype = _checks("bartlett", M, dtype, layout)
    empty = _trivial(M, dtype, layout, device, requires_grad)
    if empty is not None:
        return empty
    constant = 2 / (M if not sym else M - 1)
    k = _phases(-1, -1 + (M - 1) * constant, M, dtype, layout, device, requires_grad)
    return 1 - k.abs()


def nuttall(M, *, sym=True, dtype=None, layout=_dtype.strided, device=None, requires_grad=False):
    """The minimum 4-term Blackman-Harris window of Nuttall, ``general_cosine`` with its four coefficients.

    >>> import jitorch
    >>> jitorch.signal.windows.nuttall(3)
    tensor([3.6280e-04, 1.0000e+00, 3.6280e-04])
    """
    return general_cosine(M, a=[0.3635819, 0.4891775, 0.1365995, 0.0106411], sym=sym, dtype=dtype, layout=layout,
                          device=device, requires_grad=requires_grad)
