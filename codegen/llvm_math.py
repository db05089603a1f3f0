"""Transcendental functions emitted inline as straight-line LLVM IR, so the loop vectorizer can widen them.

A call to libm's ``tanhf`` keeps a loop scalar (design notes section 8: 346 ms against 7.7 ms for GELU on 2^24
floats), so every function here is range reduction plus a polynomial, with special values chosen by ``select``
(no branches). Only LLVM intrinsics that map to vector instructions are used (``rint``, ``floor``, ``fabs``,
``copysign``, ``fma``, ``sqrt``, ``smax``), and loads from a constant table indexed by the exponent (`llvm_trig`),
which vectorize as gathers. Each function takes the builder, the operand and the LLVM type and returns the result's
name.

Accuracy, measured by tests/test_codegen_math.py on 10^5 points per function spread over every binade plus 0, -0,
+-inf and nan: the maximum error in units in the last place of the result, against 80-bit long double NumPy
(SciPy's float64 erf for erf; mpmath confirms the float64 erf figure):

=========  ========  ========  ==============================================================
function   float32   float64   method
=========  ========  ========  ==============================================================
exp        0.97      0.84      Cody-Waite reduction by ln 2 (fma), degree-6 fit (float64: Taylor 13),
                               2^k by ldexp (AVX-512: vscalefps) or exponent-field multiplies
log        1.66      1.32      atanh series on [sqrt(1/2), sqrt(2)); subnormals rescaled
tanh       1.32      2.12      expm1(2|x|) / (expm1(2|x|) + 2), series for expm1 below 1
sigmoid    2.24      2.16      1 / (1 + exp(-|x|)), mirrored for x < 0
erf        1.27      5.71      float32: x * poly(x^2) below 1, 1 - exp(poly(x)) to 3.92 (fits);
                               float64: positive series, continued fraction tail
sin, cos   0.90      1.33      (llvm_trig) reduction by pi/2: Cody-Waite below 2^40 (float32: in
                               float below 2^17), Payne-Hanek (2/pi by exponent from a table) up to
                               the largest finite x, also at each binade's closest x to a multiple
                               of pi/2; float32 polynomials in float on the reduced argument as a
                               float pair, float64 fdlibm's with the reduced argument's low part
pow        0.50      1.55      exp(y log|x|), float32 in double, float64 with log|x| and y log|x|
                               as pairs (0.98 but near the overflow limit); C99 special cases
=========  ========  ========  ==============================================================
"""
from __future__ import annotations

import math
from fractions import Fraction

from .llvm_float import INT_FIELDS, Float, float_bits
from .llvm_host import has_avx512
from .llvm_trig import cos, sin

def _exponent_field(f, k):
    """2**k as a ``f.ty`` built from its exponent field, for an i32 k that keeps the result normal."""
    ity, mant, bias, _ = INT_FIELDS[f.ty]
    b = f.b
    if ity != "i32":
        k = b.emit(f"sext i32 {k} to {ity}")
    biased = b.emit(f"add {ity} {k}, {bias}")
    return b.emit(f"bitcast {ity} {b.emit(f'shl {ity} {biased}, {mant}')} to {f.ty}")


def _ldexp(f, x, k):
    """x * 2**k for an i32 k in about [-2*bias, 2*bias]. With AVX-512, ``llvm.ldexp`` (one ``vscalefps``, which
    rounds subnormal results once); elsewhere two exact power-of-two multiplies (that intrinsic would be a scalar
    libm call per element there)."""
    b = f.b
    if has_avx512():
        return b.intrinsic("llvm.ldexp", f.ty, x, k, arg_types=[f.ty, "i32"], overloads=(f.ty, "i32"))
    half = b.emit(f"ashr i32 {k}, 1")
    for part in (half, b.emit(f"sub i32 {k}, {half}")):
        x = f.mul(x, _exponent_field(f, part))
    return x


def _scale_normal(f, x, k):
    """x * 2**k where the result is known to be a normal number: one multiply by an exponent field built from k
    (or `_ldexp`'s one instruction with AVX-512)."""
    return _ldexp(f, x, k) if has_avx512() else f.mul(x, _exponent_field(f, k))


# e**r on [-ln2/2, ln2/2] for float: a degree-6 polynomial, least squares in relative error Lawson-reweighted towards
# minimax with mpmath at 40 digits (2.1e-9 relative in exact arithmetic, against 1.2e-7 for Taylor's degree 6). The
# constant term is exactly 1, so Horner's last step is fma(acc, r, 1). float64 keeps Taylor's degree 13.
_EXP_F32 = (1.0, 1.0000000340806878, 0.4999999385239898, 0.16666421885132576, 0.04166805666958258,
            0.008374965404114417, 0.0013842710456214837)
_LN2 = {"float": (0.693145751953125, 1.428606765330187045e-06),
        "double": (6.93147180369123816490e-01, 1.90821492927058770002e-10)}


def _exp_reduced(f, x, lo=None):
    """(p, k) with e**x = p * 2**k: k = round(x / ln 2) as an i32 and p = e**r for r = x - k ln 2, reduced by
    Cody-Waite with ln 2 in two parts (``k * ln2_hi`` is exact, so the first fma is a plain subtraction). ``lo``, a
    low part of the argument (e**(x + lo), `pow`), is added to r.

    k comes from one fma with 1.5 * 2**mantissa added, which leaves k in the low bits of the sum: the integer k is a
    bit-pattern subtraction rather than a float-to-int conversion, so a nan operand gives a defined (if meaningless)
    k where ``fptosi`` would give poison, and a nan result needs no select. ``x`` must be clamped to keep
    ``|k| < 2**(mantissa - 1)``."""
    ity, mant = INT_FIELDS[f.ty][:2]
    ln2_hi, ln2_lo = _LN2[f.ty]
    magic = f.c(1.5 * 2.0 ** mant)
    t = f.call("fma", x, f.c(1 / math.log(2)), magic)
    k = f.sub(t, magic)
    r = f.fma(k, f.c(-ln2_lo), f.fma(k, f.c(-ln2_hi), x))
    r = f.add(r, lo) if lo is not None else r
    p = f.poly(r, _EXP_F32 if f.ty == "float" else [1 / math.factorial(i) for i in range(14)])
    k_int = f.b.emit(f"sub {ity} {f.b.emit(f'bitcast {f.ty} {t} to {ity}')}, {float_bits(1.5 * 2.0 ** mant, f.ty)}")
    return p, (k_int if ity == "i32" else f.b.emit(f"trunc i64 {k_int} to i32"))


def exp(b, x, ty):
    """e**x. Emits, for ``float``, lines such as ``%t4 = call float @llvm.fma.f32(float %t2, float
    0x3FF7154760000000, float 0x4168000000000000)``, a degree-6 polynomial and, with AVX-512, ``call float
    @llvm.ldexp.f32.i32(float %t14, i32 %t16)``. Clamping keeps k in range; nan passes through (see
    `_exp_reduced`)."""
    f = Float(b, ty)
    lo, hi = (-104.0, 89.0) if ty == "float" else (-746.0, 710.0)
    xc = f.select(f.cmp("olt", x, f.c(lo)), f.c(lo), x)
    xc = f.select(f.cmp("ogt", xc, f.c(hi)), f.c(hi), xc)
    return _ldexp(f, *_exp_reduced(f, xc))


def _expm1_nonneg(f, y):
    """e**y - 1 for y >= 0 (nan passes through): a Taylor series below 1, where exp(y) - 1 would cancel."""
    terms = 12 if f.ty == "float" else 19
    small = f.mul(y, f.poly(y, [1 / math.factorial(i + 1) for i in range(terms)]))
    big = f.sub(exp(f.b, y, f.ty), f.c(1))
    return f.select(f.cmp("olt", y, f.c(1)), small, big)


# tanh(a) = a + a^3 P(a^2) on [0, 0.55]: a relative-error least-squares fit (Lawson-reweighted towards minimax) of
# (tanh(a) - a) / a^3; 1.1e-9 relative error in exact arithmetic, 0.75 ulp evaluated in float32 with fma.
_TANH_F32_SMALL = (-0.33333317615399816, 0.13332588159595204, -0.053852532642675435, 0.02107263251911631,
                   -0.0062756320004704)


def _tanh_f32(b, x):
    """float32 tanh in about 35 vector instructions (GELU's hot path): a^3 polynomial below 0.55, where the result
    is < 1/2; above, 1 - 2 / (e^(2a) + 1) with e^(2a) by `_exp_reduced` (2a clamped at 40, where the result
    rounds to 1), which loses nothing since the result is >= 1/2. nan takes the polynomial arm (``ult``) and passes.
    """
    f = Float(b, "float")
    a = f.call("fabs", x)
    a2 = f.mul(a, a)
    small = f.fma(f.mul(a, a2), f.poly(a2, _TANH_F32_SMALL), a)
    y = f.add(a, a)
    y = f.select(f.cmp("olt", y, f.c(40)), y, f.c(40))
    e = _scale_normal(f, *_exp_reduced(f, y))
    big = f.sub(f.c(1), f.div(f.c(2), f.add(e, f.c(1))))
    t = f.select(f.cmp("ult", a, f.c(0.55)), small, big)
    return b.intrinsic("llvm.copysign", "float", t, x)


def tanh(b, x, ty):
    """tanh(x) = sign(x) * m / (m + 2) with m = expm1(2|x|); |x| > 20 gives +-1 (emits fdiv, select, copysign).

    float32 uses the cheaper `_tanh_f32`.
    """
    if ty == "float":
        return _tanh_f32(b, x)
    f = Float(b, ty)
    a = f.call("fabs", x)
    m = _expm1_nonneg(f, f.add(a, a))
    t = f.div(m, f.add(m, f.c(2)))
    t = f.select(f.cmp("ogt", a, f.c(20)), f.c(1), t)
    return b.intrinsic("llvm.copysign", ty, t, x)


def sigmoid(b, x, ty):
    """With e = exp(-|x|): 1 / (1 + e) for x >= 0 and e / (1 + e) below, so tiny results underflow gradually."""
    f = Float(b, ty)
    e = exp(b, f.bin("fsub", f.c(-0.0), f.call("fabs", x)), ty)
    r = f.div(f.c(1), f.add(f.c(1), e))
    return f.select(f.cmp("olt", x, f.c(0)), f.mul(e, r), r)


def _log_decompose(f, x):
    """(e, m) with x = m * 2**e, m in [sqrt(1/2), sqrt(2)) and e as a float, for a positive x (subnormals are scaled
    by 2**(mantissa bits + 2) first): bit fields, so ``%t4 = and i64 %t3, 4503599627370495`` and the like."""
    b, ty = f.b, f.ty
    ity, mant, bias, emask = INT_FIELDS[ty]
    tiny = f.cmp("olt", x, f.c(2.0 ** (1 - bias)))
    scale = mant + 2
    xs = f.select(tiny, f.mul(x, f.c(2.0 ** scale)), x)
    bits = b.emit(f"bitcast {ty} {xs} to {ity}")
    e = b.emit(f"and {ity} {b.emit(f'lshr {ity} {bits}, {mant}')}, {emask}")
    e = b.emit(f"sub {ity} {e}, {b.emit(f'select i1 {tiny}, {ity} {bias + scale}, {ity} {bias}')}")
    mbits = b.emit(f"or {ity} {b.emit(f'and {ity} {bits}, {(1 << mant) - 1}')}, {bias << mant}")
    m = b.emit(f"bitcast {ity} {mbits} to {ty}")
    big = f.cmp("ogt", m, f.c(math.sqrt(2)))
    m = f.select(big, f.mul(m, f.c(0.5)), m)
    e = b.emit(f"add {ity} {e}, {b.emit(f'zext i1 {big} to {ity}')}")
    return b.emit(f"sitofp {ity} {e} to {ty}"), m


_LN2_LOG = {"float": (0.693145751953125, 1.428606765330187045e-06),
            "double": (6.93147180369123816490e-01, 1.90821492927058770002e-10)}  # e * hi is exact


def log(b, x, ty):
    """Natural log: x = m * 2**e (`_log_decompose`), log m = 2 atanh((m-1)/(m+1)) as an odd series, emitting
    ``%t20 = fdiv double %t18, %t19`` and Horner steps. x < 0 gives nan, 0 gives -inf, inf gives inf.
    """
    f = Float(b, ty)
    ef, m = _log_decompose(f, x)
    s_ = f.div(f.sub(m, f.c(1)), f.add(m, f.c(1)))
    s2 = f.mul(s_, s_)
    terms = 5 if ty == "float" else 11
    two_s = f.add(s_, s_)
    log_m = f.add(two_s, f.mul(f.mul(two_s, s2), f.poly(s2, [1 / (2 * i + 3) for i in range(terms)])))
    ln2_hi, ln2_lo = _LN2_LOG[ty]
    res = f.add(f.mul(ef, f.c(ln2_hi)), f.add(log_m, f.mul(ef, f.c(ln2_lo))))
    res = f.select(f.cmp("oeq", x, f.c(math.inf)), x, res)
    res = f.select(f.cmp("oeq", x, f.c(0)), f.c(-math.inf), res)
    return f.select(f.cmp("ult", x, f.c(0)), f.c(math.nan), res)


_TWO_THIRDS = (2 / 3, float(Fraction(2, 3) - Fraction(2 / 3)))  # 2/3 as a pair


def _log_pair(f, x):
    """log x for a positive finite double as a pair hi + lo, relative error about 2^-64 (`pow` needs that much:
    exp(y log x) amplifies it by |y log x|, up to 745). With s = (m-1)/(m+1) as a pair (one division, the residual
    by fma), log m = 2s + 2s^3/3 + 2s^5 U(s^2): e ln2_hi + 2s by `Float.two_sum`, 2s^3/3 as exact products of
    pairs, U, s's low part and e ln2_lo (all below 2^-12 of the result) in plain double. Emits ``%t23 = call
    double @llvm.fma.f64(double %t22, double %t20, double %t21)`` residuals and pair products."""
    ef, m = _log_decompose(f, x)
    num = f.sub(m, f.c(1))  # exact, as is den - 1 below
    den = f.add(m, f.c(1))
    den_lo = f.sub(m, f.sub(den, f.c(1)))
    inv = f.div(f.c(1), den)
    s = f.mul(num, inv)
    s_lo = f.mul(f.sub(f.call("fma", f.neg(s), den, num), f.mul(s, den_lo)), inv)  # (m-1)/(m+1) - s
    q, q_lo = f.two_prod(s, s)
    s3, s3_lo = f.two_prod(s, q)
    s3_lo = f.fma(s, q_lo, s3_lo)
    t, t_lo = f.two_prod(s3, f.c(_TWO_THIRDS[0]))
    t_lo = f.fma(s3, f.c(_TWO_THIRDS[1]), f.fma(s3_lo, f.c(_TWO_THIRDS[0]), t_lo))
    u = f.mul(f.mul(s3, q), f.poly(q, [2 / (2 * i + 5) for i in range(11)]))
    ln2_hi, ln2_lo = _LN2_LOG["double"]
    hi, lo = f.two_sum(f.mul(ef, f.c(ln2_hi)), f.add(s, s))
    hi, lo2 = f.fast_two_sum(hi, t)  # |t| < |2s| / 100 and |e ln2 + 2s| > ln2 / 2 for e != 0
    small = f.add(f.fma(s_lo, f.fma(q, f.c(2), f.c(2)), u), f.fma(ef, f.c(ln2_lo), t_lo))  # s_lo: d(2s + 2s^3/3)
    return hi, f.add(f.add(lo, lo2), small)


def _in_double(b, x, ty, fn):
    """Evaluate ``fn`` in double for a float operand (one rounding at the end keeps float32 within about 1 ulp)."""
    if ty == "double":
        return fn(b, x)
    wide = fn(b, b.emit(f"fpext float {x} to double"))
    return b.emit(f"fptrunc double {wide} to float")


# float32 erf in float arithmetic (8 lanes per AVX2 register, where the double series below takes 4 lanes and 46
# terms): least-squares fits, Lawson-reweighted towards minimax, at 4000 Chebyshev nodes, made with NumPy against
# SciPy's erf/erfc: (erf(x) / x - 2/sqrt(pi)) / x^2 as a polynomial in x^2 on [0, 1], and log(erfc(x)) as a
# polynomial in x on [1, 3.92] weighted by erfc(x) (its error in erfc is 2e-11 absolute). 2/sqrt(pi) is a float
# pair, so its rounding adds nothing to the result's.
_TWO_OVER_SQRT_PI = (1.128379225730896, -5.8635382771399236e-08)
_ERF_SMALL = (-0.376126383, 0.112837504, -0.02686145, 0.00520389416, -0.000815428896, 8.34934871e-05)
_LOG_ERFC_TAIL = (0.00018806217121891677, -1.1295784711837769, -0.6332197189331055, -0.1084187775850296,
                  0.025208380073308945, -0.0042046066373586655, 0.0004413451242726296, -2.1687568732886575e-05)
_ERF_ONE = 3.92  # float's erf rounds to 1 from here: 1 - erfc(3.92) = 1 - 1.3e-8 rounds to 1


def _exp_normal_float(f, x):
    """e**x for float ``x`` whose result is a normal number (about [-87, 88]; no nan): `exp` without its clamps and
    nan select."""
    return _scale_normal(f, *_exp_reduced(f, x))


def _erf_float(b, x):
    """erf for float: ``x * (c + x^2 P(x^2))`` below 1, ``1 - exp(Q(x))`` with Q a fit of log(erfc) up to 3.92, 1
    beyond (0.96 ulp for the tail in exact exp; 1.27 ulp measured). Emits Horner steps such as
    ``%t7 = call float @llvm.fmuladd.f32(float 0x3F15E32720000000, float %t6, float 0xBF4AB85040000000)``."""
    f = Float(b, "float")
    a = f.call("fabs", x)
    a = f.select(f.cmp("ogt", a, f.c(_ERF_ONE)), f.c(_ERF_ONE), a)  # nan stays nan (the ordered compare is false)
    hi = f.mul(a, a)
    c_hi, c_lo = (f.c(v) for v in _TWO_OVER_SQRT_PI)
    small = f.fma(a, c_hi, f.mul(a, f.fma(hi, f.poly(hi, _ERF_SMALL), c_lo)))
    tail = f.sub(f.c(1), _exp_normal_float(f, f.poly(a, _LOG_ERFC_TAIL)))
    r = f.select(f.cmp("olt", a, f.c(1.0)), small, tail)
    r = f.select(f.isnan(x), x, r)
    return b.intrinsic("llvm.copysign", "float", r, x)


def erf(b, x, ty):
    """erf; float: `_erf_float`. Double: below ``split`` (2), 2/sqrt(pi) * a * exp(-a^2) * sum_n (2a^2)^n /
    (1*3*...*(2n+1)), a series of positive terms (no cancellation); from ``split`` on, 1 - erfc(a), with erfc from
    its continued fraction exp(-a^2)/sqrt(pi) / (a + (1/2)/(a + (2/2)/(a + ...))) evaluated backwards from a fixed
    depth of 50. a^2 is split exactly with an fma so that exp(-a^2) keeps full relative accuracy. Beyond 6 the
    result is +-1."""
    if ty == "float":
        return _erf_float(b, x)
    limit, split, terms = 6.0, 2.0, 34

    def body(b, v):
        f = Float(b, "double")
        a = f.call("fabs", v)
        a = f.select(f.cmp("ogt", a, f.c(limit)), f.c(limit), a)
        hi = f.mul(a, a)
        lo = f.call("fma", a, a, f.bin("fsub", f.c(-0.0), hi))
        e = f.mul(exp(b, f.bin("fsub", f.c(-0.0), hi), "double"), f.sub(f.c(1), lo))
        s2 = f.add(hi, hi)
        acc = f.c(1)
        for n in range(terms, 0, -1):
            acc = f.add(f.c(1), f.mul(f.mul(s2, f.c(1 / (2 * n + 1))), acc))
        r = f.mul(f.mul(f.mul(a, f.c(2 / math.sqrt(math.pi))), e), acc)
        if split < limit:
            t = f.select(f.cmp("olt", a, f.c(split)), f.c(split), a)
            cf = t
            for n in range(50, 0, -1):
                cf = f.add(t, f.div(f.c(n / 2), cf))
            tail = f.sub(f.c(1), f.div(f.mul(e, f.c(1 / math.sqrt(math.pi))), cf))
            r = f.select(f.cmp("olt", a, f.c(split)), r, tail)
        r = f.select(f.cmp("oge", a, f.c(limit)), f.c(1), r)
        return b.intrinsic("llvm.copysign", "double", r, v)
    return _in_double(b, x, ty, body)


def _exp_of_product(f, y, ax):
    """e**(y log ax) for doubles, with log ax a pair (`_log_pair`) and y times it a pair p + p_lo (`Float.two_prod`),
    whose p_lo joins exp's reduced argument (``%t90 = fadd double %t88, %t81``). Zero, infinite and nan ax give
    log ax = -inf, inf or nan as `log` does (its pair is computed on 1 there), and p_lo is dropped where exp
    saturates (|p| >= 746), is nan or infinite."""
    usable = f.b.emit(f"and i1 {f.cmp('ogt', ax, f.c(0))}, {f.cmp('olt', ax, f.c(math.inf))}")
    hi, lo = _log_pair(f, f.select(usable, ax, f.c(1)))
    hi = f.select(usable, hi, f.select(f.cmp("oeq", ax, f.c(0)), f.c(-math.inf), ax))  # inf and nan pass as ax
    p, p_err = f.two_prod(y, hi)
    p_lo = f.fma(y, f.select(usable, lo, f.c(0)), p_err)
    p_lo = f.select(f.cmp("olt", f.call("fabs", p), f.c(746)), p_lo, f.c(0))
    pc = f.select(f.cmp("olt", p, f.c(-746.0)), f.c(-746.0), p)
    pc = f.select(f.cmp("ogt", pc, f.c(710.0)), f.c(710.0), pc)
    return _ldexp(f, *_exp_reduced(f, pc, p_lo))


def pow(b, x, y, ty):
    """x**y = exp(y * log|x|) with C99's special cases (float32 is computed in double), by selects such as
    ``%t70 = select i1 %t69, double 0x3FF0000000000000, double %t66``.

    The general formula already gives most of them: log|x| is -inf at +-0 and inf at +-inf, so y * log|x| is
    +-inf and exp gives inf or +0 for zero and infinite bases and for y = +-inf with |x| != 1. What remains:
    the sign, -r when x's sign bit is set (-0 and -inf included) and y is an odd integer (floor(y/2) != y/2; every
    |y| >= 2^53, or 2^24 in float32, is even); nan for a finite x < 0 with a non-integer y; and 1 for y = +-0,
    for x = 1 (even with a nan y) and for x = -1 with y = +-inf (where y * log|x| is inf * 0 = nan).

    float64 carries y * log|x| as a pair (`_exp_of_product`), since exp multiplies its rounding error by up to 745;
    float32 is accurate enough from double."""
    def body(b, xv, yv):
        f = Float(b, "double")
        ax = f.call("fabs", xv)
        if ty == "double":
            r = _exp_of_product(f, yv, ax)
        else:
            r = exp(b, f.mul(yv, log(b, ax, "double")), "double")
        is_int = f.cmp("oeq", f.call("floor", yv), yv)  # true for +-inf too: they are even, not odd
        half = f.mul(yv, f.c(0.5))
        odd = b.emit(f"and i1 {is_int}, {f.cmp('une', f.call('floor', half), half)}")
        sign = b.emit(f"icmp slt i64 {b.emit(f'bitcast double {xv} to i64')}, 0")
        r = f.select(b.emit(f"and i1 {sign}, {odd}"), f.bin("fsub", f.c(-0.0), r), r)
        finite_neg = b.emit(f"and i1 {f.cmp('olt', xv, f.c(0))}, {f.cmp('one', ax, f.c(math.inf))}")
        r = f.select(b.emit(f"and i1 {finite_neg}, {b.emit(f'xor i1 {is_int}, true')}"), f.c(math.nan), r)
        unit_inf = b.emit(f"and i1 {f.cmp('oeq', ax, f.c(1))}, {f.cmp('oeq', f.call('fabs', yv), f.c(math.inf))}")
        one = b.emit(f"or i1 {f.cmp('oeq', yv, f.c(0))}, {f.cmp('oeq', xv, f.c(1))}")
        return f.select(b.emit(f"or i1 {one}, {unit_inf}"), f.c(1), r)
    if ty == "double":
        return body(b, x, y)
    wide = body(b, b.emit(f"fpext float {x} to double"), b.emit(f"fpext float {y} to double"))
    return b.emit(f"fptrunc double {wide} to float")


FUNCTIONS = {"exp": exp, "log": log, "tanh": tanh, "sigmoid": sigmoid, "erf": erf, "sin": sin, "cos": cos}
