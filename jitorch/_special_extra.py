"""The Bessel, Airy, scaled-Bessel, log-ndtr, Hurwitz zeta and orthogonal-polynomial functions of ``torch.special``
(re-exported by ``jitorch.special``), each one row of ``ops/special_bessel.py`` or ``ops/special_poly.py``.

>>> import jitorch
>>> jitorch.special.hermite_polynomial_h(jitorch.tensor([0.5, 1.0]), 2)
tensor([-1.,  2.])
"""
from __future__ import annotations

from numbers import Number

from ._dispatch import apply
from ._tensor import Tensor
from .ops import special_bessel as _bessel
from .ops import special_poly as _poly

__all__ = ["airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0", "modified_bessel_i1",
           "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
           "spherical_bessel_j0", "i0e", "i1e", "log_ndtr", "zeta", "chebyshev_polynomial_t", "chebyshev_polynomial_u",
           "chebyshev_polynomial_v", "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
           "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w",
           "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]


def _finish(result, out, name):
    if out is None:
        return result
    from ._out_variants import check_out_tensor

    check_out_tensor(out, f"special_{name}")
    return out.copy_(result)


def _unary(name, doc, op=None):
    op = op if op is not None else _bessel.ROWS[name]

    def fn(input, *, out=None):
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
        return _finish(apply(op, input), out, name)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


def _binary_operands(name, a, b, names):
    """``a`` and ``b`` as tensors: one may be a Python number (torch's Scalar overloads), made a 0-d tensor of the
    dtype the pair promotes to, so it stays weak (a float32 tensor and a Python float give float32)."""
    from ._dtype import result_type
    from ._creation import tensor

    a_t, b_t = isinstance(a, Tensor), isinstance(b, Tensor)
    if not (a_t or b_t):
        raise TypeError(f"{name}(): expected at least one of '{names[0]}' and '{names[1]}' to be a Tensor, got "
                        f"{type(a).__name__} and {type(b).__name__}")
    for arg, value in zip(names, (a, b)):
        if not isinstance(value, (Tensor, Number)) or isinstance(value, complex):
            raise TypeError(f"{name}(): argument '{arg}' must be Tensor or a real number, not {type(value).__name__}")
    like = a if a_t else b
    if not a_t:
        a = tensor(a, dtype=result_type(like, a), device=like.device)
    if not b_t:
        b = tensor(b, dtype=result_type(like, b), device=like.device)
    return a, b


airy_ai = _unary("airy_ai", "The Airy function Ai(x). Not differentiable (as torch's).")
bessel_j0 = _unary("bessel_j0", "The Bessel function of the first kind of order 0. Not differentiable (as torch's).")
bessel_j1 = _unary("bessel_j1", "The Bessel function of the first kind of order 1. Not differentiable (as torch's).")
bessel_y0 = _unary("bessel_y0", "The Bessel function of the second kind of order 0 (-inf at 0, nan below). Not "
                   "differentiable.")
bessel_y1 = _unary("bessel_y1", "The Bessel function of the second kind of order 1 (-inf at 0, nan below). Not "
                   "differentiable.")
modified_bessel_i0 = _unary("modified_bessel_i0", "The modified Bessel function I0 (``i0`` without its gradient, as "
                            "torch's).")
modified_bessel_i1 = _unary("modified_bessel_i1", "The modified Bessel function I1 (``special.i1`` without its "
                            "gradient, as torch's).")
modified_bessel_k0 = _unary("modified_bessel_k0", "The modified Bessel function K0 (inf at 0, nan below). Not "
                            "differentiable.")
modified_bessel_k1 = _unary("modified_bessel_k1", "The modified Bessel function K1 (inf at 0, nan below). Not "
                            "differentiable.")
scaled_modified_bessel_k0 = _unary("scaled_modified_bessel_k0", "``exp(x) K0(x)`` (inf at 0, nan below). Not "
                                   "differentiable.")
scaled_modified_bessel_k1 = _unary("scaled_modified_bessel_k1", "``exp(x) K1(x)`` (inf at 0, nan below). Not "
                                   "differentiable.")
spherical_bessel_j0 = _unary("spherical_bessel_j0", "The spherical Bessel function j0(x) = sin(x)/x (1 at 0, 0 at "
                             "+-inf). Not differentiable.")

i0e = _unary("i0e", "The exponentially scaled modified Bessel function ``exp(-|x|) I0(x)``; differentiable.",
             _bessel.I0E)
i1e = _unary("i1e", "The exponentially scaled modified Bessel function ``exp(-|x|) I1(x)``; differentiable.",
             _bessel.I1E)
log_ndtr = _unary("log_ndtr", "The log of the standard normal cdf, accurate far in the lower tail; differentiable.",
                  _bessel.LOG_NDTR)


def zeta(input, other, *, out=None):
    """The Hurwitz zeta function ``zeta(x, q) = sum_k (k + q)^-x``; differentiable in ``other`` (``q``) only, as
    torch's (a gradient for ``input`` raises)."""
    input, other = _binary_operands("zeta", input, other, ("input", "other"))
    return _finish(apply(_bessel.ZETA, input, other), out, "zeta")


def _polynomial(name, doc):
    def fn(input, n, *, out=None):
        input, n = _binary_operands(name, input, n, ("input", "n"))
        return _finish(apply(_poly.ROWS[name], input, n), out, name)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc + (" ``n`` is truncated to an integer; a negative (or nan) ``n`` gives 0. Not differentiable "
                        "(as torch's).")
    return fn


chebyshev_polynomial_t = _polynomial("chebyshev_polynomial_t", "The Chebyshev polynomial of the first kind T_n(x).")
chebyshev_polynomial_u = _polynomial("chebyshev_polynomial_u", "The Chebyshev polynomial of the second kind U_n(x).")
chebyshev_polynomial_v = _polynomial("chebyshev_polynomial_v", "The Chebyshev polynomial of the third kind V_n(x).")
chebyshev_polynomial_w = _polynomial("chebyshev_polynomial_w", "The Chebyshev polynomial of the fourth kind W_n(x).")
shifted_chebyshev_polynomial_t = _polynomial("shifted_chebyshev_polynomial_t", "The shifted Chebyshev polynomial "
                                             "T*_n(x) = T_n(2x - 1).")
shifted_chebyshev_polynomial_u = _polynomial("shifted_chebyshev_polynomial_u", "The shifted Chebyshev polynomial "
                                             "U*_n(x) = U_n(2x - 1).")
shifted_chebyshev_polynomial_v = _polynomial("shifted_chebyshev_polynomial_v", "The shifted Chebyshev polynomial "
                                             "V*_n(x) = V_n(2x - 1).")
shifted_chebyshev_polynomial_w = _polynomial("shifted_chebyshev_polynomial_w", "The shifted Chebyshev polynomial "
                                             "W*_n(x) = W_n(2x - 1).")
hermite_polynomial_h = _polynomial("hermite_polynomial_h", "The physicists' Hermite polynomial H_n(x).")
hermite_polynomial_he = _polynomial("hermite_polynomial_he", "The probabilists' Hermite polynomial He_n(x).")
laguerre_polynomial_l = _polynomial("laguerre_polynomial_l", "The Laguerre polynomial L_n(x).")
legendre_polynomial_p = _polynomial("legendre_polynomial_p", "The Legendre polynomial P_n(x).")
