"""ATen's CPU Poisson sampler (``sample_poisson`` in ``ATen/native/Distributions.cpp``) replayed on torch's random
stream, so ``torch.poisson`` after ``manual_seed`` gives torch's counts.

ATen walks the rates serially in row-major order. A rate of 10 or more takes Hoermann's transformed rejection
(PTRS, 1993), two 53-bit uniforms a round; a smaller positive rate multiplies uniforms until the product falls to
``exp(-rate)``; a zero rate draws nothing. The libm calls are glibc's (``lgamma`` through ctypes where libm loads;
CPython's own ``lgamma`` otherwise, which may differ in the last bit). The loop is per draw in Python (~1 us a
uniform, read from a ``UniformTape``): ``torch_poisson`` runs the same sampler as generated code
(`codegen.llvm_samplers`, ~30 ns a uniform), ``torch_poisson_reference`` is the Python reference the tests hold it to.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math

import numpy as np

from .codegen.llvm_samplers import sampler
from ._uniform_tape import UniformTape, run_sampler

__all__ = ["torch_poisson", "torch_poisson_reference"]

_FLOAT64 = np.dtype(np.float64)


def _glibc_lgamma():
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6").lgamma
    except (OSError, AttributeError):
        return math.lgamma
    fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_double]
    return fn


_lgamma = _glibc_lgamma()


def _one_poisson(lam, uniform):
    if lam >= 10:
        slam, loglam = math.sqrt(lam), math.log(lam)
        b = 0.931 + 2.53 * slam
        a = -0.059 + 0.02483 * b
        invalpha = 1.1239 + 1.1328 / (b - 3.4)
        vr = 0.9277 - 3.6224 / (b - 2)
        while True:
            U = uniform() - 0.5
            V = uniform()
            us = 0.5 - math.fabs(U)
            k = math.floor((2 * a / us + b) * U + lam + 0.43)
            if us >= 0.07 and V <= vr:
                return k
            if k < 0 or (us < 0.013 and V > us):
                continue
            if (math.log(V) + math.log(invalpha) - math.log(a / (us * us) + b)
                    <= -lam + k * loglam - _lgamma(k + 1.0)):
                return k
    if lam == 0:
        return 0
    enlam = math.exp(-lam)
    count, prod = 0, 1.0
    while True:
        prod *= uniform()
        if prod > enlam:
            count += 1
        else:
            return count


def _expected_uniforms(flat_rates):
    """About how many uniforms the draws take: ``rate + 1`` below 10, two a round (~1.1 rounds) above."""
    small = flat_rates < 10
    return float(np.where(small, flat_rates + 1, 2.2).sum()) if flat_rates.size else 0.0


def torch_poisson(stream, rates, max_block=None):
    """Counts for the float64 array ``rates`` (non-negative, checked by the caller) drawn as ATen does on
    ``stream`` (a ``TorchCPUStream``), as float64: ATen's sampler as generated code. A rate past 2**63 (inf
    included) gives ATen's ``(int64_t)`` overflow, ``-2**63``; ``max_block`` caps the uniforms drawn ahead."""
    flat = np.ascontiguousarray(rates, np.float64).reshape(-1)
    out = np.empty(flat.size, np.float64)
    extra = {} if max_block is None else {"max_block": max_block}
    run_sampler(stream, sampler("poisson", _FLOAT64), flat, flat, out, 1.02 * _expected_uniforms(flat) + 16, **extra)
    return out.reshape(rates.shape)


def torch_poisson_reference(stream, rates):
    """``torch_poisson`` replayed per draw in Python (finite rates): the reference for the generated sampler."""
    flat = rates.reshape(-1).tolist()
    uniform = UniformTape(stream, expected=1.2 * sum(lam + 1 if lam < 10 else 2 for lam in flat))
    try:
        counts = [_one_poisson(lam, uniform) for lam in flat]
    finally:
        uniform.close()
    return np.array(counts, np.float64).reshape(rates.shape)
