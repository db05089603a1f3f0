"""ATen's serial CPU samplers (``ATen/native/Distributions.{h,cpp}``) as generated functions over a buffer of
torch's 53-bit uniforms, bit for bit: each kind's draw is emitted into `llvm_sampler_frame`'s loop, with ATen's
types (``scalar_t`` arithmetic in float32 where ATen's is) and glibc's libm.

- ``poisson`` (``sample_poisson``, float64 rates): Hoermann's transformed rejection (PTRS) from a rate of 10, two
  uniforms a round, the count returned through ATen's int64 (x86's ``INT64_MIN`` where it does not fit);
  below, products of uniforms down to ``exp(-rate)``; a zero rate draws nothing.
- ``binomial`` (``sample_binomial``, same-dtype count and probability): the rarer outcome by inversion (geometric
  waiting times) where ``count * p < 10``, else Hormann's BTRS; a NaN count gives NaN without drawing (ATen's
  loop would not end).
- ``gamma`` (``sample_gamma``, the ``_standard_gamma`` draws of ``alpha``'s dtype, at least its smallest normal
  number) and ``dirichlet`` (float64 gammas of any ``alpha``, at least float64's smallest normal): Marsaglia-Tsang
  on ``normal_distribution<double>`` and a uniform a round, boosted by ``U^(1/alpha)`` below 1.

``sampler(kind, dtype)`` compiles one (cached on disk) and returns it as a ctypes function of the frame's signature.
"""
from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from .llvm_sampler_frame import DOUBLE, FLOAT, I64, SamplerFrame, const

__all__ = ["sampler", "SAMPLER_KINDS"]

SAMPLER_KINDS = ("poisson", "binomial", "gamma", "dirichlet")
_INT64_LIMIT = 2.0 ** 63
_THIRD_F32 = float(np.float32(1.0) / np.float32(3.0))  # ATen's `1.0f / 3.0f`
_SQUEEZE_F32 = float(np.float32(0.0331))  # `0.0331f`
_STIRLING_TAIL = (0.0810614667953272, 0.0413406959554092, 0.0276779256849983, 0.02079067210376509,
                  0.0166446911898211, 0.0138761288230707, 0.0118967099458917, 0.0104112652619720,
                  0.00925546218271273, 0.00833056343336287)


def _poisson(f, i):
    """``sample_poisson(rate)`` for ``rate = first[i]`` (float64), as a float64 count."""
    b = f.b
    lam = f.param(0, DOUBLE, i)
    result = f.var(DOUBLE)
    ptrs, small, done = f.block("ptrs"), f.block("small"), f.block("poisson.done")
    b.cbranch(b.fcmp_ordered(">=", lam, const(10.0)), ptrs, small)

    b.position_at_end(ptrs)
    slam, loglam = f.intrinsic("sqrt", lam), f.libm("log", lam)
    bb = b.fadd(const(0.931), b.fmul(const(2.53), slam))
    a = b.fadd(const(-0.059), b.fmul(const(0.02483), bb))
    invalpha = b.fadd(const(1.1239), b.fdiv(const(1.1328), b.fsub(bb, const(3.4))))
    vr = b.fsub(const(0.9277), b.fdiv(const(3.6224), b.fsub(bb, const(2.0))))
    round_, tail_test, log_test = f.block("ptrs.round"), f.block("ptrs.tail"), f.block("ptrs.log")
    b.branch(round_)
    b.position_at_end(round_)
    u = b.fsub(f.uniform(), const(0.5))
    v = f.uniform()
    us = b.fsub(const(0.5), f.intrinsic("fabs", u))
    x = b.fadd(b.fadd(b.fmul(b.fadd(b.fdiv(b.fmul(const(2.0), a), us), bb), u), lam), const(0.43))
    k = f.intrinsic("floor", x)
    # `k = (int64_t)floor(...)`: torch's build tests and computes with the floor itself, and converts (x86's
    # INT64_MIN where it does not fit: a rate past 2**63, inf) only the count it returns.
    fits = b.and_(b.fcmp_ordered(">=", k, const(-_INT64_LIMIT)), b.fcmp_ordered("<", k, const(_INT64_LIMIT)))
    b.store(b.select(fits, k, const(-_INT64_LIMIT)), result)
    box = b.and_(b.fcmp_ordered(">=", us, const(0.07)), b.fcmp_ordered("<=", v, vr))
    b.cbranch(box, done, tail_test)
    b.position_at_end(tail_test)
    reject = b.or_(b.fcmp_ordered("<", k, const(0.0)),
                   b.and_(b.fcmp_ordered("<", us, const(0.013)), b.fcmp_ordered(">", v, us)))
    b.cbranch(reject, round_, log_test)
    b.position_at_end(log_test)
    lhs = b.fsub(b.fadd(f.libm("log", v), f.libm("log", invalpha)),
                 f.libm("log", b.fadd(b.fdiv(a, b.fmul(us, us)), bb)))
    rhs = b.fsub(b.fadd(b.fneg(lam), b.fmul(k, loglam)), f.libm("lgamma", b.fadd(k, const(1.0))))
    b.cbranch(b.fcmp_ordered("<=", lhs, rhs), done, round_)

    b.position_at_end(small)
    product, count = f.block("product"), f.block("product.count")
    prep, zero = f.block("product.prep"), f.block("poisson.zero")
    b.cbranch(b.fcmp_ordered("==", lam, const(0.0)), zero, prep)
    b.position_at_end(zero)
    b.store(const(0.0), result)
    b.branch(done)
    b.position_at_end(prep)
    enlam = f.libm("exp", b.fneg(lam))
    counted, prod = f.var(DOUBLE, const(0.0)), f.var(DOUBLE, const(1.0))
    b.branch(product)
    b.position_at_end(product)
    p = b.fmul(b.load(prod, typ=DOUBLE), f.uniform())
    b.store(p, prod)
    b.store(b.load(counted, typ=DOUBLE), result)
    b.cbranch(b.fcmp_ordered(">", p, enlam), count, done)
    b.position_at_end(count)
    b.store(b.fadd(b.load(counted, typ=DOUBLE), const(1.0)), counted)
    b.branch(product)

    b.position_at_end(done)
    return b.load(result, typ=DOUBLE)


def _widen(f, x):
    return x if x.type == DOUBLE else f.b.fpext(x, DOUBLE)


def _binomial_inversion(f, count, prob, ty):
    """``binomial_inversion``: geometric waiting times ``ceil(log(U) / log1p(-prob))`` until their sum passes
    ``count``; the number of whole ones (``scalar_t``)."""
    b = f.b
    logprob = _widen(f, f.libm("log1p" if ty == DOUBLE else "log1pf", b.fneg(prob)))  # std::log1p(scalar_t)
    geom_sum, num_geom = f.var(DOUBLE, const(0.0)), f.var(ty, const(0.0, ty))
    loop, more, done = f.block("inversion"), f.block("inversion.more"), f.block("inversion.done")
    b.branch(loop)
    b.position_at_end(loop)
    geom = f.intrinsic("ceil", b.fdiv(f.libm("log", f.uniform()), logprob))
    total = b.fadd(b.load(geom_sum, typ=DOUBLE), geom)
    b.store(total, geom_sum)
    b.cbranch(b.fcmp_ordered(">", total, _widen(f, count)), done, more)
    b.position_at_end(more)
    b.store(b.fadd(b.load(num_geom, typ=ty), const(1.0, ty)), num_geom)
    b.branch(loop)
    b.position_at_end(done)
    return b.load(num_geom, typ=ty)


def _stirling_tail(f, k, table):
    """``stirling_approx_tail<double>(k)``: the table up to 9, else the series in ``1 / (k + 1)^2``."""
    b = f.b
    small = b.fcmp_ordered("<=", k, const(9.0))
    index = b.select(small, b.fptoui(k, I64), const(0, I64))  # (size_t)k, only where the table is read
    tabulated = b.load(b.gep(table, [index], source_etype=DOUBLE), typ=DOUBLE)
    k1 = b.fadd(k, const(1.0))
    kp1sq = b.fmul(k1, k1)
    inner = b.fdiv(b.fsub(const(1.0 / 360), b.fdiv(const(1.0 / 1260), kp1sq)), kp1sq)
    series = b.fdiv(b.fsub(const(1.0 / 12), inner), k1)
    return b.select(small, tabulated, series)


def _btrs(f, count, prob, ty, table):
    """``btrs``: Hormann's transformed rejection with squeeze, ``scalar_t`` ``k``, double coefficients."""
    b = f.b
    one = const(1.0, ty)
    count_d, prob_d = _widen(f, count), _widen(f, prob)
    stddev = _widen(f, f.intrinsic("sqrt", b.fmul(b.fmul(count, prob), b.fsub(one, prob))))
    bb = b.fadd(const(1.15), b.fmul(const(2.53), stddev))
    a = b.fadd(b.fadd(const(-0.0873), b.fmul(const(0.0248), bb)), b.fmul(const(0.01), prob_d))
    c = b.fadd(_widen(f, b.fmul(count, prob)), const(0.5))
    v_r = b.fsub(const(0.92), b.fdiv(const(4.2), bb))
    r = _widen(f, b.fdiv(prob, b.fsub(one, prob)))  # prob / (1 - prob) in scalar_t
    alpha = b.fmul(b.fadd(const(2.83), b.fdiv(const(5.1), bb)), stddev)
    m = _widen(f, f.intrinsic("floor", b.fmul(b.fadd(count, one), prob)))
    result = f.var(ty)
    round_, box_test, log_test, done = (f.block(n) for n in ("btrs", "btrs.box", "btrs.log", "btrs.done"))
    b.branch(round_)
    b.position_at_end(round_)
    u = b.fsub(f.uniform(), const(0.5))
    v = f.uniform()
    us = b.fsub(const(0.5), f.intrinsic("fabs", u))
    x = b.fadd(b.fmul(b.fadd(b.fdiv(b.fmul(const(2.0), a), us), bb), u), c)
    k = f.intrinsic("floor", x)
    k = k if ty == DOUBLE else b.fptrunc(k, ty)
    b.store(k, result)
    reject = b.or_(b.fcmp_ordered("<", k, const(0.0, ty)), b.fcmp_ordered(">", k, count))
    b.cbranch(reject, round_, box_test)
    b.position_at_end(box_test)
    box = b.and_(b.fcmp_ordered(">=", us, const(0.07)), b.fcmp_ordered("<=", v, v_r))
    b.cbranch(box, done, log_test)
    b.position_at_end(log_test)
    log_v = f.libm("log", b.fdiv(b.fmul(v, alpha), b.fadd(b.fdiv(a, b.fmul(us, us)), bb)))
    k_d = _widen(f, k)
    count_m1 = b.fadd(b.fsub(count_d, m), const(1.0))  # count - m + 1, in double
    count_k = b.fsub(count, k)
    count_k1 = _widen(f, b.fadd(count_k, one))
    bound = b.fmul(b.fadd(m, const(0.5)), f.libm("log", b.fdiv(b.fadd(m, const(1.0)), b.fmul(r, count_m1))))
    bound = b.fadd(bound, b.fmul(_widen(f, b.fadd(count, one)), f.libm("log", b.fdiv(count_m1, count_k1))))
    ratio = b.fdiv(b.fmul(r, count_k1), _widen(f, b.fadd(k, one)))
    bound = b.fadd(bound, b.fmul(b.fadd(k_d, const(0.5)), f.libm("log", ratio)))
    bound = b.fadd(bound, _stirling_tail(f, m, table))
    bound = b.fadd(bound, _stirling_tail(f, b.fsub(count_d, m), table))
    bound = b.fsub(bound, _stirling_tail(f, k_d, table))
    bound = b.fsub(bound, _stirling_tail(f, _widen(f, count_k), table))
    b.cbranch(b.fcmp_ordered("<=", log_v, bound), done, round_)
    b.position_at_end(done)
    return b.load(result, typ=ty)


def _binomial(ty):
    """``sample_binomial(first[i], second[i])`` in ``scalar_t = ty``: the edges, then the rarer outcome's sampler."""
    def draw(f, i):
        b = f.b
        count, prob = f.param(0, ty, i), f.param(1, ty, i)
        result, p, flip = f.var(ty), f.var(ty), f.var(ir.IntType(1))
        nan, zero, check, certain, half, low, not_low, high, pick, done = (f.block(n) for n in (
            "binomial.nan", "binomial.zero", "binomial.check", "binomial.certain", "binomial.half", "binomial.low",
            "binomial.notlow", "binomial.high", "binomial.pick", "binomial.done"))
        # only a NaN count never ends ATen's loops; an infinite one runs them to inf (or 0), as torch's
        number = b.fcmp_ordered("==", count, count)
        b.cbranch(number, check, nan)
        b.position_at_end(nan)
        b.store(const(float("nan"), ty), result)
        b.branch(done)
        b.position_at_end(zero)
        b.store(const(0.0, ty), result)
        b.branch(done)

        b.position_at_end(check)
        b.cbranch(b.or_(b.fcmp_ordered("<=", count, const(0.0, ty)), b.fcmp_ordered("<=", prob, const(0.0, ty))),
                  zero, certain)
        b.position_at_end(certain)
        b.store(count, result)
        b.cbranch(b.fcmp_ordered(">=", prob, const(1.0, ty)), done, half)
        b.position_at_end(half)
        b.cbranch(b.fcmp_ordered("<=", prob, const(0.5, ty)), low, not_low)
        b.position_at_end(low)
        b.store(prob, p)
        b.store(const(0, ir.IntType(1)), flip)
        b.branch(pick)
        b.position_at_end(not_low)
        b.cbranch(b.fcmp_ordered(">", prob, const(0.5, ty)), high, nan)  # NaN prob
        b.position_at_end(high)
        q = b.fsub(const(1.0), _widen(f, prob))  # `scalar_t qprob = 1.0 - prob`
        b.store(q if ty == DOUBLE else b.fptrunc(q, ty), p)
        b.store(const(1, ir.IntType(1)), flip)
        b.branch(pick)

        b.position_at_end(pick)
        pp = b.load(p, typ=ty)
        table = _tail_table(f)
        by_btrs, by_inversion, flipped = f.block("binomial.btrs"), f.block("binomial.inv"), f.block("binomial.flip")
        b.cbranch(b.fcmp_ordered(">=", _widen(f, b.fmul(count, pp)), const(10.0)), by_btrs, by_inversion)
        b.position_at_end(by_btrs)
        b.store(_btrs(f, count, pp, ty, table), result)
        b.branch(flipped)
        b.position_at_end(by_inversion)
        b.store(_binomial_inversion(f, count, pp, ty), result)
        b.branch(flipped)
        b.position_at_end(flipped)
        k = b.load(result, typ=ty)
        b.store(b.select(b.load(flip, typ=ir.IntType(1)), b.fsub(count, k), k), result)
        b.branch(done)

        b.position_at_end(done)
        return b.load(result, typ=ty)
    return draw


def _tail_table(f):
    ty = ir.ArrayType(DOUBLE, len(_STIRLING_TAIL))
    table = ir.GlobalVariable(f.module, ty, f"{f.name}_stirling_tail")
    table.global_constant, table.linkage = True, "internal"
    table.initializer = ir.Constant(ty, [const(v) for v in _STIRLING_TAIL])
    table.type = ir.PointerType()  # opaque, as the frame's variables
    return table


def _gamma(ty, out_type):
    """``sample_gamma`` of ``alpha`` (``ty``) with ``scalar_t = out_type`` (``dirichlet``: double for any
    ``alpha``), clamped below at ``out_type``'s smallest normal number (NaN too, as ``std::max(tiny, x)``)."""
    single = out_type == FLOAT

    def draw(f, i):
        b = f.b
        alpha = _widen(f, f.param(0, ty, i))
        result, scale, boosted = f.var(DOUBLE), f.var(DOUBLE, const(1.0)), f.var(DOUBLE, alpha)
        boost, zero, nonzero, main, finish = (f.block(n) for n in (
            "gamma.boost", "gamma.zero", "gamma.nonzero", "gamma.main", "gamma.finish"))
        b.cbranch(b.fcmp_ordered("<", alpha, const(1.0)), boost, main)
        b.position_at_end(boost)
        b.cbranch(b.fcmp_ordered("==", alpha, const(0.0)), zero, nonzero)
        b.position_at_end(zero)
        b.store(const(0.0), result)
        b.branch(finish)
        b.position_at_end(nonzero)
        if single:  # `1.0f / alpha` and `alpha += 1.0f` in float
            narrow = b.fptrunc(alpha, FLOAT)
            exponent = b.fpext(b.fdiv(const(1.0, FLOAT), narrow), DOUBLE)
            raised = b.fpext(b.fadd(narrow, const(1.0, FLOAT)), DOUBLE)
        else:
            exponent, raised = b.fdiv(const(1.0), alpha), b.fadd(alpha, const(1.0))
        boost_factor = f.libm("pow", b.fsub(const(1.0), f.uniform()), exponent)
        b.store(b.fmul(const(1.0), boost_factor), scale)
        b.store(raised, boosted)
        b.branch(main)

        b.position_at_end(main)
        a = b.load(boosted, typ=DOUBLE)
        if single:
            d = b.fpext(b.fsub(b.fptrunc(a, FLOAT), const(_THIRD_F32, FLOAT)), DOUBLE)
        else:
            d = b.fsub(a, const(_THIRD_F32))
        c = b.fdiv(const(1.0), f.intrinsic("sqrt", b.fmul(const(9.0), d)))
        normal, test, log_test, accept = (f.block(n) for n in ("gamma.normal", "gamma.test", "gamma.log",
                                                               "gamma.accept"))
        x_var = f.var(DOUBLE)
        b.branch(normal)
        b.position_at_end(normal)
        x = f.normal()
        b.store(x, x_var)
        y = b.fadd(const(1.0), b.fmul(c, x))
        b.cbranch(b.fcmp_ordered("<=", y, const(0.0)), normal, test)  # a NaN y leaves the loop, as in C
        b.position_at_end(test)
        x = b.load(x_var, typ=DOUBLE)
        v = b.fmul(b.fmul(y, y), y)
        u = b.fsub(const(1.0), f.uniform())
        xx = b.fmul(x, x)
        squeeze = b.fsub(const(1.0), b.fmul(b.fmul(const(_SQUEEZE_F32), xx), xx))
        b.store(b.fmul(b.fmul(b.load(scale, typ=DOUBLE), d), v), result)
        b.cbranch(b.fcmp_ordered("<", u, squeeze), accept, log_test)
        b.position_at_end(log_test)
        rhs = b.fadd(b.fmul(const(0.5), xx), b.fmul(d, b.fadd(b.fsub(const(1.0), v), f.libm("log", v))))
        b.cbranch(b.fcmp_ordered("<", f.libm("log", u), rhs), accept, normal)
        b.position_at_end(accept)
        b.branch(finish)

        b.position_at_end(finish)
        value = b.load(result, typ=DOUBLE)
        value = b.fptrunc(value, FLOAT) if single else value
        tiny = const(float(np.finfo(np.float32 if single else np.float64).tiny), out_type)
        return b.select(b.fcmp_ordered(">", value, tiny), value, tiny)
    return draw


_TYPES = {"float32": FLOAT, "float64": DOUBLE}
_functions: dict = {}


def _build(kind, dtype):
    ty = _TYPES[dtype]
    if kind == "poisson":
        if ty != DOUBLE:
            raise ValueError(f"sampler('poisson'): the rates are float64 (ATen's double), got {dtype}")
        return DOUBLE, _poisson
    if kind == "binomial":
        return ty, _binomial(ty)
    if kind == "gamma":
        return ty, _gamma(ty, ty)
    if kind == "dirichlet":
        return DOUBLE, _gamma(ty, DOUBLE)
    raise ValueError(f"sampler: unknown kind {kind!r}, expected one of {SAMPLER_KINDS}")


def sampler(kind, dtype):
    """The compiled sampler ``kind`` (one of ``SAMPLER_KINDS``) for inputs of ``dtype`` (float32 or float64, a NumPy
    dtype or its name), as a ctypes function ``(first, second, out, start, stop, uniforms, n_uniforms, state) ->
    next index`` (addresses as ints; see `llvm_sampler_frame`)."""
    fn = _functions.get((kind, dtype))  # (keyed as given: a NumPy dtype's name is slow to spell)
    if fn is None:
        from .llvm_compile import compile_function
        from .llvm_objcache import default_cache

        type_name = np.dtype(dtype).name
        if type_name not in _TYPES:
            raise ValueError(f"sampler({kind!r}): expected float32 or float64 inputs, got {dtype}")
        out_type, draw = _build(kind, type_name)
        name = f"jitorch_torch_sampler_{kind}_{type_name}_v2"
        address = compile_function(SamplerFrame(name, out_type, draw).ir(), name, default_cache())
        fn = _functions[(kind, dtype)] = ctypes.CFUNCTYPE(
            ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
            ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)(address)
    return fn
