"""C's ``fmod`` (exact: ``x - n*y`` for the integer ``n = trunc(x / y)``) as straight-line LLVM IR.

LLVM's ``frem`` lowers to one libm ``fmodf`` call per lane, which keeps a loop scalar (NumPy's float32 fmod takes
17 ns an element; torch's vectorized Sleef fmodf about 1.2). float32 operands are computed here in double, where
each step is exact:

- with ``a = |x|``, ``b = |y|`` (float32 values), ``r - q*b`` for an integer ``q`` within 1 of ``r / b`` is below
  ``2b`` and a multiple of the float32 unit of ``b`` (or of ``a``, when that is at most twice finer and ``q`` is
  not 0): under 27 significant bits, so one ``fma`` gives it exactly;
- ``q = trunc(r * (1/b))`` is within 1 of ``r / b`` while ``r / b < 2**51`` (the product's relative error is about
  ``2**-52``);
- ``a / b`` reaches ``2**277`` (huge over subnormal), so ``a`` is first scaled by ``2**-250`` (exact in double) and
  reduced modulo ``b`` in `STEPS` levels, the remainder scaled up by ``2**50`` between levels: reducing ``a *
  2**-50j`` modulo ``b`` is reducing ``a`` modulo ``b * 2**50j``, a multiple of ``b``. No lane branches: a level
  where ``r < b`` has ``q = 0`` and changes nothing (4 instructions a level).

The result, in ``[0, b)`` after two corrections, takes ``x``'s sign (zeros too), as C's: ``fmod(-4, 2)`` is
``-0.0``. ``y == 0``, an infinite ``x`` or a nan give nan; an infinite ``y`` gives ``x``. torch's vectorized CPU
kernel (Sleef) agrees bit for bit wherever ``|x / y| < 2**128``; beyond, where ``x / y`` overflows float32, it gives
nan (its scalar tail loop, C's fmod, agrees with this). float64 operands keep ``frem`` (libm's exact ``fmod``): the
same levels would need quotients wider than a double.

>>> from .codeblock import LLVMBuilder
>>> b = LLVMBuilder()
>>> out = fmod(b, "%x", "%y", "float")
>>> "call double @llvm.trunc.f64" in str(b) and "frem" not in str(b)
True
"""
from __future__ import annotations

from .llvm_float import Float

__all__ = ["fmod", "STEPS"]

# Levels of reduction: the first takes a * 2**-250 / b < 2**(128 + 149 - 250) = 2**27, every later one a quotient
# below 2 * 2**_WINDOW, and the last runs at scale 1.
STEPS = 6
_WINDOW = 50


def fmod(b, x, y, ty):
    """``fmod(x, y)`` of LLVM type ``ty`` (``float``: exact and vectorizable; ``double``: ``frem``)."""
    if ty == "double":
        return b.emit(f"frem double {x}, {y}")
    d = Float(b, "double")
    xd, yd = b.emit(f"fpext float {x} to double"), b.emit(f"fpext float {y} to double")
    a, bb = d.call("fabs", xd), d.call("fabs", yd)
    recip = d.div(d.c(1), bb)
    r = d.mul(a, d.c(2.0 ** -(_WINDOW * (STEPS - 1))))
    for level in range(STEPS):
        if level:
            r = d.mul(r, d.c(2.0 ** _WINDOW))
        q = d.call("trunc", d.mul(r, recip))
        r = d.call("fma", d.neg(q), bb, r)  # in (-2b, 2b)
    r = d.select(d.cmp("olt", r, d.c(0)), d.add(r, bb), r)
    r = d.select(d.cmp("olt", r, d.c(0)), d.add(r, bb), r)
    r = d.select(d.cmp("oge", r, bb), d.sub(r, bb), r)
    r = d.call("copysign", r, xd)
    valid = b.emit(f"and i1 {d.cmp('olt', a, d.c(float('inf')))}, {d.cmp('one', bb, d.c(0))}")
    r = d.select(d.cmp("oeq", bb, d.c(float("inf"))), xd, r)
    r = d.select(valid, r, d.c(float("nan")))
    return b.emit(f"fptrunc double {r} to float")
