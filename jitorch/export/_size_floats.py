"""Floats of a traced graph that are computed from sizes (BatchNorm's unbiased factor ``n / (n - 1)``).

`shape_fit.Fit` fits integers; a float that changes with a dynamic size would make the probe traces differ. The
floats at the same place of every probe's graph are compared: where they differ, each trace gets a `SizeFloat`
there (equal to any other as structure, so the integers still fit), and the values over the probe grid are fitted
as a ratio of two polynomials of degree <= 1 in each size, with integer coefficients (exact rationals recovered from
the floats). The exported graph computes ``num / den`` from the input sizes: Python's correctly rounded division of
two ints gives the same float as the eager ``n / (n - 1)``. Checked at every other probe; a float that is no such
ratio (``1 / math.sqrt(n)``) leaves the dimension static.

>>> from ._symbolic import poly_text
>>> num, den = fit_ratio({(0,): 8 / 7, (1,): 9 / 8, (2,): 10 / 9}, [8], 1)   # n / (n - 1) at n = 8, 9, 10
>>> poly_text(num, ["s0"]), poly_text(den, ["s0"]), ratio_value((num, den), [72])
('s0', 's0 - 1', 1.0140845070422535)
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

from .._compile.shape_fit import _map
from ._symbolic import poly_eval

__all__ = ["SizeFloat", "float_values", "varying", "neutralize", "fit_ratio", "MAX_DENOMINATOR"]

MAX_DENOMINATOR = 10 ** 7  # exact rationals of the traced floats: sizes' ratios have small terms


class SizeFloat(float):
    """A float computed from sizes: equal to every other `SizeFloat` when traces are compared; ``ratio`` is set to
    ``(num, den)`` polynomials once fitted."""

    ratio = None

    def __eq__(self, other):
        return isinstance(other, SizeFloat)

    def __ne__(self, other):
        return not isinstance(other, SizeFloat)

    __hash__ = float.__hash__

    def __reduce__(self):
        return float, (float(self),)


def _walk(gm, leaf):
    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.args, node.kwargs = _map(node.args, leaf), _map(node.kwargs, leaf)


def float_values(gm):
    """The float arguments of ``gm``'s nodes, in order."""
    out = []

    def leaf(x):
        if isinstance(x, float):
            out.append(float(x))
        return x
    _walk(gm, leaf)
    return out


def varying(base, others):
    """Indices of the floats that differ between ``base`` and any of ``others`` (lists of `float_values`)."""
    found = set()
    for values in others:
        if len(values) == len(base):
            found.update(i for i, (a, b) in enumerate(zip(base, values)) if a != b and a == a)
    return found


def neutralize(gm, positions):
    """Make the floats at ``positions`` of ``gm`` `SizeFloat` (in place); returns them in order."""
    count, made = [0], []

    def leaf(x):
        if isinstance(x, float):
            count[0] += 1
            if count[0] - 1 in positions:
                x = SizeFloat(x)
                made.append(x)
        return x
    _walk(gm, leaf)
    return made


def _nullspace_vector(rows, n):
    """One nonzero solution of ``rows @ c = 0`` (Fractions), or None when there is none."""
    rows = [[Fraction(v) for v in r] for r in rows]
    pivots, r = [], 0
    for col in range(n):
        pivot = next((i for i in range(r, len(rows)) if rows[i][col] != 0), None)
        if pivot is None:
            continue
        rows[r], rows[pivot] = rows[pivot], rows[r]
        p = rows[r][col]
        rows[r] = [v / p for v in rows[r]]
        for i in range(len(rows)):
            if i != r and rows[i][col] != 0:
                f = rows[i][col]
                rows[i] = [a - f * b for a, b in zip(rows[i], rows[r])]
        pivots.append(col)
        r += 1
    free = [c for c in range(n) if c not in pivots]
    if not free:
        return None
    sol = [Fraction(0)] * n
    sol[free[0]] = Fraction(1)
    for i, col in enumerate(pivots):
        sol[col] = -rows[i][free[0]]
    return sol


def fit_ratio(values, base, n):
    """``(num, den)`` polynomials (multilinear in the ``n`` sizes, integer coefficients) with ``num / den`` the
    value at every grid offset of ``values`` (``{offset: float}`` at sizes ``base + offset``); None if none fits."""
    monomials = list(itertools.product((0, 1), repeat=n))
    rows = []
    for offset, value in values.items():
        f = Fraction(value).limit_denominator(MAX_DENOMINATOR)
        sizes = [b + o for b, o in zip(base, offset)]
        terms = [math.prod(s ** e for s, e in zip(sizes, m)) for m in monomials]
        rows.append(terms + [-f * t for t in terms])
    sol = _nullspace_vector(rows, 2 * len(monomials))
    if sol is None:
        return None
    scale = math.lcm(*(c.denominator for c in sol))
    ints = [int(c * scale) for c in sol]
    g = math.gcd(*ints) or 1
    num = {m: Fraction(c // g) for m, c in zip(monomials, ints[:len(monomials)]) if c}
    den = {m: Fraction(c // g) for m, c in zip(monomials, ints[len(monomials):]) if c}
    if not den or any(ratio_value((num, den), [b + o for b, o in zip(base, off)]) != v for off, v in values.items()):
        return None
    return num, den


def ratio_value(ratio, sizes):
    """The float ``num(sizes) / den(sizes)``, as Python divides two ints; None where the denominator is 0."""
    num, den = poly_eval(ratio[0], sizes), poly_eval(ratio[1], sizes)
    return None if den == 0 else num / den
