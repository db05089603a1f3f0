"""ATen's CPU binomial sampler (``sample_binomial`` in ``ATen/native/Distributions.h``) replayed on torch's random
stream, so ``torch.binomial`` and ``Binomial.sample`` after ``manual_seed`` give torch's counts.

ATen walks ``(count, prob)`` serially in row-major order and samples the rarer outcome (``prob <= 1/2``, flipping
back ``count - k``): by inversion (geometric waiting times, one 53-bit uniform each) where ``count * prob < 10``,
else by Hormann's BTRS rejection (two uniforms a round). The arithmetic keeps ATen's mixed types: ``count``,
``prob``, ``k`` and their products are ``scalar_t`` (float32 for float32 tensors), the rest double. The loop is per
draw in Python (uniforms read from a ``UniformTape``) in ``torch_binomial_reference``, the reference the tests hold
``torch_binomial`` to: the same sampler as generated code (`codegen.llvm_samplers`).
"""
from __future__ import annotations

import math

import numpy as np

from ..codegen.llvm_samplers import sampler
from .._uniform_tape import UniformTape, run_sampler

__all__ = ["torch_binomial", "torch_binomial_reference", "torch_binomial_replay"]

_TAIL = (0.0810614667953272, 0.0413406959554092, 0.0276779256849983, 0.02079067210376509, 0.0166446911898211,
         0.0138761288230707, 0.0118967099458917, 0.0104112652619720, 0.00925546218271273, 0.00833056343336287)


def _stirling_tail(k):
    """``log(k!)`` minus Stirling's approximation (ATen's ``stirling_approx_tail``, in double)."""
    if k <= 9:
        return _TAIL[int(k)]
    kp1sq = (k + 1) * (k + 1)
    return (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (k + 1)


def _inversion(count, prob, uniform, s):
    geom_sum, num_geom = 0.0, s(0)
    logprob = float(np.log1p(-prob))  # log1p of scalar_t: log1pf for float32, as std::log1p's overload
    while True:
        geom_sum += math.ceil(_log(uniform()) / logprob)
        if geom_sum > count:
            return num_geom
        num_geom = s(num_geom + s(1))


def _btrs(count, prob, uniform, s):
    count_d, prob_d = float(count), float(prob)
    stddev = float(np.sqrt(count * prob * (s(1) - prob)))  # sqrt of scalar_t: sqrtf for float32
    b = 1.15 + 2.53 * stddev
    a = -0.0873 + 0.0248 * b + 0.01 * prob_d
    c = float(count * prob) + 0.5
    v_r = 0.92 - 4.2 / b
    r = float(prob / (s(1) - prob))  # scalar_t: `prob / (1 - prob)`
    alpha = (2.83 + 5.1 / b) * stddev
    m = math.floor(float((count + s(1)) * prob))
    while True:
        U = uniform() - 0.5
        V = uniform()
        us = 0.5 - math.fabs(U)
        k = s(math.floor((2 * a / us + b) * U + c))
        if k < 0 or k > count:
            continue
        if us >= 0.07 and V <= v_r:
            return k
        V = _log(V * alpha / (a / (us * us) + b))
        k_d = float(k)
        upperbound = ((m + 0.5) * math.log((m + 1) / (r * (count_d - m + 1)))
                      + float(count + s(1)) * math.log((count_d - m + 1) / float(count - k + s(1)))
                      + (k_d + 0.5) * math.log(r * float(count - k + s(1)) / float(k + s(1)))
                      + _stirling_tail(m) + _stirling_tail(count_d - m)
                      - _stirling_tail(k_d) - _stirling_tail(float(count - k)))
        if V <= upperbound:
            return k


def _log(x):
    return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)


def _one_binomial(count, prob, uniform, s):
    if math.isnan(count):  # ATen's loops never end there; NaN without drawing (an infinite count runs them)
        return s(math.nan)
    if count <= 0 or prob <= 0:
        return s(0)
    if prob >= 1:
        return count
    if prob <= 0.5:
        sample = _btrs if float(count * prob) >= 10.0 else _inversion
        return sample(count, prob, uniform, s)
    if prob > 0.5:
        qprob = s(1.0 - float(prob))
        sample = _btrs if float(count * qprob) >= 10.0 else _inversion
        return s(count - sample(count, qprob, uniform, s))
    return s(math.nan)


def torch_binomial(stream, count, prob, max_block=None):
    """Counts for the same-shape float32/float64 arrays ``count`` and ``prob`` (``count``'s dtype) drawn as ATen
    does on ``stream`` (a ``TorchCPUStream``), by the generated sampler; ``max_block`` caps the uniforms drawn
    ahead."""
    dtype = count.dtype
    flat_count = np.ascontiguousarray(count, dtype).reshape(-1)
    flat_prob = np.ascontiguousarray(prob, dtype).reshape(-1)
    out = np.empty(flat_count.size, dtype)
    with np.errstate(all="ignore"):  # inversion takes about count * min(p, 1 - p) + 1 uniforms, BTRS ~2.5
        rarer = np.minimum(flat_prob, 1 - flat_prob) * flat_count
        expected = float(np.where(rarer < 10, rarer + 1, 2.5).sum(dtype=np.float64))  # (NaN: 2.5)
    extra = {} if max_block is None else {"max_block": max_block}
    run_sampler(stream, sampler("binomial", dtype), flat_count, flat_prob, out, 1.02 * expected + 16, **extra)
    return out.reshape(count.shape)


def torch_binomial_reference(stream, count, prob):
    """``torch_binomial`` replayed per draw in Python: the reference for the generated sampler."""
    s = count.dtype.type  # scalar_t: float32 arithmetic where ATen's is
    prob = prob.astype(count.dtype, copy=False)

    uniform = UniformTape(stream, expected=4 * count.size)
    try:
        out = [_one_binomial(n, p, uniform, s) for n, p in zip(count.reshape(-1), prob.reshape(-1))]
    finally:
        uniform.close()
    return np.array(out, count.dtype).reshape(count.shape)


def torch_binomial_replay(count, prob, generator=None):
    """``torch.binomial(count, prob)`` (same-shape tensors) as ATen draws it, where it can be replayed: plain CPU
    float32/float64 tensors on torch's CPU stream; else None."""
    from .. import _random
    from .._tensor import Tensor
    from .._torch_rng import TorchCPUStream
    from ._math_backends import plain_host_array

    stream = _random._rng(generator)
    arrays = [plain_host_array(t) for t in (count, prob)]
    if (not isinstance(stream, TorchCPUStream) or any(a is None for a in arrays)
            or arrays[0].dtype not in (np.float32, np.float64)):
        return None
    return Tensor._make(torch_binomial(stream, np.ascontiguousarray(arrays[0]), np.ascontiguousarray(arrays[1])))
