"""ATen's CPU gamma sampler replayed on torch's random stream, so that after ``manual_seed`` the Gamma, Chi2,
StudentT, Beta and Dirichlet samples of a CPU run are torch's numbers (mixup's ``Beta(a, a).sample()``, Dirichlet
priors, ...).

ATen (``_s_gamma_cpu``, ``_s_dirichlet_cpu``) runs ``sample_gamma`` (``ATen/native/Distributions.h``) serially over
the output in row-major order: an ``alpha < 1`` first draws one 53-bit uniform for its boost ``U^(1/alpha)``, then
Marsaglia and Tsang's rejection loop draws a scalar ``normal_distribution<double>`` (the generator's cached second
Box-Muller sample included) and a uniform per round. The arithmetic keeps ATen's types: for float32 ``alpha`` the
boost exponent, ``alpha + 1`` and ``d = alpha - 1/3`` are float32 operations, and the float literals ``1.0f / 3.0f``
and ``0.0331f`` enter as their float32 values. ``torch_standard_gamma``/``torch_dirichlet`` run the sampler as
generated code (`codegen.llvm_samplers`, over a block of the stream's uniforms); the ``_reference`` versions are
the per-draw Python loop (a few microseconds a draw) the tests hold them to.
"""
from __future__ import annotations

import math

import numpy as np

from ..codegen.llvm_samplers import sampler
from .._uniform_tape import run_sampler

__all__ = ["torch_dirichlet", "torch_dirichlet_reference", "torch_standard_gamma", "torch_standard_gamma_reference"]

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


def _native_gammas(stream, kind, alpha, max_block):
    """The generated ``kind`` sampler (``gamma``: ``alpha``'s dtype, ``dirichlet``: float64) over ``alpha``."""
    flat = np.ascontiguousarray(alpha).reshape(-1)
    out = np.empty(flat.size, alpha.dtype if kind == "gamma" else np.float64)
    # a uniform and about one normal (half a Box-Muller pair) a round, ~1.05 rounds; the boost's uniform below 1
    expected = 2.2 * flat.size + float(np.count_nonzero(flat < 1))
    extra = {} if max_block is None else {"max_block": max_block}
    run_sampler(stream, sampler(kind, alpha.dtype), flat, flat, out, expected + 16, **extra)
    return out.reshape(alpha.shape)


def torch_standard_gamma(stream, alpha, max_block=None):
    """``torch._standard_gamma`` of the float32/float64 array ``alpha`` on ``stream``: draws of ``alpha``'s dtype,
    at least its smallest normal number (also where ATen's loop gives 0 or NaN: a zero, NaN or too negative
    ``alpha``), by the generated sampler; ``max_block`` caps the uniforms drawn ahead."""
    return _native_gammas(stream, "gamma", alpha, max_block)


def torch_dirichlet(stream, alpha, max_block=None):
    """``torch._sample_dirichlet`` of ``alpha`` (float32/float64) on ``stream``, by the generated sampler: float64
    gammas (at least float64's smallest normal) along the last dim, normalised, cast and clamped to
    ``[tiny, nextafter(1, 0)]`` in ``alpha``'s dtype, as ATen."""
    return _normalised(_native_gammas(stream, "dirichlet", alpha, max_block), alpha.dtype)


def torch_standard_gamma_reference(stream, alpha):
    """``torch_standard_gamma`` replayed per draw in Python."""
    single = alpha.dtype == np.float32
    uniform, normal = _draws(stream)
    tiny = alpha.dtype.type(np.finfo(alpha.dtype).tiny)
    out = [max(tiny, alpha.dtype.type(_one_gamma(a, uniform, normal, single))) for a in alpha.reshape(-1).tolist()]
    return np.array(out, alpha.dtype).reshape(alpha.shape)


def torch_dirichlet_reference(stream, alpha):
    """``torch_dirichlet`` replayed per draw in Python."""
    uniform, normal = _draws(stream)
    tiny64 = np.finfo(np.float64).tiny
    gammas = np.array([max(tiny64, _one_gamma(a, uniform, normal, False)) for a in alpha.reshape(-1).tolist()],
                      np.float64).reshape(alpha.shape)
    return _normalised(gammas, alpha.dtype)


def _aten_row_sum(gammas):
    """``gammas.sum(-1)`` in the order of ATen's float64 inner sum (``vectorized_inner_sum``): four-lane vectors,
    every fourth one into the same of four accumulators (the vectors past the last whole group of four into the
    first), the accumulators added together; then the scalar tail, and the lanes added to it. Rows of more than
    256 terms go through ATen's cascade levels, not copied here: NumPy's sum (it may differ in the last bit)."""
    n = gammas.shape[-1]
    if n > 256:
        return gammas.sum(-1)
    vectors, groups = n // 4, n // 16
    acc = [np.zeros(gammas.shape[:-1] + (4,)) for _ in range(4)]
    for g in range(groups):
        for k in range(4):
            acc[k] = acc[k] + gammas[..., 16 * g + 4 * k:16 * g + 4 * k + 4]
    for v in range(4 * groups, vectors):
        acc[0] = acc[0] + gammas[..., 4 * v:4 * v + 4]
    for k in range(1, 4):
        acc[0] = acc[0] + acc[k]
    total = np.zeros(gammas.shape[:-1])
    for i in range(4 * vectors, n):
        total = total + gammas[..., i]
    for lane in range(4):
        total = total + acc[0][..., lane]
    return total


def _normalised(gammas, dtype):
    """ATen's Dirichlet from its float64 gammas: divided by their sum along the last dim (ATen's order), cast to
    ``dtype`` and clamped to ``[tiny, nextafter(1, 0)]``."""
    ratio = (gammas / _aten_row_sum(gammas)[..., None]).astype(dtype)
    top = np.nextafter(dtype.type(1), dtype.type(0))
    return np.minimum(top, np.fmax(np.finfo(dtype).tiny, ratio))  # std::max(tiny, NaN) is tiny
