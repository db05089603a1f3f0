"""The IR's ``fma`` primitive (``a * b + c`` rounded once): the LLVM kernel equals the NumPy interpreter bit for bit,
and both equal an exact reference (each element's sum as a `Fraction`, rounded once), on random operands, the
cases a double-rounded or unfused computation gets wrong, and special values."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from jitorch._compile.expr import parse_expr
from jitorch.codegen import interp
from jitorch.codegen.ir import Buffer, Kernel, Store, const, load, op
from jitorch.codegen.llvm_compile import compile_kernel

_NP = {"f32": np.float32, "f64": np.float64}
_BITS = {"f32": np.uint32, "f64": np.uint64}


def _exact(a, b, c, dt):
    """The exactly rounded ``a * b + c`` of one element (IEEE's special values through NumPy's float64 where an
    operand is not finite or the sum is a zero, whose sign a `Fraction` loses)."""
    a, b, c = float(a), float(b), float(c)
    if not np.isfinite([a, b, c]).all():
        return _NP[dt](c if np.isfinite([a, b]).all() else a * b + c)
    value = Fraction(a) * Fraction(b) + Fraction(c)
    if value == 0:
        return _NP[dt](a * b + c if a == 0 or b == 0 else 0.0)
    with np.errstate(over="ignore"):
        if dt == "f64":
            try:
                return np.float64(float(value))
            except OverflowError:
                return np.float64(np.inf if value > 0 else -np.inf)
        return _round_f32(value)


def _round_f32(value):
    """``value`` (a nonzero Fraction) rounded to nearest float32, ties to even, by comparing with the neighbours."""
    if abs(value) >= 2 ** 128 - 2 ** 103:  # from the midpoint above float32's maximum (ties to even: up)
        return np.float32(np.inf if value > 0 else -np.inf)
    near = np.float32(float(value))  # within an ulp of the answer (float() rounds once, float32() a second time)
    best = near
    for cand in (np.nextafter(near, np.float32(-np.inf)), near, np.nextafter(near, np.float32(np.inf))):
        if not np.isfinite(cand):
            continue
        d, db = abs(Fraction(float(cand)) - value), abs(Fraction(float(best)) - value) if np.isfinite(best) else None
        if db is None or d < db or (d == db and int(np.float32(cand).view(np.uint32)) % 2 == 0):
            best = cand
    return best


def _kernel(dt, n):
    return Kernel((n,), (Buffer(dt, (1,)),) * 4, (Store(3, op("fma", load(0, dt), load(1, dt), load(2, dt))),))


def _run_both(dt, a, b, c):
    k = _kernel(dt, a.size)
    native, oracle = np.zeros_like(a), np.zeros_like(a)
    compile_kernel(k).run([a, b, c, native])
    interp.run(k, [a, b, c, oracle])
    return native, oracle


def _hard_cases(dt):
    """Operands where ``float32(double(a) * b + c)`` (double rounding) or ``a * b + c`` (two roundings) is wrong."""
    if dt == "f32":
        # (2**23 + 2896) * (2**23 - 2895) = 2**46 + 4688: the product is 2**-24 + 4688 * 2**-70, the double sum
        # 1 + 2**-24 lands on a float32 midpoint (ties to 1.0); the exact sum is above it (1 + 2**-23).
        a, b = np.float32((2 ** 23 + 2896) * 2.0 ** -23), np.float32((2 ** 23 - 2895) * 2.0 ** -47)
        x = np.float32(1 + 2 ** -12)
        return [(a, b, 1.0), (-a, b, -1.0), (a, -b, -1.0), (a, b, -1.0), (x, x, -1.0)]
    x = 1 + 2.0 ** -30
    return [(x, x, -1.0), (-x, x, 1.0), (1 + 2.0 ** -52, 1 - 2.0 ** -52, -1.0), (1e300, 1e10, -np.inf),
            (1e300, 1e10, -1e308)]


_SPECIAL = [(0.0, 5.0, -0.0), (-0.0, 5.0, -0.0), (2.0, 3.0, -6.0), (-2.0, 3.0, 6.0), (np.inf, 0.0, 1.0),
            (np.inf, 1.0, -np.inf), (np.nan, 1.0, 1.0), (1.0, 1.0, np.nan), (3e38, 10.0, -3e38), (1e-30, 1e-30, 0.0),
            (1e-45, 0.5, 0.0), (1e-45, 1.5, 1e-45), (-1.0, 1e-45, 1e-45)]


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_llvm_equals_interpreter_equals_exact(dt):
    rng = np.random.default_rng(7)
    n = 3000
    a = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)
    b = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)
    c = -(a * b) * rng.choice([1, 1 + 1e-6, 0.5, 0], n) + rng.standard_normal(n)  # cancellation, c = 0, ordinary
    rows = [tuple(x) for x in np.stack([a, b, c], 1)] + _hard_cases(dt) + _SPECIAL
    with np.errstate(all="ignore"):
        a, b, c = (np.array([r[i] for r in rows], _NP[dt]) for i in range(3))
    native, oracle = _run_both(dt, a, b, c)
    exact = np.array([_exact(x, y, z, dt) for x, y, z in zip(a, b, c)], _NP[dt])
    bits = _BITS[dt]
    assert np.array_equal(native.view(bits), oracle.view(bits))
    assert np.array_equal(oracle.view(bits), exact.view(bits))
    with np.errstate(all="ignore"):
        unfused = a * b + c
    assert np.sum(unfused.view(bits) != exact.view(bits)) > 100  # the rounding fma exists for (~10% of elements)


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_double_rounding_cases_are_rounded_once(dt):
    rows = _hard_cases(dt)
    a, b, c = (np.array([r[i] for r in rows], _NP[dt]) for i in range(3))
    native, oracle = _run_both(dt, a, b, c)
    exact = np.array([_exact(x, y, z, dt) for x, y, z in zip(a, b, c)], _NP[dt])
    assert np.array_equal(native.view(_BITS[dt]), exact.view(_BITS[dt]))
    assert np.array_equal(oracle.view(_BITS[dt]), exact.view(_BITS[dt]))
    if dt == "f32":  # the double detour (``(float)((double)a * b + c)``) misses the first case; fma does not
        assert native[0] == np.float32(1 + 2 ** -23)
        assert np.float32(np.float64(a[0]) * np.float64(b[0]) + np.float64(c[0])) == np.float32(1)


def test_fma_vectorizes_and_parses():
    ck = compile_kernel(_kernel("f32", 4096))
    assert "@llvm.fma.f32" in ck.llvm_ir
    e = parse_expr("fma({0}, 2, {1})", [load(0, "f32"), load(1, "f32")], "f32")
    assert e == op("fma", load(0, "f32"), const(2, "f32"), load(1, "f32"))
    with pytest.raises(TypeError, match="fma: needs a float operand"):
        op("fma", load(0, "i32"), load(1, "i32"), load(2, "i32"))
    with pytest.raises(ValueError, match="fma takes 3 arguments"):
        op("fma", load(0, "f32"), load(1, "f32"))


def test_fma_in_a_broadcast_kernel_with_constants():
    # a strided, broadcast operand and a constant multiplier (the shape of add's alpha), interpreter against LLVM
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(64).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    k = Kernel((8, 8), (Buffer("f32", (8, 1)), Buffer("f32", (0, 1)), Buffer("f32", (8, 1))),
               (Store(2, op("fma", load(1, "f32"), const(0.1, "f32"), load(0, "f32"))),))
    native, oracle = np.zeros(64, np.float32), np.zeros(64, np.float32)
    compile_kernel(k).run([x, y, native])
    interp.run(k, [x, y, oracle])
    assert np.array_equal(native.view(np.uint32), oracle.view(np.uint32))
    expect = [_exact(y[i % 8], np.float32(0.1), x[i], "f32") for i in range(64)]
    assert np.array_equal(oracle, np.array(expect, np.float32))
