"""``jitorch.special``: torch.special's functions, as aliases and composites of existing ops.

>>> import jitorch
>>> jitorch.special.expit(jitorch.tensor([0.0]))
tensor([0.5000])
>>> jitorch.special.entr(jitorch.tensor([0.0, 0.5]))
tensor([0.0000, 0.3466])
"""
from __future__ import annotations

import math

from . import _math_extra as _m
from . import _pointwise as _p
from . import _special_extra as _x
from ._dispatch import apply
from ._tensor import Tensor
from .ops import special as _rows

__all__ = ["expit", "logit", "erf", "erfc", "erfcx", "erfinv", "gammaln", "digamma", "psi", "polygamma",
           "multigammaln", "i0", "i1", "ndtr", "ndtri", "log1p", "expm1", "exp2", "sinc", "round", "xlogy", "xlog1py",
           "entr", "softmax", "log_softmax", "logsumexp", "gammainc", "gammaincc", *_x.__all__]

expit, logit, erf, erfc, erfinv = _p.sigmoid, _p.logit, _p.erf, _p.erfc, _p.erfinv
log1p, expm1, exp2, sinc, round, xlogy = _p.log1p, _p.expm1, _p.exp2, _p.sinc, _p.round, _p.xlogy  # noqa: A001
gammaln, digamma, psi, polygamma, i0 = _m.lgamma, _m.digamma, _m.digamma, _m.polygamma, _m.i0
# Bessel, Airy, zeta, log_ndtr and the orthogonal polynomials (``_special_extra.py``).
globals().update({_name: getattr(_x, _name) for _name in _x.__all__})


def multigammaln(input, p):
    """Multivariate log-gamma (``torch.mvlgamma``)."""
    return _m.mvlgamma(input, p)


def _check_gammainc(name, input, other):
    for arg, value in (("input", input), ("other", other)):
        if not isinstance(value, Tensor):
            raise TypeError(f"{name}(): argument '{arg}' must be Tensor, not {type(value).__name__}")


def gammainc(input, other, *, out=None):
    """The regularized lower incomplete gamma function P(input, other) (``torch.igamma``); differentiable in
    ``other`` only, as in PyTorch."""
    if out is not None:
        _p.check_out_tensor(out, "special_gammainc")
    _check_gammainc("gammainc", input, other)
    result = apply(_rows.GAMMAINC, input, other)
    return out.copy_(result) if out is not None else result


def gammaincc(input, other, *, out=None):
    """The regularized upper incomplete gamma function Q(input, other) = 1 - P (``torch.igammac``)."""
    if out is not None:
        _p.check_out_tensor(out, "special_gammaincc")
    _check_gammainc("gammaincc", input, other)
    result = apply(_rows.GAMMAINCC, input, other)
    return out.copy_(result) if out is not None else result


def i1(input):
    """Modified Bessel function of the first kind, order 1."""
    return apply(_rows.I1, input)


def erfcx(input):
    """Scaled complementary error function ``exp(x**2) * erfc(x)``, finite where its factors overflow."""
    return apply(_rows.ERFCX, input)


def ndtr(input):
    """Standard normal CDF."""
    return 0.5 * _p.erfc(-input * (1 / math.sqrt(2)))


def ndtri(input):
    """Inverse of the standard normal CDF (accurate in the tails)."""
    return apply(_rows.NDTRI, input)


def xlog1py(input, other, *, out=None):
    """``input * log1p(other)``, 0 where ``input`` is 0 unless ``other`` is NaN: the ``special_xlog1py`` row (torch's
    value and gradients; integer inputs compute in the default float dtype).

    >>> import jitorch
    >>> jitorch.special.xlog1py(jitorch.tensor([0.0, 2.0]), jitorch.tensor([-1.0, 0.0])).tolist()
    [0.0, 0.0]
    """
    from ._pointwise_composite import _binary_float_row
    from .ops.xlogy_ops import XLOG1PY, xlog1py as fast

    result = _binary_float_row(fast, XLOG1PY, "SpecialXlog1PyBackward", input, other)
    return _p._write_out(result, out, "special_xlog1py", inputs=(input, other) if out is not None else ())


def entr(input):
    """Elementwise entropy term ``-x * log(x)``: 0 at 0 and ``-inf`` for negative ``x``."""
    x = input if input.dtype.is_floating_point else input.float()
    value = -x * x.log()
    return _p.where(x == 0, 0.0, _p.where(x < 0, -math.inf, value))


def softmax(input, dim, *, dtype=None):
    """``softmax`` along ``dim``."""
    return input.softmax(dim, dtype=dtype)


def log_softmax(input, dim, *, dtype=None):
    """``log_softmax`` along ``dim``."""
    return input.log_softmax(dim, dtype=dtype)


def logsumexp(input, dim, keepdim=False):
    """``log(sum(exp(input)))`` along ``dim``, stable."""
    return input.logsumexp(dim, keepdim)

from ._overrides import publish as _publish  # noqa: E402

_publish(globals())  # see jitorch/_overrides.py
