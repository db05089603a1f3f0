"""``erfinv`` to within about an ulp of torch's eager CPU values, as one generated kernel on CPU float32/float64 arrays.

torch's eager CPU kernel is not ATen's ``calc_erfinv`` (a rational guess and two Newton steps on ``erf(x) - y``, what
Inductor's C++ backend emits): it is MKL's ``vsErfInv``/``vdErfInv``, accurate to about an ulp up to +-1. The Newton
correction cancels near +-1 (its ``erf(x) - y`` loses every digit once ``erf'(x)`` is tiny: 126 float32 ulp from
torch at 1 - 2^-24, 10^11 float64 ulp at 1 - 2^-53; pytorch/pytorch#198133), so this is Giles' approximation
("Approximating the erfinv function", GPU Computing Gems 2, 2010, double-precision coefficients): polynomials in
``w = -log((1 - |y|)(1 + |y|))``, whose factors are exact or rounded once, so the tails keep their accuracy. float32
computes it in float64 and rounds once; no erf, no loop, so it runs as one kernel (`special_formula`), array-module
ops elsewhere (CuPy; half types through float32, as ATen's upcast). nan beyond +-1, +-inf at +-1, -0 at -0.
``nn.init.trunc_normal_`` draws through it.

>>> import numpy as np
>>> erfinv(np, np.array([0.0, 0.5, -0.9, 1.0, 1.5])).round(6).tolist()
[0.0, 0.476936, -1.163087, inf, nan]
"""
from __future__ import annotations

import math

import numpy as np

from .special_formula import evaluate

__all__ = ["erfinv", "erfinv_formula"]

# Giles' three polynomials (highest degree first): in w - 3.125 for w < 6.25, in sqrt(w) - 3.25 for w < 16, in
# sqrt(w) - 5 beyond.
_CENTRAL = (
    -3.6444120640178196996e-21, -1.685059138182016589e-19, 1.2858480715256400167e-18, 1.115787767802518096e-17,
    -1.333171662854620906e-16, 2.0972767875968561637e-17, 6.6376381343583238325e-15, -4.0545662729752068639e-14,
    -8.1519341976054721522e-14, 2.6335093153082322977e-12, -1.2975133253453532498e-11, -5.4154120542946279317e-11,
    1.051212273321532285e-09, -4.1126339803469836976e-09, -2.9070369957882005086e-08, 4.2347877827932403518e-07,
    -1.3654692000834678645e-06, -1.3882523362786468719e-05, 0.0001867342080340571352, -0.00074070253416626697512,
    -0.0060336708714301490533, 0.24015818242558961693, 1.6536545626831027356)
_MIDDLE = (
    2.2137376921775787049e-09, 9.0756561938885390979e-08, -2.7517406297064545428e-07, 1.8239629214389227755e-08,
    1.5027403968909827627e-06, -4.013867526981545969e-06, 2.9234449089955446044e-06, 1.2475304481671778723e-05,
    -4.7318229009055733981e-05, 6.8284851459573175448e-05, 2.4031110387097893999e-05, -0.0003550375203628474796,
    0.00095328937973738049703, -0.0016882755560235047313, 0.0024914420961078508066, -0.0037512085075692412107,
    0.005370914553590063617, 1.0052589676941592334, 3.0838856104922207635)
_TAIL = (
    -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09, -3.7894654401267369937e-09,
    7.6157012080783393804e-09, -1.4960026627149240478e-08, 2.9147953450901080826e-08, -6.7711997758452339498e-08,
    2.2900482228026654717e-07, -9.9298272942317002539e-07, 4.5260625972231537039e-06, -1.9681778105531670567e-05,
    7.5995277030017761139e-05, -0.00021503011930044477347, -0.00013871931833623122026, 1.0103004648645343977,
    4.8499064014085844221)


def _horner(t, coefficients):
    p = coefficients[0]
    for c in coefficients[1:]:
        p = p * t + c
    return p


def erfinv_formula(m, y, tail=True):
    """Giles' erfinv over ``y`` in math namespace ``m`` (`special_formula`); the three ranges as selects.
    ``tail=False`` leaves out the range w >= 16, which float32 inputs below 1 never reach (w <= 15.94)."""
    y_abs = m.abs(y)
    w = -m.log((1.0 - y_abs) * (1.0 + y_abs))  # nan beyond +-1 (a negative product), inf at +-1
    s = m.sqrt(w)
    beyond = _horner(s - 5.0, _TAIL) if tail else _horner(s - 3.25, _MIDDLE)
    p = m.where(w < 6.25, _horner(w - 3.125, _CENTRAL), m.where(w < 16.0, _horner(s - 3.25, _MIDDLE), beyond))
    return m.where(y_abs == 1.0, m.where(y < 0, -math.inf, math.inf), p * y)


def _float32_formula(m, y):
    return erfinv_formula(m, y, tail=False)


def erfinv(xp, a, native=True):
    """``erfinv`` of array ``a`` (half types through float32, float32 through float64, each rounded once);
    ``native=False`` runs the array-module ops on NumPy too (what CuPy arrays run)."""
    wide = a.astype(np.float32) if a.dtype.itemsize < 4 else a
    name, formula = ("erfinv_f32", _float32_formula) if wide.dtype == np.float32 else ("erfinv", erfinv_formula)
    return evaluate(name, formula, xp, wide, native=native, wide=True).astype(a.dtype, copy=False)
