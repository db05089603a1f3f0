"""float16 exact GELU and its gradient as ATen's CPU kernels compute them (the rows in `activation_ops`).

ATen's reduced-type GELU widens each vector of halves to float32 and takes ``erf`` from ``Vectorized<float>::erf``:
Abramowitz and Stegun's 7.1.26 (``1 - (a1 t + ... + a5 t^5) exp(-x^2)``, ``t = 1 / (1 + p |x|)``, Horner steps as
fused multiply-adds), not a correctly rounded erf. Below x = -3 the cdf ``1 + erf(x / sqrt 2)`` is a difference of
nearly equal numbers, so the two erfs' last bits show: with a correctly rounded erf 3% of N(0, 3) float16 inputs
landed one float16 step away. Elements past the last whole 64-element block take the kernel's scalar loop
(``std::erf``): those keep the correctly rounded formula. (bfloat16 GELU reads as torch's float32 GELU rounded, a
different erf: it keeps the float32 formula.)

>>> import numpy as np
>>> gelu_float16(np.full(64, -4.0, np.float16), None)[:2]
array([-0.0001267, -0.0001267], dtype=float16)
"""
from __future__ import annotations

import numpy as np

__all__ = ["gelu_float16", "gelu_backward_float16"]

_F32 = np.float32
_BLOCK = 64  # two AVX-512 vectors of halves per step of ATen's vectorized loop; the rest is its scalar loop
_SQRT1_2 = _F32(np.sqrt(0.5))
_PDF_SCALE = _F32(_F32(2 / np.sqrt(np.pi)) * _SQRT1_2 * _F32(0.5))  # ATen's kBeta, rounded as its float product
# Abramowitz and Stegun 7.1.26, as float32 constants (p, then a5 .. a1 in Horner order)
_P = _F32(0.3275911)
_HORNER = tuple(_F32(c) for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))


def _fma(a, b, c):
    # float32 inputs: their product is exact in float64, so this is one rounding of a * b + c (to float64 then
    # float32: a double rounding, off from a true fma only on ties of the float32 grid)
    return (a.astype(np.float64) * b + c).astype(_F32)


def _vector_erf(x):
    """``Vectorized<float>::erf`` (AVX-512) on a float32 array."""
    t = (_F32(1) / _fma(np.full_like(x, _P), np.abs(x), _F32(1))).astype(_F32)
    r = np.full_like(x, _HORNER[0])
    for c in _HORNER[1:]:
        r = _fma(r, t, c)
    e = np.exp(-(x * x).astype(np.float64)).astype(_F32)  # Sleef's expf (1 ulp): correctly rounded but rarely
    y = _fma((-e * t).astype(_F32), r, _F32(1))
    return np.where(np.signbit(x), -y, y)


def _vector_cdf(x):
    return (_F32(1) + _vector_erf((x * _SQRT1_2).astype(_F32))).astype(_F32)


def _blocks(n):
    return n - n % _BLOCK


_tables: dict = {}


def _table(name):
    """Per float16 bit pattern: the vector loop's GELU (float16) or gradient factor ``cdf + x * pdf`` (float32)
    for every float16 input, computed once (64 K elements): a gather then replaces the float64 emulation."""
    table = _tables.get(name)
    if table is None:
        every = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(_F32)
        with np.errstate(invalid="ignore", over="ignore"):
            if name == "gelu":
                table = ((every * _F32(0.5)).astype(_F32) * _vector_cdf(every)).astype(np.float16)
            else:
                cdf = (_F32(0.5) * _vector_cdf(every)).astype(_F32)
                pdf = (_PDF_SCALE * np.exp(((every * every).astype(_F32) * _F32(-0.5)).astype(np.float64))
                       .astype(_F32)).astype(_F32)
                table = (cdf + (every * pdf).astype(_F32)).astype(_F32)
        table = _tables[name] = table
    return table


def gelu_float16(x, scalar_fn):
    """``x * 0.5 * (1 + erf(x / sqrt 2))`` of a row-major float16 array as ATen rounds it; ``scalar_fn(xf)``
    (float32 in and out) computes the elements of ATen's scalar loop (past the last whole block)."""
    flat = x.reshape(-1)
    out = _table("gelu")[flat.view(np.uint16)]
    tail = _blocks(flat.size)
    if tail < flat.size:
        out[tail:] = scalar_fn(flat[tail:].astype(_F32))
    return out.reshape(x.shape)


def gelu_backward_float16(g, x, scalar_fn):
    """``g * (cdf(x) + x * pdf(x))`` of row-major float16 arrays of one shape as ATen rounds it, ``scalar_fn(gf,
    xf)`` as in `gelu_float16`."""
    flat, gf = x.reshape(-1), g.reshape(-1).astype(_F32)
    out = (gf * _table("gelu_grad")[flat.view(np.uint16)]).astype(np.float16)
    tail = _blocks(flat.size)
    if tail < flat.size:
        out[tail:] = scalar_fn(gf[tail:], flat[tail:].astype(_F32))
    return out.reshape(x.shape)
