"""ATen's CPU gamma sampler replayed on torch's random stream, so that after ``manual_seed`` the Gamma, Chi2,
StudentT, Beta and Dirichlet samples of a CPU run are torch's numbers (mixup's ``Beta(a, a).sample()``, Dirichlet
priors, ...).

ATen (``_s_gamma_cpu``, ``_s_dirichlet_cpu``) runs ``sample_gamma`` (``ATen/native/Distributions.h``) serially over
the output in row-major order: an ``alpha < 1`` first draws one 53-bit uniform for its boost ``U^(1/alpha)``, then
Marsaglia and Tsang's rejection loop draws a scalar ``normal_distribution<double>`` (the generator's cached second
Box-Muller sample included) and a uniform per round. The arithmetic keeps ATen's types: for float32 ``alpha`` the
boost exponent, ``alpha + 1`` and ``d = alpha - 1/3`` are float32 operations, and the float literals ``1.0f / 3.0f``
and ``0.0331f`` enter as their float32 values. The loop is per element in Python: a few microseconds a draw.
"""
from __future__ import annotations

import math

import numpy as np

_THIRD_F32 = float(np.float32(1.0) / np.float32(3.0))  # ATen's `1.0f / 3.0f`, promoted to double
_SQUEEZE_F32 = float(np.float32(0.0331))  # `0.0331f`


def _sqrt(x):
    return math.sqrt(x) if x >= 0 else math.nan  # C's sqrt: NaN for a negative (or NaN) argument


def _log(x):
    return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)


def _one_gamma(alpha, uniform, normal, single):
    """One ``sample_gamma(alpha)`` as ATen computes it, C's NaN semantics included (a NaN or too negative ``alpha``
    draws one round and returns NaN): ``single`` for float32 ``alpha`` (scalar_t = float)."""
    scale = 1.0
    if alpha < 1.0:
        if alpha == 0.0:
            return 0.0
        if single:
            exponent = float(np.float32(1.0) / np.float32(alpha))
            alpha = float(np.float32(alpha) + np.float32(1.0))
        else:
            exponent = 1.0 / alpha
            alpha = alpha + 1.0
        scale *= math.pow(1.0 - uniform(), exponent)
    d = float(np.float32(alpha) - np.float32(_THIRD_F32)) if single else alpha - _THIRD_F32
    c = 1.0 / _sqrt(9.0 * d) if d != 0 else math.inf
    while True:
        while True:
            x = normal()
            y = 1.0 + c * x
            if not y <= 0:  # ATen's `do ... while (y <= 0)`: a NaN y leaves the loop
                break
        v = y * y * y
        u = 1.0 - uniform()
        xx = x * x
        if u < 1.0 - _SQUEEZE_F32 * xx * xx:
            return scale * d * v
        if _log(u) < 0.5 * xx + d * (1.0 - v + _log(v)):
            return scale * d * v


def _draws(stream):
    """The stream's scalar uniform and normal draws, as ATen's ``BaseSampler`` lambdas make them."""
    return (lambda: float(stream._uniform(1, True)[0]),
            lambda: float(stream._scalar_normals(1, 0.0, 1.0)[0]))


def torch_standard_gamma(stream, alpha):
    """``torch._standard_gamma`` of the float32/float64 array ``alpha`` on ``stream``: draws of ``alpha``'s dtype,
    at least its smallest normal number (also where ATen's loop gives 0 or NaN: a zero, NaN or too negative
    ``alpha``)."""
    single = alpha.dtype == np.float32
    uniform, normal = _draws(stream)
    tiny = alpha.dtype.type(np.finfo(alpha.dtype).tiny)
    out = [max(tiny, alpha.dtype.type(_one_gamma(a, uniform, normal, single))) for a in alpha.reshape(-1).tolist()]
    return np.array(out, alpha.dtype).reshape(alpha.shape)


def torch_dirichlet(stream, alpha):
    """``torch._sample_dirichlet`` of ``alpha`` (float32/float64) on ``stream``: float64 gammas (at least float64's
    smallest normal) along the last dim, normalised, cast and clamped to ``[tiny, nextafter(1, 0)]`` in ``alpha``'s
    dtype, as ATen."""
    uniform, normal = _draws(stream)
    tiny64 = np.finfo(np.float64).tiny
    gammas = np.array([max(tiny64, _one_gamma(a, uniform, normal, False)) for a in alpha.reshape(-1).tolist()],
                      np.float64).reshape(alpha.shape)
    ratio = (gammas / gammas.sum(-1, keepdims=True)).astype(alpha.dtype)
    top = np.nextafter(alpha.dtype.type(1), alpha.dtype.type(0))
    return np.minimum(top, np.fmax(np.finfo(alpha.dtype).tiny, ratio))  # std::max(tiny, NaN) is tiny
