"""Vectorizable transcendentals (codegen/llvm_math.py) against higher-precision references, in units in the last place.

float32 results are checked against float64 NumPy/SciPy; float64 results against 80-bit long double NumPy where the
platform has it (x86), else against float64 with a looser bound. One kernel per function and dtype computes every
function point-wise over about 10^5 points spanning all binades, plus 0, -0, +-inf and nan.
"""
import numpy as np
import pytest
from scipy import special

from jitorch.codegen.ir import Buffer, Kernel, Store, const, load, op
from jitorch.codegen.llvm_compile import compile_kernel

LD = np.longdouble
REFS = {
    "exp": lambda x: np.exp(LD(x)), "log": lambda x: np.log(LD(x)), "tanh": lambda x: np.tanh(LD(x)),
    "sigmoid": lambda x: 1 / (1 + np.exp(-LD(x))), "sin": lambda x: np.sin(LD(x)), "cos": lambda x: np.cos(LD(x)),
    "erf": lambda x: special.erf(x.astype(np.float64)),
}
# Max ulp allowed (the docstring of llvm_math states the measured maxima; these add a little slack).
F32_ULP = {"exp": 1.5, "log": 2, "tanh": 2.5, "sigmoid": 2.5, "erf": 1.5, "sin": 1, "cos": 1}
F64_ULP = {"exp": 1.5, "log": 2, "tanh": 2.5, "sigmoid": 2.5, "erf": 8, "sin": 2, "cos": 2}  # erf: SciPy reference


def points(dtype):
    rng = np.random.default_rng(0)
    mags = 10.0 ** rng.uniform(-40 if dtype == np.float32 else -300, 38 if dtype == np.float32 else 300, 40000)
    small = rng.uniform(-30, 30, 60000)
    x = np.concatenate([mags, -mags, small, [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0]])
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def ulp_error(got, ref, dtype):
    ref_t = ref.astype(dtype)
    both_nan = np.isnan(got) & np.isnan(ref_t)
    same_inf = np.isinf(ref_t) & (got == ref_t)
    err = np.abs(got.astype(LD) - ref) / np.spacing(np.abs(ref_t)).astype(LD)
    err[both_nan | same_inf] = 0
    return err


def run_unary(name, x):
    dt = "f32" if x.dtype == np.float32 else "f64"
    k = Kernel((x.size,), (Buffer(dt, (1,)), Buffer(dt, (1,))), (Store(1, op(name, load(0, dt))),))
    out = np.empty_like(x)
    compile_kernel(k).run([x, out])
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(REFS))
def test_unary_accuracy(name, dtype):
    x = points(dtype)
    got = run_unary(name, x)
    with np.errstate(all="ignore"):
        ref = REFS[name](x)
        err = ulp_error(got, np.asarray(ref, LD), dtype)
    bound = (F32_ULP if dtype == np.float32 else F64_ULP)[name]
    if dtype == np.float64 and np.finfo(LD).nmant <= 52:
        bound += 2  # no extended precision on this platform: the reference itself is off by up to 1 ulp
    worst = np.nanargmax(err)
    assert not np.isnan(err).any(), f"{name}: nan where the reference is {ref[np.isnan(err)][:3]}"
    assert err[worst] <= bound, f"{name}({x[worst]!r}) = {got[worst]!r}, want {ref[worst]!r}: {err[worst]:.2f} ulp"


def run_pow(x, y):
    dt = "f32" if x.dtype == np.float32 else "f64"
    k = Kernel((x.size,), (Buffer(dt, (1,)), Buffer(dt, (1,)), Buffer(dt, (1,))),
               (Store(2, op("pow", load(0, dt), load(1, dt))),))
    out = np.empty_like(x)
    compile_kernel(k).run([x, y, out])
    return out


# Every C99 special case of pow: signed zeros, infinities, nan, +-1, |x| < 1 and > 1, negative x with odd, even and
# non-integer y, and integers beyond 2^24 (float) and 2^53 (double), all even, next to the largest odd ones.
POW_SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 0.75, -0.75, 2.0, -2.0, 3.0, -3.0, 2.5,
                -2.5, 1 / 3, -1 / 3, -7.0, 1e-30, -1e-30, 1e30, -1e30, 2.0 ** 24 - 1, -(2.0 ** 24 - 1), 2.0 ** 24 + 2,
                -(2.0 ** 24 + 2), 2.0 ** 53 - 1, -(2.0 ** 53 - 1), 2.0 ** 53 + 2, -(2.0 ** 53 + 2), 1e300, -1e300,
                5e-324, 1.4e-45, 3.4e38, 1 + 2 ** -23, 1 - 2 ** -24, -(1 + 2 ** -23)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_special_cases_match_torch(dtype):
    """Every pair of `POW_SPECIALS` against torch.pow of two tensors (which follows C99 there, as NumPy does):
    nan exactly where torch has nan, zeros and infinities with the same sign, other results within the ulp bound
    of `test_pow_accuracy` (+-1 exactly for x = +-1 or y = 0)."""
    import torch

    with np.errstate(over="ignore"):
        grid = np.array(POW_SPECIALS, dtype)
    x, y = (a.ravel() for a in np.meshgrid(grid, grid))
    got = run_pow(x, y)
    want = torch.pow(torch.from_numpy(x), torch.from_numpy(y)).numpy()
    assert np.array_equal(np.isnan(got), np.isnan(want)), [(a, b, g, w) for a, b, g, w in zip(x, y, got, want)
                                                           if np.isnan(g) != np.isnan(w)][:5]
    exact = ~np.isfinite(want) | (want == 0) | (np.abs(x) == 1) | (y == 0)
    exact &= ~np.isnan(want)
    bad = exact & ((got != want) | (np.signbit(got) != np.signbit(want)))
    assert not bad.any(), [(a, b, g, w) for a, b, g, w in zip(x[bad], y[bad], got[bad], want[bad])][:5]
    with np.errstate(all="ignore"):
        err = ulp_error(got, np.power(LD(x), LD(y)), dtype)
    err[exact | np.isnan(want)] = 0
    excess = err - pow_ulp_bound(x, y)
    assert excess.max() <= 0, (x[excess.argmax()], y[excess.argmax()], err[excess.argmax()])


def pow_ulp_bound(x, y):
    """float32 (computed in double): 1 ulp. float64 (log|x| and y log|x| as pairs): 2 ulp, also where exp(y log|x|)
    amplifies their rounding most, near the overflow limit (measured 1.55; 0.98 elsewhere, was 1120)."""
    return np.full(x.shape, 1 if x.dtype == np.float32 else 2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_accuracy(dtype):
    """Random bases over every binade with exponents that take y log|x| anywhere up to the overflow limit, results
    near overflow and among subnormals, bases within 2^-32 of 1 with huge exponents, moderate positive bases and
    negative bases with integer exponents, against long double; integer powers that are exact stay exact."""
    rng, n = np.random.default_rng(1), 20000
    binades, overflow, tiny = (120, 88, -103) if dtype == np.float32 else (1000, 709.7, -744)
    wide, edge = np.exp2(rng.uniform(-binades, binades, n)), np.exp2(rng.uniform(-60, 60, 2 * n))
    near_one = 1 + rng.integers(-2 ** 20, 2 ** 20, n) * np.finfo(dtype).eps
    x = np.concatenate([wide, edge, near_one, rng.uniform(0, 10, n), -rng.uniform(0, 10, n)])
    y = np.concatenate([rng.uniform(-overflow, overflow, n) / np.log(wide),
                        rng.uniform(overflow - 5, overflow, n) / np.log(edge[:n]),
                        rng.uniform(tiny, tiny + 30, n) / np.log(edge[n:]),
                        rng.uniform(-overflow, overflow, n) / np.log(near_one.astype(LD)).astype(np.float64),
                        rng.uniform(-8, 8, n), rng.integers(-40, 40, n)])
    keep = np.isfinite(y)
    x, y = x[keep].astype(dtype), y[keep].astype(dtype)
    with np.errstate(all="ignore"):
        err = ulp_error(run_pow(x, y), np.power(LD(x), LD(y)), dtype)
    assert not np.isnan(err).any()
    excess = err - pow_ulp_bound(x, y)
    assert excess.max() <= 0, (x[excess.argmax()], y[excess.argmax()], err[excess.argmax()])
    base, power = (a.ravel().astype(dtype) for a in np.meshgrid(np.arange(-10, 11), np.arange(-30, 31)))
    with np.errstate(all="ignore"):
        want = np.power(LD(base), LD(power))
        exact = np.isfinite(want) & (want.astype(dtype).astype(LD) == want)
    assert np.array_equal(run_pow(base, power)[exact], want[exact].astype(dtype))


@pytest.mark.parametrize("avx512", [True, False])
def test_float64_pow_on_both_scaling_paths(avx512, monkeypatch):
    """float64 pow scales by 2^k as exp does (`test_exp_family_on_both_scaling_paths`): both ways meet the bound."""
    from jitorch.codegen import llvm_compile, llvm_math
    monkeypatch.setattr(llvm_math, "has_avx512", lambda: avx512)
    monkeypatch.setattr(llvm_compile, "_TEMPLATES", {})
    test_pow_accuracy(np.float64)
    test_pow_special_cases_match_torch(np.float64)


def test_gelu_tanh_form_matches_numpy():
    x = np.linspace(-10, 10, 10001).astype(np.float32)
    v, c = load(0, "f32"), lambda val: const(val, "f32")
    inner = op("mul", c(0.7978845608), op("add", v, op("mul", c(0.044715), op("mul", v, op("mul", v, v)))))
    e = op("mul", op("mul", c(0.5), v), op("add", c(1), op("tanh", inner)))
    out = np.empty_like(x)
    compile_kernel(Kernel((x.size,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (Store(1, e),))).run([x, out])
    xd = x.astype(np.float64)
    ref = 0.5 * xd * (1 + np.tanh(0.7978845608 * (xd + 0.044715 * xd ** 3)))
    # 1 + tanh cancels near x = -5 in float32 whatever tanh does: absolute error of a few float32 ulp of 1
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=4e-7)


def test_float32_erf_is_within_its_bound_on_a_dense_grid_across_both_fits():
    # 2 * 10^6 points over [-5, 5]: the join of the two fits at 1, and the float pair of 2/sqrt(pi) near 0.
    x = np.linspace(-5, 5, 2_000_001).astype(np.float32)
    err = ulp_error(run_unary("erf", x), np.asarray(REFS["erf"](x), LD), np.float32)
    assert float(np.nanmax(err)) <= F32_ULP["erf"]


def trig_bound(name, dtype):
    return (F32_ULP if dtype == np.float32 else F64_ULP)[name] + (2 if np.finfo(LD).nmant <= 52 else 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sin_cos_accurate_up_to_the_largest_finite_argument(name, dtype):
    """Uniform arguments up to 1e12 (mostly near the top binade, unlike `points`' log spacing), both sides of 2^40
    where the Payne-Hanek reduction takes over from Cody-Waite, and every binade up to the largest finite value
    (which used to be clamped to 1.7e12: one wrong constant for all of them), against long double."""
    rng, top = np.random.default_rng(2), np.log2(np.finfo(dtype).max)
    x = np.concatenate([rng.uniform(-1e12, 1e12, 100000), rng.uniform(2.0 ** 39, 2.0 ** 41, 50000),
                        np.exp2(rng.uniform(30, top, 100000)) * rng.choice([-1, 1], 100000)]).astype(dtype)
    x = np.concatenate([x, [np.finfo(dtype).max, -np.finfo(dtype).max, 2.0 ** 40, -(2.0 ** 40)]]).astype(dtype)
    err = ulp_error(run_unary(name, x), np.asarray(REFS[name](x), LD), dtype)
    assert err.max() <= trig_bound(name, dtype), (x[err.argmax()], err.max())
    if name == "sin":
        assert np.signbit(run_unary(name, np.array([-0.0, 0.0], dtype))).tolist() == [True, False]


def closest_to_multiples_of_pi_over_2(mantissa_bits, exponents):
    """Per exponent e, the mantissa m in [2^(bits-1), 2^bits) whose m 2^e is nearest a multiple of pi/2: the
    continued fraction of frac(2^e 2/pi) gives the m with the smallest ||m 2^e 2/pi||, among its convergents'
    and semiconvergents' denominators and their multiples in range (Muller's worst case for double,
    6381956970095103 * 2^797, comes out of it)."""
    from jitorch.codegen.llvm_trig import two_over_pi

    bits, lo, hi, out = 1280, 1 << (mantissa_bits - 1), 1 << mantissa_bits, []
    for e in exponents:
        num, den = ((two_over_pi(bits) << e) if e >= 0 else two_over_pi(bits) >> -e) & ((1 << bits) - 1), 1 << bits
        k2, k1, a_num, a_den, dens = 1, 0, num, den, []
        while True:
            a = a_num // a_den
            if a * k1 + k2 >= hi:
                dens += [t * k1 + k2 for t in range(1, a) if t * k1 + k2 < hi]
                break
            k2, k1 = k1, a * k1 + k2
            dens.append(k1)
            a_num, a_den = a_den, a_num - a * a_den
        cands = {j * q for q in dens if q for j in range(-(-lo // q), -(-lo // q) + 4) if lo <= j * q < hi}
        out.append(min(cands, key=lambda m: min(m * num % den, den - m * num % den)) * 2.0 ** e)
    return np.array(out)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sin_cos_at_the_argument_nearest_a_multiple_of_pi_over_2_in_every_binade(name, dtype):
    """Where x - k pi/2 cancels most (2^-61 at worst for double), the reduction must keep the full relative accuracy
    of the tiny remainder: every binade's hardest argument from 2^40 (Payne-Hanek) and below (Cody-Waite)."""
    if dtype == np.float32:
        x = closest_to_multiples_of_pi_over_2(24, range(-20, 105))
    else:
        x = closest_to_multiples_of_pi_over_2(53, range(-52, 972))
        assert 6381956970095103 * 2.0 ** 797 in x
    x = np.concatenate([x, -x]).astype(dtype)
    err = ulp_error(run_unary(name, x), np.asarray(REFS[name](x), LD), dtype)
    assert err.max() <= trig_bound(name, dtype), (x[err.argmax()], err.max())


def test_two_over_pi_bits_match_mpmath():
    import mpmath

    from jitorch.codegen.llvm_trig import two_over_pi

    mpmath.mp.prec = 1400
    assert two_over_pi(1280) == int(mpmath.floor(2 / mpmath.pi * mpmath.mpf(2) ** 1280))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_sin_cos_emit_straight_line_code_that_vectorizes(dtype):
    """No branch and no call but LLVM intrinsics in what `sin` emits, and the kernel's loop is widened (the table
    loads included: gathers)."""
    from jitorch.codegen.codeblock import LLVMBuilder
    from jitorch.codegen.llvm_compile import optimize
    from jitorch.codegen.llvm_trig import sin

    b = LLVMBuilder()
    sin(b, "%x", "float" if dtype == "f32" else "double")
    text = str(b)
    assert " br " not in text and "switch" not in text
    assert all(line.split("@")[1].startswith("llvm.") for line in text.splitlines() if " call " in line)
    k = Kernel((4096,), (Buffer(dtype, (1,)), Buffer(dtype, (1,))), (Store(1, op("sin", load(0, dtype))),))
    optimized = str(optimize(compile_kernel(k).llvm_ir))
    assert "x double> @llvm.masked.gather" in optimized or "load <" in optimized, "the loop was not vectorized"
    assert "x double>" in optimized


@pytest.mark.parametrize("avx512", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["exp", "sigmoid", "tanh", "erf"])
def test_exp_family_on_both_scaling_paths(name, dtype, avx512, monkeypatch):
    """2^k is ``llvm.ldexp`` on AVX-512 hosts and exponent-field multiplies elsewhere; whichever this host uses, the
    other is emitted too and must meet the same bound (subnormal results, overflow, nan and infinities included)."""
    from jitorch.codegen import llvm_compile, llvm_math
    monkeypatch.setattr(llvm_math, "has_avx512", lambda: avx512)
    monkeypatch.setattr(llvm_compile, "_TEMPLATES", {})  # emitted IR is kept per template text: emit it anew
    x = points(dtype)
    x = np.concatenate([x, np.linspace(-110 if dtype == np.float32 else -760, 100, 20001).astype(dtype)])
    with np.errstate(all="ignore"):
        err = ulp_error(run_unary(name, x), np.asarray(REFS[name](x), LD), dtype)
    bound = (F32_ULP if dtype == np.float32 else F64_ULP)[name] + (2 if np.finfo(LD).nmant <= 52 else 0)
    assert not np.isnan(err).any() and err.max() <= bound, (name, float(np.nanmax(err)))


def test_doctests():
    import doctest

    from jitorch.codegen import llvm_float, llvm_trig

    for module in (llvm_float, llvm_trig):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["sin", "cos"])
def test_trig_blocks_take_the_short_reduction_only_when_every_argument_allows(name, dtype):
    """A pointwise loop with sin/cos runs blocks whose arguments are all small through a Cody-Waite-only loop and
    the others through the loop with Payne-Hanek: one huge argument in a block must send that block (only) there,
    and the float32 short path reduces in float up to its limit. Also inside an expression and a 2-d strided space."""
    from jitorch.codegen.llvm_emit import TRIG_BLOCK, emit_kernel
    from jitorch.codegen.llvm_trig import SMALL

    ty = "float" if dtype == np.float32 else "double"
    rng = np.random.default_rng(3)
    x = rng.uniform(-SMALL[ty], SMALL[ty], 5 * TRIG_BLOCK + 77).astype(dtype)
    x[2 * TRIG_BLOCK + 5] = dtype(3e30)  # the third block must take the long path
    x[-1] = dtype(-SMALL[ty])  # at the limit: long path for the last block
    dt = "f32" if dtype == np.float32 else "f64"
    got = run_unary(name, x)
    ref = np.asarray(REFS[name](x), LD)
    bound = (F32_ULP if dtype == np.float32 else F64_ULP)[name] + (2 if np.finfo(LD).nmant <= 52 else 0)
    assert ulp_error(got, ref, dtype).max() <= bound
    # sin(2 * x) over a transposed 2-d view: the check evaluates the argument expression, not a load.
    a = rng.uniform(-100, 100, (37, 29)).astype(dtype)
    arg = op("mul", load(0, dt), const(2, dt))
    k = Kernel((29, 37), (Buffer(dt, (1, 29)), Buffer(dt, (37, 1))), (Store(1, op(name, arg)),))
    out = np.empty((29, 37), dtype)
    compile_kernel(k).run([a, out])
    want = np.asarray(REFS[name]((2 * a.astype(LD)).T), LD)
    assert ulp_error(out, want, dtype).max() <= bound
    assert "d1f.go" in emit_kernel(k) and "d1s.go" in emit_kernel(k)
