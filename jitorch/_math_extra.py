"""More of torch's numeric API, written as composites of existing ops (so autograd, tracing and fusion come free).

Special functions (``lgamma``, ``digamma``, ``polygamma``, ``i0``, ``mvlgamma``), differences and integrals
(``diff``, ``trapezoid``, ``cumulative_trapezoid``), statistics (``quantile``, ``nanquantile``, ``cov``,
``corrcoef``), ``repeat_interleave``, ``vander``, ``combinations``, ``heaviside``, ``logaddexp2``, ``ldexp``,
``gcd``/``lcm``, ``nextafter``, ``dist``, ``renorm``.

>>> import jitorch
>>> jitorch.diff(jitorch.tensor([1, 4, 9, 16]))
tensor([3, 5, 7])
>>> jitorch.repeat_interleave(jitorch.tensor([1, 2]), 2)
tensor([1, 1, 2, 2])
>>> jitorch.quantile(jitorch.tensor([1.0, 2.0, 3.0, 4.0]), 0.5)
tensor(2.5000)
"""
from __future__ import annotations

import math


from . import _dtype
from ._dispatch import apply, apply_inplace
from ._shape import wrap_dim
from ._stat_checks import check_weights, clip_unit, warn_at_caller
from ._tensor import Tensor
from .amp._cast_mode import autocast_policy
from .ops import special as S
from ._math_shape import combinations, repeat_interleave, vander

__all__ = ["lgamma", "digamma", "polygamma", "i0", "mvlgamma", "gcd", "lcm", "diff", "trapezoid", "trapz",
           "cumulative_trapezoid", "quantile", "nanquantile", "cov", "corrcoef", "repeat_interleave", "vander",
           "combinations", "heaviside", "logaddexp2", "ldexp", "dist", "renorm", "positive", "angle", "matrix_exp",
           "nextafter"]


def lgamma(input, *, out=None):
    """Elementwise ``log(|Gamma(x)|)``."""
    return _out(apply(S.LGAMMA, input), out)


def digamma(input, *, out=None):
    """Elementwise ``d/dx log(Gamma(x))``."""
    return _out(apply(S.DIGAMMA, input), out)


def polygamma(n, input, *, out=None):
    """The ``n``-th derivative of digamma."""
    if int(n) < 0:
        raise RuntimeError(f"polygamma(n, x) does not support negative n (got n={n})")
    return _out(apply(S.POLYGAMMA, input, n=int(n)), out)


def i0(input, *, out=None):
    """Modified Bessel function of the first kind, order 0."""
    return _out(apply(S.I0, input), out)


def mvlgamma(input, p):
    """Multivariate log-gamma of dimension ``p``: sum of lgamma(x - j/2) plus a constant."""
    if p < 1:
        raise RuntimeError(f"mvlgamma: p has to be greater than or equal to 1, got {p}")
    const = p * (p - 1) / 4 * math.log(math.pi)
    return sum(lgamma(input - j / 2) for j in range(p)) + const


def gcd(input, other, *, out=None):
    """Elementwise greatest common divisor of integer tensors."""
    return _out(apply(S.GCD, input, other), out)


def lcm(input, other, *, out=None):
    """Elementwise least common multiple of integer tensors."""
    return _out(apply(S.LCM, input, other), out)


def nextafter(input, other, *, out=None):
    """The next floating-point value after ``input`` towards ``other``."""
    return _out(apply(S.NEXTAFTER, input, other), out)


def _out(result, out):
    if out is None:
        return result
    from ._pointwise import check_out_dtype

    check_out_dtype(result, out)
    out.copy_(result) if out.shape == result.shape else out.resize_(result.shape).copy_(result)
    return out


def diff(input, n=1, dim=-1, prepend=None, append=None):
    """``n``-th forward difference along ``dim`` (booleans use xor, as torch)."""
    from ._movement import cat, narrow

    if input.dim() == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:  # range(n) would silently return the input
        raise RuntimeError(f"diff: order must be non-negative but got {n}")
    dim = wrap_dim(dim, input.dim(), "diff")
    parts = [t for t in (prepend, input, append) if t is not None]
    x = cat([p if p.dim() else p.expand(input.shape[:dim] + (1,) + input.shape[dim + 1:]) for p in parts], dim) \
        if len(parts) > 1 else input
    for _ in range(n):
        length = x.shape[dim]
        if length == 0:
            break
        hi, lo = narrow(x, dim, 1, length - 1), narrow(x, dim, 0, length - 1)
        x = hi ^ lo if x.dtype == _dtype.bool else hi - lo
    return x


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """Integral of ``y`` along ``dim`` by the trapezoid rule, with sample points ``x`` or spacing ``dx``."""
    from ._movement import narrow

    dim = wrap_dim(dim, y.dim(), "trapezoid")
    n = y.shape[dim]
    if n == 0:
        return y.sum(dim) * 0
    avg = (narrow(y, dim, 1, n - 1) + narrow(y, dim, 0, n - 1)) / 2
    if x is None:
        return avg.sum(dim) * (1.0 if dx is None else dx)
    if not isinstance(x, Tensor):
        return avg.sum(dim) * x
    spacing = diff(x, dim=-1 if x.dim() == 1 else dim)
    if x.dim() == 1:
        spacing = spacing.reshape((-1,) + (1,) * (y.dim() - dim - 1))
    return (avg * spacing).sum(dim)


trapz = trapezoid


def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """Running trapezoid integral along ``dim`` (one element shorter than ``y`` there)."""
    from ._movement import narrow

    dim = wrap_dim(dim, y.dim(), "cumulative_trapezoid")
    n = y.shape[dim]
    avg = (narrow(y, dim, 1, max(n - 1, 0)) + narrow(y, dim, 0, max(n - 1, 0))) / 2
    if isinstance(x, Tensor):
        spacing = diff(x, dim=-1 if x.dim() == 1 else dim)
        if x.dim() == 1:
            spacing = spacing.reshape((-1,) + (1,) * (y.dim() - dim - 1))
        avg = avg * spacing
    elif x is not None or dx is not None:
        avg = avg * (x if x is not None else dx)
    return avg.cumsum(dim)


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(input, q, dim, keepdim, interpolation, ignore_nan):
    # Every message says quantile(), nanquantile's too, as ATen's shared checks do.
    from ._creation import tensor
    from ._movement import movedim
    from ._sorting import sort

    if isinstance(q, (int, float)) and not 0 <= q <= 1:  # torch's float overload checks first
        raise RuntimeError(f"quantile() q must be in the range [0, 1] but got {q}")
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError("quantile() interpolation must be one of linear, lower, higher, midpoint or nearest, "
                           f"but got {interpolation}")
    if input.dtype not in (_dtype.float32, _dtype.float64):  # (no half types either)
        raise RuntimeError("quantile() input tensor must be either float or double dtype")
    if isinstance(q, Tensor) and q.dtype != input.dtype:
        raise RuntimeError("quantile() q tensor must be same dtype as the input tensor")
    if dim is not None and input.dim() == 0:  # a 0-d input is its one slice, with no dim to move or keep
        wrap_dim(dim, 0)
        dim = None
    scalar_q = not isinstance(q, Tensor) or q.dim() == 0  # a 0-d q adds no dim to the result, as a float q
    qs = q.to(input.dtype) if isinstance(q, Tensor) else tensor(q, dtype=input.dtype)
    if qs.dim() > 1:
        raise RuntimeError("quantile() q must be a scalar or 1D tensor")
    if bool(((qs < 0) | (qs > 1)).any()):
        raise RuntimeError("quantile() q values must be in the range [0, 1]")
    x = input.reshape(-1) if dim is None else movedim(input, dim, -1)
    sorted_x = sort(x, dim=-1).values  # NaN sorts last
    n = sorted_x.shape[-1]
    if sorted_x.numel() == 0:
        raise RuntimeError("quantile() input tensor must be non-empty")
    q_col = qs.reshape((-1,) + (1,) * sorted_x.dim())  # [Q, ..., 1]
    # As torch: a NaN result gathers a NaN (the last sorted element, or the first of an all-NaN slice), so the
    # gradient reaches that element instead of vanishing.
    if ignore_nan:
        count = (~sorted_x.isnan()).sum(-1, keepdim=True)
        rank = q_col * (count - 1).to(input.dtype)
        rank = rank.where(rank >= 0, 0.0)  # a select, not clamp: q's gradient there is 0, not 0 * NaN
    else:
        rank = (q_col * (n - 1)).where(~sorted_x.isnan().any(-1, keepdim=True), float(n - 1))
    if interpolation == "lower":
        rank = rank.floor()
    elif interpolation == "higher":
        rank = rank.ceil()
    elif interpolation == "nearest":
        rank = rank.round()
    lo = rank.floor().clamp(min=0).long()
    hi = rank.ceil().clamp(min=0).long()
    expanded = sorted_x.expand(rank.shape[:1] + sorted_x.shape)
    lo_v = expanded.gather(-1, lo.expand(rank.shape[:1] + sorted_x.shape[:-1] + (1,)))
    hi_v = expanded.gather(-1, hi.expand(rank.shape[:1] + sorted_x.shape[:-1] + (1,)))
    if interpolation == "midpoint":
        weight = (hi > lo).to(input.dtype) * 0.5
    else:
        weight = rank - lo.to(input.dtype)
    out = lo_v.lerp(hi_v, weight).squeeze(-1)  # [Q, ...] (ATen's lerp: from the upper end for weights >= 0.5)
    if dim is not None and keepdim:
        out = out.unsqueeze(wrap_dim(dim, input.dim()) + 1)
    elif dim is None and keepdim:
        out = out.reshape((out.shape[0],) + (1,) * input.dim())
    return out[0] if scalar_q else out


@autocast_policy(cpu="fp32")
def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """The ``q``-th quantiles along ``dim`` (all elements when ``dim`` is None); NaN if the slice has NaN."""
    return _quantile(input, q, dim, keepdim, interpolation, False)


@autocast_policy(cpu="fp32")
def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """``quantile`` that ignores NaN values."""
    return _quantile(input, q, dim, keepdim, interpolation, True)


def cov(input, *, correction=1, fweights=None, aweights=None):
    """Covariance matrix of the variables in the rows of ``input`` (observations in the columns)."""
    if input.dim() > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an input with {input.dim()} "
                           "dimensions")
    if input.dtype is _dtype.bool:
        raise RuntimeError("cov(): bool dtype is not supported for input")
    x = input.reshape(1, -1) if input.dim() < 2 else input
    if not x.dtype.is_floating_point and not x.dtype.is_complex:
        x = x.to(_dtype.get_default_dtype())
    w = None
    for name, weights in (("fweights", fweights), ("aweights", aweights)):
        if weights is not None:
            check_weights(name, weights, x.shape[1])
    if fweights is not None:
        w = fweights.to(x.dtype)
    if aweights is not None:
        w = aweights.to(x.dtype) if w is None else w * aweights.to(x.dtype)
    if w is None:
        total = x.shape[1]
        mean = x.mean(1, keepdim=True)
        norm = total - correction
    else:
        total = w.sum()
        if not bool(total != 0):
            raise RuntimeError("cov(): weights sum to zero, can't be normalized")
        mean = (x * w).sum(1, keepdim=True) / total
        norm = total - correction * ((w * aweights.to(x.dtype)).sum() / total if aweights is not None else 1)
    if bool(norm <= 0):
        warn_at_caller("cov(): degrees of freedom is <= 0. Correction should be strictly less than the number of "
                       "observations.")
    centered = x - mean
    weighted = centered if w is None else centered * w
    c = weighted @ centered.conj().t()
    c = c / (norm.clamp(min=0) if isinstance(norm, Tensor) else max(norm, 0))  # torch zeroes a negative factor
    return c.squeeze()  # as ATen: one variable gives a 0-d result even from a (1, N) input


def corrcoef(input):
    """Pearson correlation coefficients of the rows of ``input``, clipped to [-1, 1]."""
    c = cov(input)
    if c.dim() == 0:
        return c / c
    d = c.diagonal().sqrt()
    return clip_unit(c / d.unsqueeze(1) / d.unsqueeze(0))


def heaviside(input, values):
    """0 where ``input < 0``, 1 where ``input > 0`` and ``values`` where ``input == 0``."""
    if input.is_complex() or (isinstance(values, Tensor) and values.is_complex()):
        raise RuntimeError("heaviside is not yet implemented for complex tensors.")
    if isinstance(values, Tensor) and values.dtype != input.dtype:
        raise RuntimeError(f"heaviside is not yet implemented for tensors with different dtypes, got "
                           f"{input.dtype} and {values.dtype}")
    from ._pointwise import where

    step = where(input > 0, input.new_ones(()), input.new_zeros(()))
    return where(input == 0, values, step)


def logaddexp2(input, other):
    """``log2(2**input + 2**other)`` without overflow."""
    from ._pointwise_stable import log_add_exp

    return log_add_exp(input, other, base2=True)


def ldexp(input, other, *, out=None):
    """``input * 2**other``, as torch: the power in ``other``'s float dtype (the default one for integers), the
    product in the operands' common dtype when that is floating."""
    if isinstance(other, Tensor) and other.dtype is _dtype.bool and input.dtype.is_floating_point:
        raise NotImplementedError('"ldexp_cpu_exp" not implemented for \'Bool\'')
    if isinstance(other, Tensor) and other.dtype.category == _dtype.INT and input.dtype.category >= _dtype.FLOAT:
        # torch's ldexp kernel (a floating input, an integer exponent) scales exactly, as std::ldexp: here in
        # float64 (2**250 would be inf in float32, -0.0 * 2**255 nan in float16) by three finite thirds of the
        # exponent (0 * 2**-3000 stays 0), and one rounding into the result dtype. Other inputs go through
        # input * 2.0 ** other.
        common = _dtype.result_type(input, other)
        wide = _dtype.complex128 if common.is_complex else _dtype.float64
        # the exponent as the kernel's C int (an int64 one wraps); beyond +-2200 every finite float64 is 0 or inf
        k = other.to(_dtype.int32).to(_dtype.float64).clamp(-2200, 2200)
        a = (k / 3).floor()
        b = ((k - a) / 2).floor()
        return _out((input.to(wide) * 2.0 ** a * 2.0 ** b * 2.0 ** (k - a - b)).to(common), out)
    result = input * 2.0 ** other
    if isinstance(other, Tensor):
        common = _dtype.result_type(input, other)
        if common.is_floating_point and result.dtype is not common:
            result = result.to(common)
    return _out(result, out)


def dist(input, other, p=2):
    """The ``p``-norm of ``input - other``."""
    from .linalg import vector_norm

    return vector_norm(input - other, p)


def renorm(input, p, dim, maxnorm):
    """Rescale each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` to norm ``maxnorm``."""
    from .linalg import vector_norm

    if input.dim() < 2 or p <= 0 or maxnorm < 0:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {input.dim()} dimensions" if input.dim() < 2
                           else "renorm: non-positive-norm not supported" if p <= 0
                           else f"renorm: expected maxnorm to be >= 0 but got {maxnorm:g}")
    dim = wrap_dim(dim, input.dim(), "renorm")
    others = tuple(d for d in range(input.dim()) if d != dim)
    norms = vector_norm(input, p, dim=others, keepdim=True)
    scale = (maxnorm / (norms + 1e-7)).where(norms > maxnorm, 1.0)
    return input * scale


def positive(input):
    """``input`` itself (an error for bool tensors, as torch)."""
    if input.dtype == _dtype.bool:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input


def angle(input):
    """Elementwise argument: ``atan2(imag, real)`` for complex, ``pi`` for negative reals and 0 otherwise."""
    if input.dtype.is_complex:
        # angle(0) is 0 with a zero gradient in torch; atan2's gradient at (0, 0) would be 0/0.
        safe = input.where(input != 0, 1.0)
        return safe.imag.atan2(safe.real)
    x = input if input.dtype.is_floating_point else input.to(_dtype.get_default_dtype())
    return (x < 0).to(x.dtype) * math.pi + x.where(x.isnan(), 0.0)  # NaN stays NaN


def matrix_exp(input):
    """``torch.matrix_exp``: ``linalg.matrix_exp``."""
    from ._linalg_extra import matrix_exp as _matrix_exp

    return _matrix_exp(input)


_METHODS = {name: globals()[name] for name in ("lgamma", "digamma", "i0", "mvlgamma", "gcd", "lcm", "diff",
                                                "quantile", "nanquantile", "cov", "corrcoef", "repeat_interleave",
                                                "heaviside", "logaddexp2", "ldexp", "dist", "renorm", "positive",
                                                "angle", "matrix_exp")}
_METHODS["polygamma"] = lambda self, n: polygamma(n, self)
_METHODS.update(nextafter=nextafter, nextafter_=lambda self, other: apply_inplace(S.NEXTAFTER, self, other))
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
