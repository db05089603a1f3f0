"""sin and cos as straight-line LLVM IR (see `llvm_math` for the rules its emitters follow and the accuracy table):
the argument reduced by pi/2 to r in [-pi/4, pi/4] and a quadrant q, then sin or cos polynomials of r chosen by q.

The full form runs both reductions below on every element and a select keeps one, so the loop has no branch and
still vectorizes; as both cost, `llvm_emit` runs pointwise loops in blocks and gives the blocks whose arguments are all
below `SMALL` a loop of the ``small`` form: Cody-Waite alone, in float for float32 (`_cody_waite_f32`, below 2^17).

- Cody-Waite, for |x| < 2^40: k = rint(x * 2/pi) and r = x - k pi/2, with pi/2 as a sum of three doubles P1 + P2 +
  P3. x - k P1 is representable (it is a multiple of 2^-53 below 1), so one fma computes it exactly.
- Payne-Hanek, from 2^40 to the largest finite value: x = m 2^e with an integer m, so x * 2/pi mod 4 only needs the
  bits of 2/pi * 2^e mod 4 (the bits above give multiples of 4). A table indexed by the exponent field holds them,
  split into doubles whose products with x are exact (or exact as a pair, `Float.two_prod`), and the gather that
  loads a row vectorizes like any load. The integer parts of the products go into the quadrant before anything
  is rounded, so the fraction keeps its relative accuracy even where it cancels to 2^-62 (the closest a double
  gets to a multiple of pi/2).
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from .codeblock import llvm_const
from .llvm_float import Float, float_bits

_HUGE = 2.0 ** 40  # Cody-Waite below (|k| < 2^40 keeps its products exact enough), Payne-Hanek from here
# What the ``small`` variant takes: float32 reduces in float below 2^17 (`_cody_waite_f32`), float64 in double below
# 2^40 (`_cody_waite`).
SMALL = {"float": 2.0 ** 17, "double": _HUGE}
_BITS = 1280  # bits of 2/pi after the point: the float64 table reaches 2^-1181 (its smallest chunk at e = 971)
_F64_FIRST = 1023 + 40  # the exponent field of _HUGE: the float64 table's first row
_F64_SCALE = 600  # float64 rows are stored times 2^600 and x times 2^-600, keeping the small chunks normal
# float32 sin and cos of the reduced argument on [-pi/4, pi/4]: minimax polynomials (Cephes' sinf/cosf constants).
_SIN_F32 = (1.0, -1.6666654611e-1, 8.3321608736e-3, -1.9515295891e-4)
_COS_F32 = (1.0, -0.5, 4.166664568298827e-2, -1.388731625493765e-3, 2.443315711809948e-5)


def _machin_pi(bits):
    """pi * 2**bits within a few units, from pi = 16 atan(1/5) - 4 atan(1/239) in integers."""
    one = 1 << bits

    def atan_inv(n):
        total, power, k = 0, one // n, 0
        while power:
            total += (power // (2 * k + 1)) * (-1) ** k
            power //= n * n
            k += 1
        return total
    return 16 * atan_inv(5) - 4 * atan_inv(239)


@functools.cache
def two_over_pi(bits=_BITS):
    """floor(2/pi * 2**bits) (64 guard bits absorb the error of `_machin_pi`).

    >>> hex(two_over_pi(32))  # fdlibm's ipio2 table starts 0xA2F983, 0x6E4E44
    '0xa2f9836e'
    """
    guard = bits + 64
    return (1 << (2 * guard + 1)) // _machin_pi(guard) >> 64


@functools.cache
def _pio2_parts():
    """pi/2 as three doubles P1 + P2 + P3, each the nearest double to what the previous ones leave."""
    rest, parts = Fraction(_machin_pi(_BITS), 1 << (_BITS + 1)), []
    for _ in range(3):
        parts.append(float(rest))  # Fraction -> float rounds correctly
        rest -= Fraction(parts[-1])
    return tuple(parts)


def _chunks(e, grids):
    """The bits of 2/pi * 2**e mod 4 cut at the given grids (``2**-grid``), as integers below 2**53."""
    c = two_over_pi()
    g = (c << e if e >= 0 else c >> -e) & ((4 << _BITS) - 1)
    out = []
    for grid in grids:
        chunk = g >> (_BITS - grid)
        g -= chunk << (_BITS - grid)
        out.append(chunk)
    return out


@functools.cache
def _table(ty):
    """(name, rows, the global's LLVM definition) of the Payne-Hanek table for ``ty``.

    float: one row per exponent field (x = m 2^e with m < 2^24; a zero or subnormal field has e = -149): the bits of
    2/pi 2^e mod 4 in two doubles on the grids 2^-51 and 2^-104, stored times 2^-e so that the row multiplies x
    itself, the second also times pi/2. double: rows from the field of 2^40 up (x = m 2^e, m < 2^53), four
    chunks of 53 bits on the grids 2^-51, 2^-104, 2^-157, 2^-210, stored times 2^(600 - e)."""
    if ty == "float":
        fields, grids = range(256), (51, 104)
        exponents, scales = [max(field, 1) - 150 for field in fields], [0] * len(fields)
    else:
        fields, grids = range(_F64_FIRST, 2047), (51, 104, 157, 210)
        exponents, scales = [field - 1075 for field in fields], [_F64_SCALE] * len(fields)
    rows = [[math.ldexp(chunk, scale - e - grid) for chunk, grid in zip(_chunks(e, grids), grids)]
            for e, scale in zip(exponents, scales)]
    if ty == "float":  # the second column in radians (`_payne_hanek_f32`)
        rows = [[h0, h1 * (math.pi / 2)] for h0, h1 in rows]
    name = f"jitorch_payne_hanek_{'f32' if ty == 'float' else 'f64'}"
    row_ty = f"[{len(grids)} x double]"
    text = [f"{row_ty} [{', '.join('double ' + llvm_const(v, 'double') for v in row)}]" for row in rows]
    return name, len(rows), f"@{name} = private unnamed_addr constant [{len(rows)} x {row_ty}] [{', '.join(text)}]"


def _load_row(b, ty, index):
    """The doubles of row ``index`` (an i64) of `_table`, one gather each once vectorized: emits the table as a
    module-level constant (once per module) and lines such as ``%t9 = getelementptr inbounds [256 x [2 x double]],
    ptr @jitorch_payne_hanek_f32, i64 0, i64 %t8, i64 0`` and ``%t10 = load double, ptr %t9``."""
    name, nrows, definition = _table(ty)
    b.declared[f"@{name}"] = definition
    width = 2 if ty == "float" else 4
    out = []
    for i in range(width):
        ptr = b.emit(f"getelementptr inbounds [{nrows} x [{width} x double]], ptr @{name}, i64 0, i64 {index}, i64 {i}")
        out.append(b.emit(f"load double, ptr {ptr}"))
    return out


def _cody_waite(d, b, v, wide):
    """(r, r_lo, q) for a double ``v`` with |v| < 2^40: k = round(v 2/pi) from one fma with 1.5 * 2^52 added (k is
    then also the low bits of that sum, so q = k mod 2^32 is a bitcast, no conversion), r = v - k P1 exact in one
    fma, then - k P2 rounded (float32, whose reduction needs no more) or, for ``wide`` (float64), as a pair r + r_lo
    with -k P2 exact (`Float.two_prod`, `Float.fast_two_sum`: r is a multiple of the product's ulp where smaller)
    and -k P3 added to r_lo. Any finite v gives defined values (beyond 2^51, meaningless ones). Emits
    ``%t5 = call double @llvm.fma.f64(double %t4, double 0x3FE45F306DC9C883, double 0x4338000000000000)``,
    ``%t8 = trunc i64 %t7 to i32`` and ``%t10 = call double @llvm.fma.f64(double %t9, double 0x3FF921FB54442D18,
    double %t4)``."""
    p1, p2, p3 = _pio2_parts()
    magic = d.c(1.5 * 2.0 ** 52)
    t = d.call("fma", v, d.c(2 / math.pi), magic)
    k = d.sub(t, magic)
    q = b.emit(f"trunc i64 {b.emit(f'bitcast double {t} to i64')} to i32")
    minus_k = d.neg(k)
    r = d.call("fma", minus_k, d.c(p1), v)
    if not wide:
        return d.call("fma", minus_k, d.c(p2), r), None, q
    w, w_err = d.two_prod(minus_k, d.c(p2))
    r, err = d.fast_two_sum(r, w)
    return r, d.fma(minus_k, d.c(p3), d.add(err, w_err)), q


@functools.cache
def _pio2_parts_f32():
    """pi/2 as three floats, each the nearest float to what the previous ones leave."""
    rest, parts = Fraction(_machin_pi(_BITS), 1 << (_BITS + 1)), []
    for _ in range(3):
        parts.append(float(np.float32(float(rest))))
        rest -= Fraction(parts[-1])
    return tuple(parts)


def _cody_waite_f32(f, b, x):
    """(hi, lo, q) for a float ``x`` with |x| < 2^17, in float arithmetic (twice the lanes of a double reduction):
    k from one fma with 1.5 * 2^23 added (q is then a bit-pattern subtraction), x - k P1 exact in one fma (both are
    multiples of 2^-23 and the difference is below 1), k P2 an exact pair (`Float.two_prod`) taken off with
    `Float.two_sum`, and k P3 with the rounding errors into lo: 72 bits of pi/2, so r keeps 2^-26 of its value even
    where x comes within 2^-29 of a multiple of pi/2. Emits ``%t5 = call float @llvm.fma.f32(float %x, float
    0x3FE45F3060000000, float 0x4168000000000000)`` and ``%t9 = call float @llvm.fma.f32(float %t8, float
    0x3FF921FB60000000, float %x)``."""
    p1, p2, p3 = _pio2_parts_f32()
    magic = f.c(1.5 * 2.0 ** 23)
    t = f.call("fma", x, f.c(2 / math.pi), magic)
    minus_k = f.neg(f.sub(t, magic))
    q = b.emit(f"sub i32 {b.emit(f'bitcast float {t} to i32')}, {float_bits(1.5 * 2.0 ** 23, 'float')}")
    r1 = f.call("fma", minus_k, f.c(p1), x)
    p, p_err = f.two_prod(minus_k, f.c(p2))
    hi, s_err = f.two_sum(r1, p)
    return hi, f.fma(minus_k, f.c(p3), f.add(s_err, p_err)), q


def _payne_hanek_f32(d, b, x, v):
    """(r, q) for a float ``x`` = m 2^e: with the row h0, h1' of its exponent, x h0 = m h0 is an exact pair p0 + e0
    (`Float.two_prod`); n0 = rint(p0) goes into q and f = p0 - n0 + e0 is exact (multiples of 2^-51 below 1) and
    within 2^-27 of [-1/2, 1/2], so r = f pi/2 + x h1' needs no second integer taken out (h1' = h1 pi/2 in the
    table: x h1 < 2^-26 rounds negligibly, in radians or not). ``v`` is x as a double. Emits the row's loads
    (`_load_row`), then ``%t24 = call double @llvm.rint.f64(double %t21)`` and ``%t28 = call double
    @llvm.fmuladd.f64(double %t26, double 0x3FF921FB54442D18, double %t27)``."""
    bits = b.emit(f"bitcast float {x} to i32")
    field = b.emit(f"and i32 {b.emit(f'lshr i32 {bits}, 23')}, 255")
    h0, h1 = _load_row(b, "float", b.emit(f"zext i32 {field} to i64"))
    p0, e0 = d.two_prod(v, h0)
    n0 = d.call("rint", p0)
    r = d.fma(d.add(d.sub(p0, n0), e0), d.c(math.pi / 2), d.mul(v, h1))
    return r, b.emit(f"fptosi double {n0} to i32")  # |p0| < 2^26


def _payne_hanek_f64(d, b, x):
    """(r, r_lo, q) for a double ``x``: with the row t0..t3 of its exponent (x scaled by 2^-600 to match), the
    products x t_i are exact pairs p_i + e_i. Magnitudes: p0 < 2^55, e0 <= 2, p1 < 4, e1 < 2^-51, p2 < 2^-49, e2 and
    x t3 < 2^-102. Integers leave p0 + e0 and p1 (into q) while every term is exact; the fraction is then summed
    from the largest term down, every partial sum within 2^-48 of the result, so where it cancels (to 2^-62 at
    worst) the rounding errors are that small too, and each sum keeps its own (`Float.two_sum`; `fast_two_sum`
    for e1, exact wherever c + e1 cancels) for the low part of the result. Emits the row's loads (`_load_row`),
    ``%t31 = fmul double %t2, 0x1A70000000000000`` (the 2^-600), then pairs such as ``%t32 = fmul double %t31,
    %t24`` with ``%t34 = call double @llvm.fma.f64(double %t31, double %t24, double %t33)``."""
    bits = b.emit(f"bitcast double {x} to i64")
    field = b.emit(f"and i64 {b.emit(f'lshr i64 {bits}, 52')}, 2047")
    row = b.emit(f"sub i64 {field}, {_F64_FIRST}")
    row = b.intrinsic("llvm.smax", "i64", row, "0")  # below 2^40 any row will do: that lane is not selected
    t0, t1, t2, t3 = _load_row(b, "double", row)
    xs = d.mul(x, d.c(2.0 ** -_F64_SCALE))
    p0, e0 = d.two_prod(xs, t0)
    n0 = d.call("rint", p0)
    a = d.add(d.sub(p0, n0), e0)  # exact: multiples of 2^-51 below 2.5
    n1 = d.call("rint", a)
    a = d.sub(a, n1)
    p1, e1 = d.two_prod(xs, t1)
    m1 = d.call("rint", p1)
    p1 = d.sub(p1, m1)
    n2 = d.call("rint", d.add(a, p1))  # -1, 0 or 1, so a - n2 is exact
    c, c_err = d.two_sum(d.sub(a, n2), p1)
    p2, e2 = d.two_prod(xs, t2)
    c, d_err = d.two_sum(c, p2)
    c, g_err = d.fast_two_sum(c, e1)  # exact but where |c| < |e1| / 2: no cancellation there, g_err is still tiny
    rest = d.add(g_err, d.add(d.add(c_err, d_err), d.call("fma", xs, t3, e2)))
    quarter = d.fma(d.c(-4), d.call("floor", d.mul(n0, d.c(0.25))), n0)  # n0 mod 4, exactly (n0 < 2^55)
    q = b.emit(f"fptosi double {d.add(d.add(quarter, n1), d.add(m1, n2))} to i32")
    pio2, pio2_lo, _ = _pio2_parts()
    r = d.mul(c, d.c(pio2))  # (c + rest) pi/2 as a pair r + r_lo
    return r, d.fma(c, d.c(pio2_lo), d.fma(rest, d.c(pio2), d.call("fma", c, d.c(pio2), d.neg(r)))), q


def _reduce(b, x, ty, huge):
    """(r, r_lo, q) with x = q pi/2 + r + r_lo for a finite ``x``: both reductions, then ``select``s such as
    ``%t30 = select i1 %t3, double %t28, double %t11`` keep Payne-Hanek's where ``huge`` (|x| >= 2^40). r_lo is
    None for float (its r, a double, is accurate enough)."""
    d = Float(b, "double")
    v = x if ty == "double" else b.emit(f"fpext float {x} to double")
    r, r_lo, q = _cody_waite(d, b, v, ty == "double")
    if ty == "float":
        r_big, q_big = _payne_hanek_f32(d, b, x, v)
    else:
        r_big, lo_big, q_big = _payne_hanek_f64(d, b, x)
        r_lo = d.select(huge, lo_big, r_lo)
    return d.select(huge, r_big, r), r_lo, b.emit(f"select i1 {huge}, i32 {q_big}, i32 {q}")


# float64 sin and cos on [-pi/4, pi/4]: fdlibm's minimax polynomials (__kernel_sin, __kernel_cos; 2^-58 relative):
# sin r = r + r^3 S(r^2), cos r = 1 - r^2/2 + r^4 C(r^2).
_SIN_F64 = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
            2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_COS_F64 = (1.0, -0.5, 4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
            -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)


def _sincos(b, x, ty, shift, small=False):
    """sin(x + shift * pi/2): `_reduce`, then sin or cos of the reduced argument by quadrant. ``small``: the caller
    knows |x| < `SMALL` (or x is not finite), so only Cody-Waite is emitted, in float for float32 (`llvm_emit`
    runs such a loop for the blocks whose arguments all are: Payne-Hanek's gathers more than double the cost).
    float32 evaluates the polynomials in float (8 or 16 lanes a register instead of 4 or 8) on the reduced argument
    rounded to a float pair; float64 uses fdlibm's polynomials in double with r_lo's first-order terms. inf and nan
    give nan.
    After the reduction it emits the quadrant's flags (``%t32 = trunc i32 %t31 to i1``), the polynomials (float:
    ``%t42 = call float @llvm.fmuladd.f32(float %t41, float %t39, float 0xBFC5555460000000)``) and selects."""
    f = Float(b, ty)
    ax = f.call("fabs", x)
    finite = f.cmp("olt", ax, f.c(math.inf))
    xf = f.select(finite, x, f.c(0))
    pair = None  # float's reduced argument as a float pair, when reduced in float
    if small and ty == "float":
        pair = _cody_waite_f32(f, b, xf)
        q = pair[2]
    elif small:
        r, r_lo, q = _cody_waite(Float(b, "double"), b, xf, True)
    else:
        r, r_lo, q = _reduce(b, xf, ty, f.cmp("oge", ax, f.c(_HUGE)))
    q = b.emit(f"add i32 {q}, {shift}") if shift else q
    odd = b.emit(f"trunc i32 {q} to i1")
    neg = b.emit(f"icmp ne i32 {b.emit(f'and i32 {q}, 2')}, 0")
    if ty == "float":
        # The reduced argument as a float pair hi + lo; the leading terms r and 1 - r^2/2 are summed last, with
        # the rounding error of 1 - r^2/2 and lo's first-order terms (lo, -hi*lo) added back.
        if pair is not None:
            hi, lo = pair[:2]
        else:
            hi = b.emit(f"fptrunc double {r} to float")
            lo = b.emit(f"fptrunc double {Float(b, 'double').sub(r, b.emit(f'fpext float {hi} to double'))} to float")
        r2 = f.mul(hi, hi)
        sin_r = f.add(hi, f.fma(f.mul(hi, r2), f.poly(r2, _SIN_F32[1:]), lo))
        half = f.mul(r2, f.c(0.5))
        w = f.sub(f.c(1), half)
        err = f.sub(f.sub(f.c(1), w), half)
        tail = f.sub(err, f.mul(hi, lo))
        cos_r = f.add(w, f.fma(f.mul(r2, r2), f.poly(r2, _COS_F32[2:]), tail))
    else:
        # sin(r + lo) = sin r + lo cos r and cos(r + lo) = cos r - lo sin r, to first order in lo (< 2^-52 r).
        r2 = f.mul(r, r)
        sin_r = f.add(r, f.fma(f.mul(r, r2), f.poly(r2, _SIN_F64), r_lo))
        cos_r = f.fma(f.neg(r), r_lo, f.poly(r2, _COS_F64))
    out = f.select(odd, cos_r, sin_r)
    out = f.select(neg, f.neg(out), out)
    out = f.select(finite, out, f.c(math.nan))
    if shift:
        return out
    return f.select(f.cmp("oeq", x, f.c(0)), x, out)  # sin(-0) = -0: the reduction's subtractions lose the sign


def sin(b, x, ty, small=False):
    """sin(x); see `_sincos` for the polynomials and `_reduce` for the reduction."""
    return _sincos(b, x, ty, 0, small)


def cos(b, x, ty, small=False):
    """cos(x) = sin(x + pi/2), taken as a quadrant shift of 1."""
    return _sincos(b, x, ty, 1, small)
