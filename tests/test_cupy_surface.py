"""Every op row's kernel runs with NumPy restricted to CuPy's surface (``cupy_surface.py``), forward and backward.

A kernel that uses a NumPy-only name or keyword passes every CPU test and breaks on the GPU. Here the ``surface``
fixture sets ``jitorch._dispatch.CPU_XP`` to the restricted module for the whole test, so such a kernel fails on the
CPU. Each case of the data-driven sweep runs twice, with plain NumPy first and then through the surface, and the two
runs must agree exactly (outputs and input gradients): the surface only filters names, it computes the same thing.

A wrapper around every row's kernel records which rows ran with the surface; ``test_every_row_is_reached`` fails
naming the rows no case reached. The dispatcher's float fast paths call kernels they captured at import, so while the
fixture is active they are switched off (``TENSOR_TYPES`` emptied): every op then calls its row's (wrapped) kernel.

Cases whose kernel lives in a file another engineer owns are marked ``xfail(strict=True)`` with the offending name,
so they turn into failures once the kernel is fixed.
"""
from __future__ import annotations

import ast
import math
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from cupy_surface import cupy_array_method_keywords, cupy_surface_numpy, cupy_surface_special, is_surface

import jitorch
from jitorch import _dispatch, _dispatch_fast
from jitorch.ops import OPS
from jitorch.ops import indexing as indexing_ops
from jitorch.ops import rnn_ops
from jitorch.ops import sorting as sorting_ops
from jitorch.runtime import devices as runtime_devices
from jitorch.runtime import is_cupy

SURFACE = cupy_surface_numpy()
SPECIAL_SURFACE = cupy_surface_special()
_TENSOR_TYPES = _dispatch.TENSOR_TYPES
# Rows reached with the surface, per case id; a case adds to ``_reached`` while it runs.
REACHED: dict[str, set[str]] = {}
_reached: set[str] = set()


# -- the fixture -------------------------------------------------------------------------------------------------------
def _recording(op):
    kernel = op.kernel

    def run(xp, *arrays, **attrs):
        if is_surface(xp):
            _reached.add(op.name)
        return kernel(xp, *arrays, **attrs)
    return run


_SPECIAL_MODULE = runtime_devices.special_module


def _special_users():
    """Op modules that imported the runtime's ``special_module`` by name (kernels resolve it there at call time)."""
    return [m for name, m in list(sys.modules.items())
            if name.startswith("jitorch.ops.") and getattr(m, "special_module", None) is _SPECIAL_MODULE]


def _special_surface(xp):
    return SPECIAL_SURFACE if is_surface(xp) else _SPECIAL_MODULE(xp)


@pytest.fixture
def surface(monkeypatch):
    """Kernels get NumPy restricted to CuPy's surface (and ``scipy.special`` restricted to ``cupyx``'s) for the test."""
    monkeypatch.setattr(_dispatch, "CPU_XP", SURFACE)
    monkeypatch.setattr(_dispatch, "TENSOR_TYPES", frozenset())
    monkeypatch.setattr(_dispatch_fast, "TENSOR_TYPES", frozenset())  # the fast paths' own binding: none taken
    for op in OPS.values():
        monkeypatch.setattr(op, "kernel", _recording(op))
    for module in _special_users():
        monkeypatch.setattr(module, "special_module", _special_surface)
    return monkeypatch


# -- running a case ----------------------------------------------------------------------------------------------------
class Maker:
    """Deterministic inputs for one case: the same seed gives the same tensors in the plain and the surface run."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.leaves = []

    def _leaf(self, arr, grad):
        t = jitorch.tensor(arr, requires_grad=grad)
        if grad:
            self.leaves.append(t)
        return t

    def f(self, *shape, lo=-2.0, hi=2.0, dtype="float32", grad=True):
        """Uniform floats in [lo, hi)."""
        return self._leaf(self.rng.uniform(lo, hi, shape).astype(dtype), grad)

    def d(self, *shape, **kw):
        """float64 (linear algebra)."""
        return self.f(*shape, dtype="float64", **kw)

    def values(self, values, dtype="float32", grad=True):
        return self._leaf(np.asarray(values, dtype=dtype), grad)

    def i(self, *shape, lo=0, hi=5, dtype="int64"):
        return jitorch.tensor(self.rng.integers(lo, hi, shape).astype(dtype))

    def b(self, *shape):
        return jitorch.tensor(self.rng.random(shape) < 0.5)

    def spd(self, n, *batch):
        """A symmetric positive-definite float64 leaf."""
        a = self.rng.standard_normal(batch + (n, n))
        return self._leaf(a @ np.swapaxes(a, -1, -2) + n * np.eye(n), True)


def _tensors(out):
    if isinstance(out, jitorch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


def _numpy(t):
    if t.is_sparse:  # a sparse=True embedding's weight gradient
        t = t.coalesce().to_dense()
    return np.array(t.detach().numpy(), copy=True)


def run_case(case):
    """Outputs and input gradients (after backward with a random upstream gradient) as NumPy arrays."""
    maker = Maker(zlib.crc32(case.id.encode()))
    jitorch.manual_seed(0)
    outs = _tensors(case.fn(jitorch, maker))
    results = [_numpy(o) for o in outs]
    differentiable = [o for o in outs if o.requires_grad and o.is_floating_point()]
    if differentiable:
        grads = [jitorch.tensor(np.asarray(maker.rng.standard_normal(tuple(o.shape))).astype(_numpy(o).dtype))
                 for o in differentiable]
        if len(differentiable) == 1:
            differentiable[0].backward(grads[0])
        else:
            # One root, so the engine's order of accumulating into the leaves is the same in both runs (with several
            # roots it follows a set of nodes, whose order varies with object addresses: float32 sums differ by 1 ulp).
            sum((o * g).sum() for o, g in zip(differentiable, grads)).backward()
        results += [None if leaf.grad is None else _numpy(leaf.grad) for leaf in maker.leaves]
    return results


def run_plain(case, monkeypatch):
    """``run_case`` with plain NumPy (and the dispatcher's fast paths), inside a test that holds the surface."""
    with monkeypatch.context() as m:
        m.setattr(_dispatch, "CPU_XP", np)
        m.setattr(_dispatch, "TENSOR_TYPES", _TENSOR_TYPES)
        return run_case(case)


def run_surface(case):
    global _reached
    _reached = REACHED.setdefault(case.id, set())
    try:
        return run_case(case)
    finally:
        _reached = set()


def assert_same(expected, got):
    assert len(expected) == len(got)
    for i, (e, g) in enumerate(zip(expected, got)):
        assert (e is None) == (g is None), f"result {i}: one run has no gradient"
        if e is not None:
            assert (e.shape, e.dtype) == (g.shape, g.dtype), f"result {i}"
            np.testing.assert_array_equal(g, e, err_msg=f"result {i}")


# -- the sweep ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    id: str
    fn: Callable
    xfail: str | None = None  # "kernel uses NumPy-only <name>: <file>:<line>" for kernels this file may not fix


CASES: list[Case] = []


def case(name, fn, xfail=None):
    CASES.append(Case(name, fn, xfail))


# Pointwise: unary float functions with their domains.
UNARY = {
    "neg": (-2, 2), "abs": (-2, 2), "exp": (-2, 2), "exp2": (-2, 2), "expm1": (-2, 2), "log": (0.2, 3),
    "log2": (0.2, 3), "log10": (0.2, 3), "log1p": (-0.5, 3), "sqrt": (0.2, 3), "rsqrt": (0.2, 3), "sin": (-3, 3),
    "cos": (-3, 3), "tan": (-1, 1), "asin": (-0.9, 0.9), "acos": (-0.9, 0.9), "atan": (-3, 3), "sinh": (-2, 2),
    "cosh": (-2, 2), "tanh": (-2, 2), "asinh": (-2, 2), "acosh": (1.2, 3), "atanh": (-0.9, 0.9), "sigmoid": (-3, 3),
    "erf": (-2, 2), "erfc": (-2, 2), "erfinv": (-0.9, 0.9), "reciprocal": (0.5, 2), "relu": (-2, 2),
    "floor": (-3, 3), "ceil": (-3, 3), "trunc": (-3, 3), "sign": (-2, 2), "frac": (-3, 3), "round": (-3, 3),
}
for _name, (_lo, _hi) in UNARY.items():
    case(f"unary_{_name}", lambda t, m, n=_name, lo=_lo, hi=_hi: getattr(t, n)(m.f(2, 3, lo=lo, hi=hi)))
case("unary_on_int", lambda t, m: (t.abs(m.i(4, lo=-3)), t.neg(m.i(4)), t.exp(m.i(4)), t.sqrt(m.i(4))))
case("unary_half", lambda t, m: (m.f(5).half().exp(), m.f(5).half().sigmoid(), m.f(5).half().erf()))
case("round_decimals", lambda t, m: t.round(m.f(2, 3), decimals=2))
case("nan_to_num", lambda t, m: t.nan_to_num(m.values([1.0, math.nan, math.inf, -math.inf]), nan=0.5, posinf=9.0))

BINARY = {"add": (-2, 2), "sub": (-2, 2), "mul": (-2, 2), "div": (0.5, 2), "pow": (0.5, 2), "maximum": (-2, 2),
          "minimum": (-2, 2), "atan2": (-2, 2), "remainder": (0.5, 2), "fmod": (0.5, 2), "floor_divide": (0.5, 2)}
for _name, (_lo, _hi) in BINARY.items():
    case(f"binary_{_name}", lambda t, m, n=_name, lo=_lo, hi=_hi: getattr(t, n)(m.f(2, 3, lo=lo, hi=hi),
                                                                                m.f(3, lo=lo, hi=hi)))
case("binary_scalars", lambda t, m: (lambda x: (x + 2, 2 - x, x * 3, 1 / x, x ** 2, x % 0.7, x // 0.3,
                                                x.detach() ** 0.5, 2 ** x.detach()))(m.f(2, 3, lo=0.5)))
case("binary_ints_mixed", lambda t, m: (m.i(2, 3) + m.i(3), m.i(3) * 2.5, m.i(2, 3, lo=1) // m.i(3, lo=1),
                                         m.i(3) - m.f(3, grad=False), m.i(3, dtype="int32") + m.i(3)))
case("binary_half", lambda t, m: (m.f(4).half() * m.f(4).half(), m.f(4).half() + m.f(4)))
case("compare", lambda t, m: (lambda x, y: (x == y, x != y, x < y, x <= y, x > y, x >= y, x > 0.5))(
    m.f(2, 3).round(), m.f(3).round()))
case("logical", lambda t, m: (lambda a, b: (t.logical_and(a, b), t.logical_or(a, b), t.logical_xor(a, b),
                                             t.logical_not(a), a & b, a | b, a ^ b, ~a))(m.b(2, 3), m.b(3)))
case("bitwise", lambda t, m: (lambda a, b: (a & b, a | b, a ^ b, ~a, a << b, a >> b, t.bitwise_left_shift(a, 1)))(
    m.i(2, 3, hi=16), m.i(3, hi=3)))
case("classify", lambda t, m: (lambda x: (t.isnan(x), t.isinf(x), t.isfinite(x), t.signbit(x)))(
    m.values([1.0, -0.0, math.nan, math.inf, -math.inf], grad=False)))
case("where", lambda t, m: t.where(m.b(2, 3), m.f(2, 3), m.f(3)))
case("where_scalar", lambda t, m: t.where(m.b(2, 3), m.f(2, 3), 0.0))
case("clamp", lambda t, m: (m.f(2, 3).clamp(-0.5, 0.5), m.f(4).clamp(min=0.1), m.f(4).clamp(max=0.1)))
case("clamp_tensors", lambda t, m: m.f(2, 3).clamp(m.f(3, hi=0), m.f(3, lo=0)))
case("piecewise_activations", lambda t, m: (lambda x: (t.nn.functional.leaky_relu(x, 0.2), t.nn.functional.hardtanh(x),
                                                         t.nn.functional.softshrink(x, 0.3),
                                                         t.nn.functional.hardshrink(x, 0.3),
                                                         t.nn.functional.threshold(x, 0.1, -1.0)))(m.f(2, 3)))
case("composite_pointwise", lambda t, m: (lambda x, y: (t.lerp(x, y, 0.3), t.hypot(x, y), t.xlogy(x.abs(), y.abs()),
                                                         t.logit(x.sigmoid()), t.addcmul(x, x, y, value=0.5),
                                                         t.addcdiv(x, x, y.abs() + 1), t.sinc(x), t.square(x),
                                                         t.copysign(x, y), t.float_power(x.abs(), 2),
                                                         t.logaddexp(x, y), t.logaddexp2(x, y)))(m.f(2, 3), m.f(2, 3)))

case("special_functions", lambda t, m: (lambda x: (t.lgamma(x), t.digamma(x), t.polygamma(2, x), t.i0(x),
                                                     t.special.i1(x), t.lgamma(x.half()), t.special.erfcx(x),
                                                     t.special.ndtri(x / 4)))(m.f(2, 3, lo=0.5, hi=3)))
case("special_bessel", lambda t, m: (lambda x: (t.special.airy_ai(x), t.special.bessel_j0(x), t.special.bessel_y1(x),
                                                  t.special.modified_bessel_k0(x), t.special.spherical_bessel_j0(x),
                                                  t.special.scaled_modified_bessel_k1(x), t.special.i0e(x),
                                                  t.special.i1e(x),
                                                  t.special.log_ndtr(x), t.special.zeta(x.detach() + 1, x)))(
    m.f(2, 3, lo=0.5, hi=3)))
case("special_bessel_rest", lambda t, m: (lambda x: (t.special.bessel_j1(x), t.special.bessel_y0(x),
                                                       t.special.modified_bessel_i0(x), t.special.modified_bessel_i1(x),
                                                       t.special.modified_bessel_k1(x),
                                                       t.special.scaled_modified_bessel_k0(x)))(
    m.f(2, 3, lo=0.5, hi=3).detach()))
case("special_polynomials", lambda t, m: (lambda x: (t.special.chebyshev_polynomial_t(x, 9),
                                                     t.special.shifted_chebyshev_polynomial_w(x, 3),
                                                     t.special.hermite_polynomial_h(x, 4),
                                                     t.special.legendre_polynomial_p(x, t.tensor([2, 5, 11]))))(
    m.f(2, 3, lo=-0.9, hi=0.9).detach()))
case("special_polynomials_rest", lambda t, m: (lambda x: tuple(
    getattr(t.special, name)(x, 5) for name in (
        "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w", "hermite_polynomial_he",
        "laguerre_polynomial_l", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
        "shifted_chebyshev_polynomial_v")))(m.f(2, 3, lo=-0.9, hi=0.9).detach()))
case("gcd_lcm", lambda t, m: (t.gcd(m.i(2, 3, lo=1, hi=20), m.i(3, lo=1, hi=20)),
                              t.lcm(m.i(2, 3, lo=1, hi=20), m.i(3, lo=1, hi=20))))
case("nextafter", lambda t, m: (t.nextafter(m.f(2, 3), m.f(3)), t.nextafter(m.f(4).half(), m.f(4).half())))
case("incomplete_gamma", lambda t, m: (t.igamma(m.f(2, 3, lo=0.5, hi=3, grad=False), m.f(3, lo=0.5, hi=3)),
                                       t.igammac(m.f(2, 3, lo=0.5, hi=3, grad=False), m.f(3, lo=0.5, hi=3))))

# Reductions.
case("sum", lambda t, m: (lambda x: (x.sum(), x.sum(1), x.sum((0, 2), keepdim=True), x.sum(dtype=t.float64)))(
    m.f(2, 3, 4)))
case("sum_int_and_half", lambda t, m: (m.i(2, 3).sum(), m.b(2, 3).sum(0), m.f(3, 4).half().sum(1)))
case("mean_var_std", lambda t, m: (lambda x: (x.mean(), x.mean(0), x.var(1), x.std(), x.var(0, correction=0),
                                              t.var_mean(x, 1), t.std_mean(x)))(m.f(3, 4)))
case("nan_reductions", lambda t, m: (lambda x: (t.nansum(x), t.nanmean(x, 0)))(
    m.values([[1.0, math.nan], [2.0, 3.0]])))
case("prod", lambda t, m: (lambda x: (x.prod(), x.prod(1), x.prod(0, keepdim=True)))(m.f(3, 4, lo=0.5)))
case("prod_zeros", lambda t, m: (lambda x: (x.prod(), x.prod(1)))(m.values([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]])))
case("prod_int", lambda t, m: (m.i(3, 4, lo=1).prod(1), m.i(3).prod(dtype=t.float32)))
case("amax_amin", lambda t, m: (lambda x: (x.amax(), x.amax(1), x.amin((0, 1)), t.aminmax(x)))(
    m.f(2, 3, 4).round()))
case("max_min_dim", lambda t, m: (lambda x: (x.max(1), x.min(0, keepdim=True), x.max(), x.min()))(m.f(3, 4)))
case("argmax_argmin", lambda t, m: (lambda x: (x.argmax(), x.argmax(1), x.argmin(0, keepdim=True),
                                               x.argmin()))(m.f(3, 4, grad=False)))
case("all_any", lambda t, m: (lambda b: (b.all(), b.any(1), b.all(0, keepdim=True), m.i(3, 4).any(),
                                         m.i(3, dtype="uint8").all()))(m.b(3, 4)))
case("count_nonzero", lambda t, m: t.count_nonzero(m.i(3, 4), 1))
case("cumsum", lambda t, m: (lambda x: (x.cumsum(0), x.cumsum(1), m.i(3, 4).cumsum(1)))(m.f(3, 4)))
case("cumprod", lambda t, m: (m.f(3, 4, lo=0.5).cumprod(1), m.i(3, 4).cumprod(0)))
case("cumprod_zeros", lambda t, m: m.values([[1.0, 0.0, 2.0, 3.0], [0.5, 2.0, 0.0, 0.0]]).cumprod(1))
case("logsumexp_softmax", lambda t, m: (lambda x: (x.logsumexp(1), x.softmax(0), x.log_softmax(1),
                                                   t.logsumexp(x, (0, 1))))(m.f(3, 4)))
case("norms", lambda t, m: (lambda x: (x.norm(), x.norm(1, dim=1), x.norm(float("inf")), t.norm(x, dim=0)))(
    m.f(3, 4)))
case("trace", lambda t, m: t.trace(m.f(3, 3)))

# Movement and views.
case("view_reshape", lambda t, m: (lambda x: (x.view(6, 2), x.reshape(-1), x.flatten(1), x.unsqueeze(1).squeeze(),
                                              x.view(3, 4).unflatten(1, (2, 2)), x.ravel()))(m.f(2, 3, 2)))
case("permute_transpose", lambda t, m: (lambda x: (x.permute(2, 0, 1), x.transpose(0, 1), x.mT, x[0].t(),
                                                   x.movedim(0, 2), x.swapaxes(1, 2)))(m.f(2, 3, 4)))
case("expand", lambda t, m: (m.f(3, 1).expand(3, 4), m.f(4).expand(2, 4), m.f(1, 4).broadcast_to((2, 3, 4)),
                             t.broadcast_tensors(m.f(3, 1), m.f(4))))
case("slicing", lambda t, m: (lambda x: (x[1:], x[:, ::2], x[0], x[..., -1], x[None, 1, :, 1:3], x.narrow(1, 1, 2),
                                         x.select(0, 1)))(m.f(3, 4, 5)))
case("split_chunk_unbind", lambda t, m: (lambda x: (x.split(2), x.chunk(3, 1), x.unbind(1), t.tensor_split(x, 2)))(
    m.f(5, 3)))
case("diagonal", lambda t, m: (lambda x: (x.diagonal(), x.diagonal(1), x.diagonal(-1, 1, 2), t.diag(x[0]),
                                          t.diag(m.f(3)), t.diag_embed(m.f(2, 3))))(m.f(3, 4, 4)))
case("unfold", lambda t, m: (m.f(7).unfold(0, 3, 2), m.f(3, 6).unfold(1, 2, 1)))
case("as_strided", lambda t, m: (m.f(9).as_strided((3, 3), (3, 1)), m.f(10).as_strided((4, 3), (2, 1), 1),
                                 m.f(3, 4).t().as_strided((2, 2), (1, 2))))
case("cat_stack", lambda t, m: (t.cat([m.f(2, 3), m.f(1, 3)]), t.stack([m.f(3), m.f(3)], 1), t.hstack([m.f(2),
                                m.f(3)]), t.vstack([m.f(3), m.f(2, 3)]), t.cat([m.f(2), m.i(2)]),
                                t.dstack([m.f(2, 2), m.f(2, 2)]), t.column_stack([m.f(3), m.f(3, 2)])))
case("flip_roll_rot", lambda t, m: (lambda x: (x.flip(0), x.flip((0, 1)), t.fliplr(x), x.roll(1, 0), x.roll(2),
                                               x.rot90(1, (0, 1))))(m.f(3, 4)))
case("tile_repeat", lambda t, m: (m.f(2, 3).repeat(2, 1), m.f(3).tile((2, 2)), m.f(2, 1).expand(2, 3).repeat(1, 2)))
case("tril_triu", lambda t, m: (lambda x: (x.tril(), x.triu(1), x.tril(-1), t.triu(x, -1)))(m.f(2, 4, 4)))
case("nonzero", lambda t, m: (lambda x: (x.nonzero(), t.argwhere(x), x.nonzero(as_tuple=True)))(
    m.i(3, 4, hi=2)))
case("block_meshgrid", lambda t, m: (t.block_diag(m.f(2, 2), m.f(1, 3)), t.meshgrid(m.f(2), m.f(3), indexing="ij"),
                                     t.cartesian_prod(m.f(2), m.f(2)), t.atleast_2d(m.f(3))))
case("clone_contiguous", lambda t, m: (lambda x: (x.clone(), x.t().contiguous(), x.t().clone()))(m.f(3, 4)))
case("casts", lambda t, m: (lambda x: (x.double(), x.half(), x.to(t.int32), x.long(), x.bool(), x.to(t.float64),
                                       x.type(t.float16), m.i(3).float()))(m.f(3, 4)))
# Complex values: conj, the real/imag views and the real <-> complex views, through their gradients.
case("complex_views", lambda t, m: (lambda z: (t.view_as_real(z.conj()), z.real * 2, z.imag, z.abs(),
                                                t.view_as_real(z * z)))(t.view_as_complex(m.f(3, 2))))
# FFTs: the c2c, r2c and c2r rows (scipy.fft's surface is cupyx.scipy.fft's) through their gradients.
case("fft", lambda t, m: (lambda x: (t.view_as_real(t.fft.fft(x)), t.view_as_real(t.fft.rfft(x, n=5)),
                                     t.fft.irfft(t.fft.rfft(x), n=4), t.fft.hfft(t.fft.ifft(x), n=7),
                                     t.view_as_real(t.fft.fftn(x, s=(3, 6), norm="ortho"))))(m.f(2, 4)))
case("copy_fill", lambda t, m: (lambda y: (y.clone().copy_(m.f(3)), y.clone().copy_(m.i(2, 3)),
                                           y.clone().fill_(2.0), y.clone().zero_(), t.zeros(2, 3).copy_(y),
                                           y.clone().fill_(m.f())))(m.f(2, 3) * 1))
case("inplace_on_views", lambda t, m: (lambda y: (y[1:].mul_(2), y[:, 0].add_(m.f(3)), y.t()[0].zero_(),
                                                  y.diagonal().copy_(m.f(3)), y))(m.f(3, 3) * 1))
case("inplace_chain", lambda t, m: (lambda y: (y.add_(1).mul_(m.f(3, 4)), y.clamp_(-1, 1), y.sub_(0.5), y))(
    m.f(3, 4) * 1))
case("view_then_base_write", lambda t, m: (lambda y: (lambda v: (y.mul_(2), v))(y[:2]))(m.f(3, 4) * 1))
case("inplace_non_differentiable", lambda t, m: (lambda x, y: (y.gt_(0), y * x, (x * 1)[1:].lt_(0.5)))(
    m.f(3, 4), m.f(3, 4) * 1))
# zero_grad is only recorded (its node zeroes the gradient of an eq_-style result); its kernel runs when applied.
case("zero_grad_row", lambda t, m: _dispatch.apply(OPS["zero_grad"], m.f(3)))

# Indexing.
case("getitem_advanced", lambda t, m: (lambda x: (x[t.tensor([0, 2, 0])], x[:, t.tensor([1, 1])],
                                                  x[t.tensor([0, 1]), :, t.tensor([2, 3])], x[x > 0],
                                                  x[t.tensor([[0], [2]]), t.tensor([1, 3])], x[[0, 1]],
                                                  x[..., t.tensor([True, False, True, True, False])]))(m.f(3, 4, 5)))
case("getitem_empty", lambda t, m: m.f(3, 4)[t.tensor([], dtype=t.int64)])
case("setitem", lambda t, m: (lambda y: (y.__setitem__(t.tensor([0, 2]), m.f(4)), y.__setitem__(y > 1, 0.0),
                                         y.__setitem__((slice(None), t.tensor([1, 1])), m.f(3, 2)),
                                         y.__setitem__((0, 1), m.f()), y))(m.f(3, 4) * 1))
case("index_put_accumulate", lambda t, m: (
    (m.f(5) * 1).index_put_((t.tensor([0, 2, 0, 0]),), m.f(4), accumulate=True),
    t.index_put(m.f(3, 4), (t.tensor([1, 1]), t.tensor([2, 2])), m.f(2), accumulate=True),
    t.index_put(m.f(3, 4), (t.tensor([1, 0]),), m.f(4))))
case("gather_scatter", lambda t, m: (lambda x, idx: (x.gather(1, idx), t.zeros(3, 4).scatter(1, idx, m.f(3, 2)),
                                                     x.scatter(1, idx, 5.0), x.scatter_add(1, idx, m.f(3, 2)),
                                                     x.scatter(1, idx, m.f(3, 2), reduce="add"),
                                                     x.scatter(1, idx, m.f(3, 2), reduce="multiply")))(
    m.f(3, 4), m.i(3, 2, hi=4)))
for _reduce in ("sum", "prod", "mean", "amax", "amin"):
    for _include in (True, False):
        case(f"scatter_reduce_{_reduce}_{'self' if _include else 'noself'}",
             lambda t, m, r=_reduce, inc=_include: m.f(3, 4, lo=0.5).scatter_reduce(
                 1, t.tensor([[0, 0, 2], [1, 3, 3], [2, 2, 2]]), m.f(3, 3, lo=0.5), r, include_self=inc))
case("scatter_reduce_prod_zeros", lambda t, m: m.values([[1.0, 0.0, 2.0]]).scatter_reduce(
    1, t.tensor([[0, 0, 1, 1]]), m.values([[0.0, 3.0, 0.0, 0.0]]), "prod"))
case("scatter_reduce_int", lambda t, m: m.i(3, 4).scatter_reduce(0, m.i(2, 4, hi=3), m.i(2, 4), "amax"))
case("index_family", lambda t, m: (lambda x, idx: (x.index_select(0, idx), x.index_add(0, idx, m.f(3, 4)),
                                                   x.index_copy(0, t.tensor([2, 0, 1]), m.f(3, 4)),
                                                   x.index_fill(1, t.tensor([0, 3]), -1.0),
                                                   x.index_add(1, t.tensor([0, 0]), m.f(3, 2), alpha=2)))(
    m.f(3, 4), t.tensor([0, 2, 0])))
case("masked", lambda t, m: (lambda x, mask: (x.masked_fill(mask, 0.0), x.masked_select(mask),
                                              x.masked_scatter(mask, m.f(12)), x.masked_fill(mask, m.f())))(
    m.f(3, 4), m.b(3, 4)))
case("take_put", lambda t, m: (lambda x: (t.take(x, t.tensor([0, 5, 11])), t.take_along_dim(x, m.i(3, 2, hi=4), 1),
                                          x.put(t.tensor([1, 1]), m.f(2), accumulate=True)))(m.f(3, 4)))

# Linear algebra.
for _a, _b in (((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 2)), ((3, 4), (4, 2)), ((2, 3, 4), (4, 2)),
               ((3, 4), (2, 4, 5)), ((2, 3, 4), (4,)), ((4,), (2, 4, 3)), ((2, 1, 3, 4), (5, 4, 2))):
    case(f"matmul_{len(_a)}d_{len(_b)}d" + ("_bcast" if len(_a) == 4 else ""),
         lambda t, m, a=_a, b=_b: m.f(*a) @ m.f(*b))
case("matmul_family", lambda t, m: (t.mm(m.f(2, 3), m.f(3, 2)), t.bmm(m.f(2, 2, 3), m.f(2, 3, 2)),
                                    t.mv(m.f(2, 3), m.f(3)), t.dot(m.f(3), m.f(3)), t.outer(m.f(2), m.f(3)),
                                    t.addmm(m.f(2, 2), m.f(2, 3), m.f(3, 2), beta=0.5), t.inner(m.f(3), m.f(3)),
                                    t.baddbmm(m.f(2, 2, 2), m.f(2, 2, 3), m.f(2, 3, 2)),
                                    t.addmv(m.f(2), m.f(2, 3), m.f(3)), t.addr(m.f(2, 3), m.f(2), m.f(3))))
case("matmul_half_int", lambda t, m: (m.f(2, 3).half() @ m.f(3, 2).half(), m.i(2, 3) @ m.i(3, 2)))
case("einsum", lambda t, m: (t.einsum("ij,jk->ik", m.f(2, 3), m.f(3, 4)), t.einsum("ii->i", m.f(3, 3)),
                             t.einsum("bij,bjk->bik", m.f(2, 2, 3), m.f(2, 3, 2)), t.einsum("i,i->", m.f(3), m.f(3)),
                             t.einsum("ij->", m.f(2, 3)), t.einsum("...ij,...jk", m.f(2, 2, 3), m.f(3, 2)),
                             t.einsum("ij,ij,ij->i", m.f(2, 3), m.f(2, 3), m.f(2, 3))))
case("tensor_products", lambda t, m: (t.tensordot(m.f(2, 3, 4), m.f(3, 4, 2), dims=2), t.kron(m.f(2, 2), m.f(2, 3)),
                                      t.cross(m.f(2, 3), m.f(2, 3), dim=1), t.cdist(m.f(3, 2), m.f(4, 2)),
                                      t.chain_matmul(m.f(2, 3), m.f(3, 3), m.f(3, 2))))
case("vector_norm", lambda t, m: (lambda x: tuple(t.linalg.vector_norm(x, o) for o in (1, 2, 3, 0.5, 0, math.inf,
                                                                                      -math.inf)) + (
    t.linalg.vector_norm(x, 2, dim=1, keepdim=True), t.linalg.vector_norm(x.half(), 2)))(m.f(3, 4)))
case("lu_factor_eig", lambda t, m: (t.linalg.lu_factor(m.d(3, 3)), t.linalg.eigvals(m.d(3, 3, grad=False))))
case("matrix_norm", lambda t, m: (lambda x: (t.linalg.matrix_norm(x), t.linalg.matrix_norm(x, "nuc"),
                                             t.linalg.matrix_norm(x, 1), t.linalg.matrix_norm(x, -math.inf),
                                             t.linalg.norm(x), t.linalg.matrix_norm(x, 2)))(m.d(2, 3, 3)))
case("inv_solve", lambda t, m: (t.linalg.inv(m.spd(3)), t.linalg.solve(m.spd(3, 2), m.d(2, 3, 2)),
                                t.linalg.solve(m.spd(3), m.d(3)), t.inverse(m.spd(2))))
case("det_slogdet", lambda t, m: (t.linalg.det(m.d(2, 3, 3)), t.linalg.slogdet(m.d(3, 3)), t.logdet(m.spd(3)),
                                  t.det(m.values([[1.0, 2.0], [2.0, 4.0]], dtype="float64"))))
case("cholesky", lambda t, m: (t.linalg.cholesky(m.spd(3)), t.linalg.cholesky(m.spd(3, 2), upper=True),
                               t.cholesky_solve(m.d(3, 2), t.linalg.cholesky(m.spd(3))),
                               t.cholesky_inverse(t.linalg.cholesky(m.spd(3)))))
case("qr", lambda t, m: (t.linalg.qr(m.d(4, 3)), t.linalg.qr(m.d(3, 5)), t.linalg.qr(m.d(3, 3), mode="complete"),
                         t.linalg.qr(m.d(4, 3, grad=False), mode="r")))
case("eigh", lambda t, m: (t.linalg.eigh(m.spd(3)), t.linalg.eigvalsh(m.spd(3, 2)),
                           t.linalg.eigh(m.spd(3), UPLO="U")))
case("svd", lambda t, m: (t.linalg.svd(m.d(4, 3), full_matrices=False), t.linalg.svd(m.d(2, 3, 4)),
                          t.linalg.svdvals(m.d(3, 4)), t.svd(m.d(3, 3))))
case("pinv_rank_lstsq", lambda t, m: (t.linalg.pinv(m.d(4, 3)), t.linalg.pinv(m.d(2, 3, 5), rtol=0.1),
                                      t.pinverse(m.d(3, 2)), t.linalg.matrix_rank(m.d(4, 3)),
                                      t.linalg.lstsq(m.d(4, 3), m.d(4, 2)).solution))
case("matrix_power_multi_dot", lambda t, m: (t.linalg.matrix_power(m.d(3, 3), 3), t.linalg.matrix_power(m.spd(3), -2),
                                             t.linalg.multi_dot([m.d(2, 3), m.d(3, 4), m.d(4, 2)]),
                                             t.linalg.solve_triangular(t.linalg.cholesky(m.spd(3)), m.d(3, 2),
                                                                       upper=False)))

# Sorting family.
case("sort_argsort", lambda t, m: (lambda x: (x.sort(1), x.sort(0, descending=True), x.argsort(1),
                                              x.sort(1, stable=True), t.msort(x)))(m.f(3, 5).round()))
case("topk_kthvalue", lambda t, m: (lambda x: (x.topk(2), x.topk(2, 0, largest=False), x.kthvalue(2, 1),
                                               x.kthvalue(1, 0, keepdim=True)))(m.f(3, 5)))
case("median_mode", lambda t, m: (lambda x: (x.median(), x.median(1), x.nanmedian(0), x.mode(1), m.i(3, 6).mode(0),
                                             m.values([[1.0, math.nan, 2.0]], grad=False).median(1),
                                             m.values([[1.0, math.nan, 2.0]], grad=False).nanmedian(1)))(
    m.f(3, 5).round()))
case("unique", lambda t, m: (lambda x: (t.unique(x), t.unique(x, return_inverse=True, return_counts=True),
                                        t.unique(m.i(4, 2, hi=2), dim=0, return_inverse=True, return_counts=True),
                                        t.unique_consecutive(x, return_inverse=True, return_counts=True),
                                        t.unique_consecutive(m.i(5, 2, hi=2), dim=0, return_counts=True)))(
    m.i(3, 4)))
case("searchsorted_bucketize", lambda t, m: (
    t.searchsorted(t.tensor([1.0, 2.0, 4.0, 8.0]), m.f(3, lo=0, hi=9, grad=False)),
    t.searchsorted(t.tensor([[1, 3, 5], [2, 4, 6]]), t.tensor([[3, 0], [6, 5]]), right=True),
    t.bucketize(m.f(4, lo=0, hi=9, grad=False), t.tensor([1.0, 5.0])),
    t.searchsorted(t.tensor([1, 2, 3]), t.tensor([2, 3]), out_int32=True)))
case("bincount_histc", lambda t, m: (t.bincount(m.i(8)), t.bincount(m.i(6), weights=m.f(6, grad=False), minlength=7),
                                     t.histc(m.f(20, grad=False), bins=4, min=-1, max=1), t.histc(m.f(5, grad=False)),
                                     t.bincount(m.i(4), weights=m.i(4))))
case("cummax_cummin", lambda t, m: (lambda x: (x.cummax(1), x.cummin(0), m.i(3, 4).cummax(0),
                                               m.values([1.0, math.nan, 0.5], grad=False).cummax(0)))(
    m.f(3, 4).round()))
case("logcumsumexp", lambda t, m: (m.f(3, 4).logcumsumexp(1), m.f(5).half().logcumsumexp(0)))

# nn.functional: convolutions, windows, padding, activations, normalization, losses.
_NN_PARTS = ("spatial_conv", "spatial_pool", "spatial_pad", "spatial_resample", "spatial_sample", "functional_loss",
             "functional_loss_extra", "functional_activation", "functional_core", "functional_norm",
             "functional_dropout", "functional_attention", "functional_sparse")


def _nn(name):
    """A ``jitorch.nn.functional`` function (from its implementation module while ``functional`` is being written)."""
    import importlib

    for module in ("jitorch.nn.functional", *(f"jitorch.nn._{part}" for part in _NN_PARTS)):
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    raise AttributeError(f"no nn.functional.{name}")


case("conv", lambda t, m: (_nn("conv1d")(m.f(2, 2, 7), m.f(3, 2, 3), m.f(3), stride=2, padding=1),
                           _nn("conv2d")(m.f(1, 4, 5, 5), m.f(4, 2, 2, 3), groups=2, dilation=(2, 1)),
                           _nn("conv3d")(m.f(1, 1, 3, 4, 4), m.f(2, 1, 2, 2, 2), padding=1),
                           _nn("conv2d")(m.f(1, 2, 4, 4).half(), m.f(2, 2, 2, 2).half())))
case("conv_transpose", lambda t, m: (_nn("conv_transpose1d")(m.f(1, 2, 5), m.f(2, 3, 3), m.f(3), stride=2),
                                     _nn("conv_transpose2d")(m.f(2, 2, 3, 3), m.f(2, 1, 2, 2), stride=2, padding=1,
                                                             output_padding=1, groups=2)))
case("im2col_col2im", lambda t, m: (lambda cols: (cols, _nn("fold")(cols, (5, 5), 3, padding=1)))(
    _nn("unfold")(m.f(1, 2, 5, 5), 3, padding=1)))
case("max_pool", lambda t, m: (_nn("max_pool2d")(m.f(1, 2, 5, 5), 2, return_indices=True),
                               _nn("max_pool1d")(m.f(1, 2, 7), 3, 2, padding=1, ceil_mode=True),
                               _nn("max_pool3d")(m.f(1, 1, 4, 4, 4), 2, dilation=1),
                               _nn("max_pool2d")(m.i(1, 1, 4, 4).float(), 2)))
# max_pool_scatter: the disjoint-window gradient row (stride past the window, padding).
case("max_pool_scatter", lambda t, m: (_nn("max_pool2d")(m.f(2, 2, 7, 7), 2, 3, padding=1),))
case("adaptive_pool", lambda t, m: (_nn("adaptive_max_pool2d")(m.f(1, 2, 5, 7), (2, 3), return_indices=True),
                                    _nn("adaptive_max_pool1d")(m.f(2, 3, 5), 3),
                                    _nn("adaptive_avg_pool2d")(m.f(1, 2, 5, 5), 2),
                                    _nn("avg_pool2d")(m.f(1, 2, 5, 5), 2, padding=1)))
case("pad", lambda t, m: (_nn("pad")(m.f(1, 2, 3, 3), (1, 2, 0, 1)), _nn("pad")(m.f(2, 3), (-1, 1), value=2.0),
                          _nn("pad")(m.f(1, 2, 4), (2, 1), mode="reflect"),
                          _nn("pad")(m.f(1, 2, 3, 3), (1, 1, 1, 1), mode="replicate")))
case("activations", lambda t, m: (lambda x: tuple(_nn(n)(x) for n in (
    "relu6", "leaky_relu", "elu", "selu", "celu", "gelu", "silu", "mish", "softplus", "softsign", "hardtanh",
    "hardswish", "hardsigmoid", "logsigmoid", "tanhshrink", "softshrink", "hardshrink")) + (
    _nn("gelu")(x, approximate="tanh"), _nn("glu")(x, -1), _nn("threshold")(x, 0.1, -1.0),
    _nn("prelu")(x, m.f(1))))(m.f(3, 4)))
case("linear_softmax", lambda t, m: (_nn("linear")(m.f(2, 3), m.f(4, 3), m.f(4)), _nn("softmin")(m.f(2, 3), 1),
                                     _nn("bilinear")(m.f(2, 3), m.f(2, 2), m.f(4, 3, 2), m.f(4)),
                                     _nn("log_softmax")(m.f(2, 3), -1)))
case("linear_row", lambda t, m: (_nn("linear")(m.f(2, 3, 4), m.f(5, 4), m.f(5)), _nn("linear")(m.f(4), m.f(2, 4)),
                                 _nn("linear")(m.f(3, 4, dtype="float64"), m.f(2, 4, dtype="float64"))))
case("fused_rows", lambda t, m: (_nn("softmax")(m.f(2, 3, 4), 1), _nn("log_softmax")(m.f(3, 4), 0),
                                 _nn("layer_norm")(m.f(2, 3, 4), (3, 4), m.f(3, 4), m.f(3, 4)),
                                 _nn("layer_norm")(m.f(3, 4), (4,)),
                                 _nn("cross_entropy")(m.f(4, 5), m.i(4, hi=5), ignore_index=2),
                                 _nn("nll_loss")(m.f(4, 5), m.i(4, hi=5), reduction="none")))
# The recurrent scan rows and their backward rows (LSTM with a projection, reverse directions, GRU's b_hh, relu), in
# float64: float32 CPU arrays take the generated step kernels (rnn_native), which the surface run would not.
case("rnn_scan_rows", lambda t, m: (
    rnn_ops.scan("LSTM", m.d(3, 2, 8), (m.d(2, 1), m.d(2, 2)), m.d(8, 1), w_hr=m.d(1, 2), reverse=True),
    rnn_ops.scan("LSTM", m.d(3, 2, 8), (m.d(2, 2), m.d(2, 2)), m.d(8, 2)),
    rnn_ops.scan("GRU", m.d(3, 2, 6), (m.d(2, 2),), m.d(6, 2), b_hh=m.d(6)),
    rnn_ops.scan("GRU", m.d(3, 2, 6), (m.d(2, 2),), m.d(6, 2), reverse=True),
    rnn_ops.scan("RNN", m.d(3, 2, 2), (m.d(2, 2),), m.d(2, 2), relu=True, reverse=True),
    rnn_ops.scan("RNN", m.d(3, 2, 2), (m.d(2, 2),), m.d(2, 2))))
case("lstm_cell_row", lambda t, m: (
    rnn_ops.lstm_cell(m.d(2, 3), m.d(2, 4), m.d(2, 4), m.d(16, 3), m.d(16, 4), m.d(16), m.d(16)),
    rnn_ops.lstm_cell(m.d(2, 3), m.d(2, 4), m.d(2, 4), m.d(16, 3), m.d(16, 4))))
# A compiled training graph's convolution that also returns its window matrix (jitorch._compile.decompose).
case("convolution_cols", lambda t, m: _dispatch.apply(OPS["convolution_cols"], m.f(2, 3, 6, 6, grad=False),
                                                      m.f(4, 3, 3, 3, grad=False), m.f(4, grad=False),
                                                      stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1))
# The range check a compiled nll_loss keeps on the host (jitorch._compile.decompose).
case("nll_check_targets", lambda t, m: _dispatch.apply(OPS["nll_check_targets"], m.i(4, hi=5), classes=5,
                                                       ignore_index=2))
case("norm_layers", lambda t, m: (_nn("layer_norm")(m.f(2, 3, 4), (4,), m.f(4), m.f(4)),
                                  _nn("batch_norm")(m.f(4, 3, 2), t.zeros(3), t.ones(3), m.f(3), m.f(3), training=True),
                                  _nn("group_norm")(m.f(2, 4, 3), 2, m.f(4), m.f(4)),
                                  _nn("instance_norm")(m.f(2, 3, 4)), _nn("normalize")(m.f(3, 4), dim=1),
                                  _nn("rms_norm")(m.f(2, 4), (4,), m.f(4))))
case("losses", lambda t, m: (
    _nn("binary_cross_entropy")(m.f(2, 3, lo=0.05, hi=0.95), m.f(2, 3, lo=0, hi=1, grad=False)),
    _nn("binary_cross_entropy")(m.values([0.0, 1.0, 0.5]), m.values([0.0, 1.0, 1.0], grad=False), reduction="none"),
    _nn("binary_cross_entropy_with_logits")(m.f(2, 3), m.f(2, 3, lo=0, hi=1, grad=False)),
    _nn("cross_entropy")(m.f(4, 5), m.i(4), label_smoothing=0.1), _nn("nll_loss")(m.f(4, 5), m.i(4), reduction="sum"),
    _nn("cross_entropy")(m.f(2, 3, 4), m.i(2, 4, hi=3), ignore_index=1), _nn("mse_loss")(m.f(3), m.f(3)),
    _nn("l1_loss")(m.f(3), m.f(3)), _nn("smooth_l1_loss")(m.f(3), m.f(3)), _nn("huber_loss")(m.f(3), m.f(3)),
    _nn("kl_div")(m.f(2, 3), m.f(2, 3), reduction="batchmean", log_target=True),
    _nn("margin_ranking_loss")(m.f(3), m.f(3), m.values([1.0, -1.0, 1.0], grad=False)),
    _nn("multi_margin_loss")(m.f(3, 4), m.i(3, hi=4)), _nn("triplet_margin_loss")(m.f(2, 3), m.f(2, 3), m.f(2, 3))))
case("embedding_attention", lambda t, m: (
    _nn("embedding")(m.i(2, 3), m.f(5, 4)), _nn("embedding")(m.i(2, 3), m.f(5, 4), sparse=True),
    _nn("one_hot")(m.i(4), 5),
    _nn("embedding_bag")(m.i(6), m.f(5, 3), t.tensor([0, 2]), mode="max"),
    _nn("scaled_dot_product_attention")(m.f(2, 3, 4), m.f(2, 5, 4), m.f(2, 5, 4), is_causal=False),
    _nn("cosine_similarity")(m.f(3, 4), m.f(3, 4)), _nn("pairwise_distance")(m.f(3, 4), m.f(3, 4)),
    _nn("pdist")(m.f(4, 3))))
case("resample", lambda t, m: (_nn("interpolate")(m.f(1, 2, 3, 3), scale_factor=2, mode="nearest"),
                               _nn("interpolate")(m.f(1, 2, 3, 3), size=(4, 7), mode="nearest"),
                               _nn("interpolate")(m.f(1, 2, 3, 3), size=(4, 5), mode="bilinear", align_corners=False),
                               _nn("interpolate")(m.f(1, 2, 3), size=5, mode="linear"),
                               _nn("interpolate")(m.f(1, 2, 3, 3), scale_factor=2, mode="bicubic"),
                               _nn("interpolate")(m.f(1, 1, 2, 2, 2), size=3, mode="trilinear"),
                               _nn("pixel_shuffle")(m.f(1, 4, 2, 2), 2),
                               _nn("grid_sample")(m.f(1, 2, 4, 4), m.f(1, 3, 3, 2, lo=-1, hi=1), align_corners=True),
                               _nn("affine_grid")(m.f(1, 2, 3), (1, 1, 3, 3), align_corners=False)))
case("dropout", lambda t, m: (_nn("dropout")(m.f(4, 5), 0.3), _nn("dropout2d")(m.f(2, 3, 2, 2), 0.5),
                              _nn("alpha_dropout")(m.f(6), 0.2, training=True)))

# Random sampling that goes through rows, and a device move (a CPU-to-CPU copy is the only one here).
case("random", lambda t, m: (t.normal(m.f(3), m.f(3, lo=0.5)), t.bernoulli(m.f(4, lo=0, hi=1, grad=False)),
                             t.multinomial(m.f(2, 4, lo=0.1, hi=1, grad=False), 3),
                             t.nn.init.uniform_(t.empty(3)), m.f(3).new_empty(2).normal_(),
                             t.rand_like(m.f(2)) * m.f(2), t.poisson(m.f(3, lo=1, hi=3, grad=False)),
                             t.randperm(5), t.randint(0, 4, (3,))))
case("to_device_row", lambda t, m: _dispatch.apply(OPS["to_device"], m.f(2, 3), device_type="cpu", index=None,
                                                   source=("cpu", None)))
# Sparse products (scipy.sparse on the host, cupyx.scipy.sparse on CUDA): coalesced, uncoalesced and transposed.
case("sparse_mm", lambda t, m: (lambda s, d: (t.sparse.mm(s, d), t.sparse.mm(s.coalesce(), d), m.f(4, 2) @ s,
                                              s.to_dense()))(
    t.sparse_coo_tensor(t.tensor([[0, 1, 1, 0], [2, 0, 2, 2]]), m.f(4), (2, 3)), m.f(3, 2)))
case("autograd_double_backward", lambda t, m: (lambda x: t.autograd.grad((x.sin() * x).sum(), x,
                                                                        create_graph=True)[0] * x)(m.f(4)))

CASE_IDS = [c.id for c in CASES]
assert len(set(CASE_IDS)) == len(CASE_IDS), "duplicate case ids"


def _params():
    for c in CASES:
        marks = () if c.xfail is None else pytest.mark.xfail(strict=True, raises=(AttributeError, TypeError),
                                                             reason=c.xfail)
        yield pytest.param(c, id=c.id, marks=marks)


@pytest.mark.parametrize("case_", list(_params()))
def test_sweep(surface, case_):
    expected = run_plain(case_, surface)
    got = run_surface(case_)
    assert_same(expected, got)


def test_every_row_is_reached(surface):
    """Each row of ``OPS`` ran with the surface in some case (forward, backward or a view replay)."""
    for c in CASES:
        if c.id not in REACHED:  # not run in this process (a ``-k`` selection, or another xdist worker ran it)
            try:
                run_surface(c)
            except (AttributeError, TypeError):
                if c.xfail is None:
                    raise
    reached = set().union(*REACHED.values())
    missing = sorted(set(OPS) - reached)
    assert not missing, f"rows no case reached with the surface: {missing}"


def test_fixture_catches_a_numpy_only_kernel(surface):
    """A kernel reaching for a NumPy-only keyword fails under the fixture, also through the float fast path."""
    surface.setattr(OPS["exp"], "kernel", lambda xp, a: xp.sum(a, where=a > 0))
    with pytest.raises(TypeError, match=r"xp.sum\(\): keyword 'where'"):
        jitorch.exp(jitorch.ones(3))


def _kernel_method_calls():
    """(file, line, method, keywords) of every ``<array>.<method>(..., keyword=...)`` call in a kernel (a function
    or lambda of the op modules whose first parameter is ``xp``) where ``method`` is a ``cupy.ndarray`` method."""
    import cupy

    calls = []
    for path in sorted(Path(jitorch.ops.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.Lambda)) or not fn.args.args or fn.args.args[0].arg != "xp":
                continue
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.keywords):
                    continue
                receiver, method = node.func.value, node.func.attr
                if isinstance(receiver, ast.Name) and receiver.id in ("xp", "np") or not hasattr(cupy.ndarray, method):
                    continue
                calls.append((path.name, node.lineno, method, [k.arg for k in node.keywords if k.arg]))
    return calls


def test_kernel_array_method_keywords_exist_in_cupy():
    """Array methods escape the surface (kernels get NumPy arrays): check their keywords statically instead."""
    calls = _kernel_method_calls()
    assert calls, "the scan found no array method calls: it no longer recognizes kernels"
    wrong = [f"{file}:{line}: .{method}({key}=...)" for file, line, method, keys in calls
             for key in keys if key not in (cupy_array_method_keywords(method) or {key})]
    assert not wrong, f"array method keywords CuPy's ndarray does not take: {wrong}"


# -- the surface itself ------------------------------------------------------------------------------------------------
def test_surface_is_numpy_for_runtime_helpers():
    assert SURFACE.__name__ == "numpy" and not is_cupy(SURFACE)
    assert SURFACE.float32 is np.float32 and SURFACE.dtype is np.dtype and SURFACE.bool_ is np.bool_
    assert SURFACE.ndarray is np.ndarray and SURFACE.inf == np.inf
    assert SURFACE.linalg.__name__ == "numpy.linalg" and not is_cupy(SURFACE.linalg)


@pytest.mark.parametrize("path", ["block", "errstate", "linalg.vector_norm", "linalg.svdvals", "matvec"])
def test_surface_refuses_numpy_only_names(path):
    head, _, name = path.rpartition(".")
    module = SURFACE.linalg if head else SURFACE
    with pytest.raises(AttributeError, match=f"xp.{path}: exists in NumPy but not in CuPy; kernels must run on both"):
        getattr(module, name)


def test_surface_refuses_numpy_only_keywords():
    x = np.arange(6.0).reshape(2, 3)
    assert SURFACE.sum(x, axis=1, keepdims=True).shape == (2, 1)
    with pytest.raises(TypeError, match=r"xp.sum\(\): keyword 'where'"):
        SURFACE.sum(x, where=x > 1)
    with pytest.raises(TypeError, match=r"xp.add\(\): keyword\(s\) \['where'\]"):
        SURFACE.add(x, x, where=x > 1)
    with pytest.raises(TypeError, match=r"xp.linalg.qr\(\): keyword 'foo'"):
        SURFACE.linalg.qr(x, foo=1)


def test_surface_ufunc_methods_follow_cupy():
    assert SURFACE.add.accumulate == np.add.accumulate
    assert SURFACE.maximum.at == np.maximum.at
    with pytest.raises(AttributeError, match="xp.maximum.accumulate"):
        SURFACE.maximum.accumulate
    with pytest.raises(AttributeError, match="xp.multiply.at"):
        SURFACE.multiply.at
    with pytest.raises(AttributeError, match="special.agm: exists in SciPy but not in CuPy"):
        SPECIAL_SURFACE.agm


# -- the CuPy branches of kernel helpers, run through the surface ------------------------------------------------------
@pytest.mark.parametrize("name", ["maximum", "minimum", "logaddexp", "add"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_doubling_scan_matches_accumulate(name, axis):
    a = np.random.default_rng(0).standard_normal((3, 5, 4))
    expected = getattr(np, name).accumulate(a, axis=axis)
    np.testing.assert_allclose(sorting_ops.doubling_scan(SURFACE, name, a, axis), expected, rtol=1e-12)


@pytest.mark.parametrize("reduce", ["prod", "amax", "amin"])
def test_reduce_in_rounds_matches_ufunc_at(reduce):
    rng = np.random.default_rng(1)
    out = rng.standard_normal((3, 4))
    key = (np.array([[0, 0, 2, 0], [1, 1, 1, 1]]), np.array([[3, 3, 3, 0], [0, 1, 0, 0]]))
    values = rng.standard_normal((2, 4))
    expected = out.copy()
    getattr(np, {"prod": "multiply", "amax": "maximum", "amin": "minimum"}[reduce]).at(expected, key, values)
    indexing_ops.reduce_in_rounds(SURFACE, reduce, out, key, values)
    np.testing.assert_array_equal(out, expected)


def test_runtime_helpers_leave_cupy_to_the_fallbacks():
    class FakeCupy:
        __name__ = "cupy"

    assert runtime_devices.accumulate(FakeCupy(), "maximum", np.ones(3), 0) is None
    assert runtime_devices.ufunc_at(FakeCupy(), "multiply", np.ones(3), (np.array([0]),), 2.0) is False
    out = np.ones(3)
    assert runtime_devices.ufunc_at(SURFACE, "multiply", out, (np.array([0, 0]),), 2.0) is True
    np.testing.assert_array_equal(out, [4.0, 1.0, 1.0])
