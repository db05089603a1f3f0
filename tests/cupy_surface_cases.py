"""The cases of the CuPy-surface sweep (``test_cupy_surface.py``): pointwise, reductions, shapes, indexing,
linear algebra, sorting and scans. Each ``case(name, fn)`` adds one; ``fn(t, m)`` builds its tensors with ``m``,
a ``Maker``, and returns the outputs. ``cupy_surface_cases_nn.py`` adds the nn and random cases to ``CASES``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from jitorch import _dispatch
from jitorch.ops import OPS


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
case("binary_alpha", lambda t, m: (t.add(m.f(2, 3), m.f(3), alpha=0.3), t.sub(m.f(2, 3), 1.5, alpha=-2),
                                   t.add(m.f(3).double(), m.f(3), alpha=2)))
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
case("composite_pointwise", lambda t, m: (lambda x, y: (t.lerp(x, y, 0.3), t.lerp(x, y, y.sigmoid()), t.hypot(x, y),
                                                         t.xlogy(x.abs(), y.abs()), t.logit(x.sigmoid()),
                                                         t.addcmul(x, x, y, value=0.5),
                                                         t.addcdiv(x, x, y.abs() + 1), t.sinc(x), t.square(x),
                                                         t.copysign(x, y), t.float_power(x.abs(), 2),
                                                         t.logaddexp(x, y), t.logaddexp2(x, y)))(m.f(2, 3), m.f(2, 3)))

case("special_functions", lambda t, m: (lambda x: (t.lgamma(x), t.digamma(x), t.polygamma(2, x), t.i0(x),
                                                     t.special.i1(x), t.lgamma(x.half()), t.special.erfcx(x),
                                                     t.special.ndtri(x / 4), t.special.xlog1py(x - 1, x - 1.5),
                                                     t.special.xlog1py(x, 2.0)))(m.f(2, 3, lo=0.5, hi=3)))
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
