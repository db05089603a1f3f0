"""Dynamic dimensions of an export: probe traces, the fit of the graph's integers, and the range checks.

Each distinct `Dim` is a symbol. The module is traced at the grid ``g + {0, 1, 2}^n`` of sizes (``g``: the
example's sizes, at least 2, and at most the range's maximum - 3; inputs tiled from the examples' values) and
once more at ``g + 3`` to check;
`shape_fit.Fit` makes every integer of the graph a polynomial of the symbols. Sizes below ``g`` down to the range's
minimum (0 and 1 behave differently in many programs) are traced and checked against the fit too. The comparisons
the code made on sizes (``if x.shape[0] > 3``) must come out the same over the whole range: they are evaluated at
the range's ends and around every size where one could change (the roots of its polynomials); a dimension the
program specializes raises torch's "Constraints violated" `UserError` with the range that would work
(``Dim.AUTO`` dimensions quietly stay static instead).

>>> import jitorch
>>> from jitorch.export import Dim, export
>>> ep = export(jitorch.nn.Linear(4, 2), (jitorch.randn(5, 4),), dynamic_shapes=({0: Dim("b", min=1, max=64)},))
>>> ep.range_constraints
{s0: VR[1, 64]}
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from .._compile.dynamic_shapes import tiled_inputs
from .._compile.shape_fit import _INT, DEGREE, Fit, Signature
from .._compile.sym_sizes import COMPARE
from ._errors import UserError, UserErrorType
from ._size_floats import fit_ratio, float_values, neutralize, ratio_value, varying
from ._symbolic import argument_ints, poly_add, poly_const, poly_eval, poly_of, poly_roots_1d, poly_scale
from .dynamic_shapes import Dim, int_oo

__all__ = ["SymInfo", "fit_dynamic", "MAX_SYMBOLS"]

MAX_SYMBOLS = 3  # the probes grow as 3^n
_FAR = 1 << 20  # where an unbounded range is checked, beyond every size where a comparison changes


class SymInfo:
    """One symbol: its ``name`` (``s0``), the `Dim` or hint, the ``(flat index, dim)`` it sizes, its range."""

    def __init__(self, name, dim, uses, lo, hi, example):
        self.name, self.dim, self.uses, self.lo, self.hi, self.example = name, dim, uses, lo, hi, example
        self.wheres = []  # ``x.size()[0]`` per use, for messages

    @property
    def label(self):
        return self.dim.__name__ if isinstance(self.dim, Dim) else self.name

    @property
    def auto(self):
        return self.dim == Dim.AUTO


class _Violation(Exception):
    def __init__(self, k, msg):
        super().__init__(msg)
        self.k = k


def _symbols(dims, flat, names):
    """`SymInfo` per distinct Dim (each hint its own), checked against the examples' sizes."""
    out, by_dim = [], {}
    for i, d, dim in dims:
        n = flat[i]._data.shape[d]
        where = f"{names[i]}.size()[{d}]"
        k = by_dim.get(id(dim)) if isinstance(dim, Dim) else None
        if k is None:
            lo, hi = (dim.min, dim.max) if isinstance(dim, Dim) else (2, int_oo)
            if not lo <= n <= hi:
                raise UserError(UserErrorType.CONSTRAINT_VIOLATION,
                                f"Expected input {where} = {n} to be in the range of {dim!r} [{lo}, {hi}]: the "
                                "example inputs must lie in the ranges of their dynamic dimensions")
            k = len(out)
            out.append(SymInfo(f"s{k}", dim, [], lo, hi, n))
            if isinstance(dim, Dim):
                by_dim[id(dim)] = k
        sym = out[k]
        if n != sym.example:
            raise UserError(UserErrorType.CONSTRAINT_VIOLATION,
                            f"{where} = {n} and {sym.wheres[0]} = {sym.example} are both "
                            f"{dim!r}, so the example inputs must give them the same size")
        sym.uses.append((i, d))
        sym.wheres.append(where)
    if len(out) > MAX_SYMBOLS:
        raise UserError(UserErrorType.UNSUPPORTED_FEATURE,
                        f"{len(out)} distinct dynamic dimensions: jitorch.export supports at most {MAX_SYMBOLS} "
                        "(each is probed by tracing); give dimensions that are always equal the same Dim")
    return out


def _resized(flat, syms, sizes):
    """The example inputs with each symbol's dimensions tiled to ``sizes``."""
    resize = {}
    for sym, n in zip(syms, sizes):
        for i, d in sym.uses:
            if flat[i]._data.shape[d] != n:
                resize.setdefault(i, []).append((d, n))
    return tiled_inputs(flat, resize)


class _Probes:
    """Traces at sizes (cached; an error is kept as the result) and their signatures, where the floats that change
    with the sizes (``positions``, set once the grid is traced) are `SizeFloat`."""

    def __init__(self, trace, flat, syms):
        self.trace, self.flat, self.syms, self.cache, self.positions = trace, flat, syms, {}, set()

    def traced(self, sizes, allow_error=True):
        key = tuple(sizes)
        if key not in self.cache:
            try:
                self.cache[key] = self.trace(_resized(self.flat, self.syms, key))
            except Exception as err:  # noqa: BLE001 - a size the module rejects is reported with the symbol
                if not allow_error:
                    raise
                self.cache[key] = err
        return self.cache[key]

    def __call__(self, sizes, allow_error=True):
        """``(Traced, Signature)`` at ``sizes``, or the exception tracing raised there."""
        got = self.traced(sizes, allow_error)
        if isinstance(got, Exception):
            return got
        if not hasattr(got, "signature"):
            got.size_floats = neutralize(got.gm, self.positions)
            got.signature = Signature(got.gm, got.recording)
        return got, got.signature


def fit_dynamic(trace, flat, dims, names):
    """``(template Traced, Fit or None, [SymInfo])`` for ``dims`` (``[(flat index, dim, Dim or hint)]``);
    ``trace(flat)`` returns a `Traced`. The template is the trace at the grid's base sizes."""
    syms = _symbols(dims, flat, names)
    while True:
        if not syms:
            return trace(flat), None, []
        try:
            return _fit(syms, _Probes(trace, flat, syms))
        except _Violation as v:
            if not syms[v.k].auto:
                raise UserError(UserErrorType.CONSTRAINT_VIOLATION, str(v)) from None
            syms = [s for j, s in enumerate(syms) if j != v.k]  # Dim.AUTO: the dimension stays static
            for j, s in enumerate(syms):
                s.name = f"s{j}"


def _base(sym):
    """Where a symbol's grid starts: at the example's size, but at least 2 (sizes 0 and 1 are checked below it),
    and low enough that the grid and its check point (``+ 3``) stay in the range."""
    lo, hi = max(2, sym.lo), sym.hi
    if hi < lo + DEGREE + 1:
        raise UserError(UserErrorType.CONSTRAINT_VIOLATION,
                        f"The range [{sym.lo}, {sym.hi}] of {sym.label} is too narrow for jitorch.export to make it "
                        f"dynamic (the sizes {lo}..{lo + DEGREE + 1} must be in it): widen it or keep the dimension "
                        "static")
    return max(lo, min(sym.example, hi - DEGREE - 1))


def _fit(syms, probe):
    base = [_base(s) for s in syms]
    offsets = list(itertools.product(range(DEGREE + 1), repeat=len(syms)))
    template = probe.traced(base, allow_error=False)
    traces = {o: probe.traced([b + d for b, d in zip(base, o)]) for o in offsets}
    values = float_values(template.gm)
    probe.positions = varying(values, [float_values(t.gm) for t in traces.values() if not isinstance(t, Exception)])
    template, base_sig = probe(base)
    grid = {}
    for offset in offsets:
        sizes = [b + o for b, o in zip(base, offset)]
        k = next((j for j, o in enumerate(offset) if o), 0)
        got = probe(sizes)
        why = _failed(got, template) or base_sig.mismatch(got[1])
        if why is not None:
            at = ", ".join(f"{s.label} = {n}" for s, n in zip(syms, sizes))
            raise _Violation(k, _violated(syms, k, f"at {at}: {why}"))
        grid[offset] = got[1]
    fit = Fit(base, grid)
    _check_comparisons(syms, fit, base)  # before the checks below: a branch that flips there gets a suggested range
    for j, sf in enumerate(template.size_floats):
        sf.ratio = fit_ratio({o: float(traces[o].size_floats[j]) for o in offsets}, base, len(syms))
        if sf.ratio is None:
            raise _Violation(0, _violated(syms, 0, f"the float {float(sf)} of the graph changes with the sizes, and "
                                                   "is no ratio of polynomials of them"))
    for k, sym in enumerate(syms):
        at = list(base)
        at[k] += DEGREE + 1
        why = _mismatch(fit, at, probe(at), template)
        if why is not None:
            raise _Violation(k, _violated(syms, k, why))
        for n in range(base[k] - 1, sym.lo - 1, -1):  # 0 and 1 often trace differently
            at = list(base)
            at[k] = n
            why = _mismatch(fit, at, probe(at), template)
            if why is not None:
                if isinstance(sym.dim, Dim) and sym.dim.min == 0 and n < 2:
                    sym.lo = n + 1  # Dim's default minimum: the range starts where the program agrees
                    break
                raise _Violation(k, _violated(syms, k, f"at {sym.label} = {n}: {why}", lo=n + 1))
    return template, fit, syms


def _failed(got, template):
    if isinstance(got, Exception):
        return f"tracing fails: {type(got).__name__}: {got}"
    if got[0].extra != template.extra:
        return "the outputs or the buffers written differ"
    return None


def _mismatch(fit, sizes, got, template):
    """Why the trace ``got`` at ``sizes`` is not what ``fit`` predicts there (integers of metadata aside)."""
    why = _failed(got, template) or fit.sig.mismatch(got[1])
    if why is not None:
        return why
    sig = got[1]
    mask = argument_ints(template.gm, template.recording.recipes)
    mask = np.concatenate([mask, np.ones(len(sig.ints) - len(mask), bool)])
    for mine, theirs in zip(template.size_floats, got[0].size_floats):
        if ratio_value(mine.ratio, sizes) != float(theirs):
            return f"a float of the graph is {float(theirs)} there, not the {ratio_value(mine.ratio, sizes)} predicted"
    predicted = fit.at(sizes)
    bad = np.flatnonzero((predicted != sig.ints) & mask)
    if bad.size:
        k = int(bad[0])
        return (f"an integer of the graph is {int(sig.ints[k])} there, not the {int(predicted[k])} the other sizes "
                "predict")
    return None


def _violated(syms, k, why, lo=None, hi=None):
    """torch's "Constraints violated" text; with ``lo``/``hi``, the narrower range that would work."""
    sym = syms[k]
    where = ", ".join(sym.wheres)
    text = (f"Constraints violated ({sym.label})! Not all values of {sym.label} ({where}) in the specified range "
            f"{sym.lo} <= {sym.label} <= {sym.hi} give the same program: {why}")
    if isinstance(sym.dim, Dim) and (lo is not None or hi is not None):
        lo, hi = sym.lo if lo is None else lo, sym.hi if hi is None else hi
        if lo <= sym.example <= hi:
            bound = "" if hi == int_oo else f", max={hi}"
            text += f"\nSuggested fixes:\n  {sym.label} = Dim('{sym.label}', min={lo}{bound})"
    return text + "\n(or keep the dimension static: leave it out of dynamic_shapes)"


def _log_polys(fit):
    """Per comparison of the log: ``(kind, lhs polynomial, rhs polynomial, result)``."""
    sig, n = fit.sig, fit.n
    index = sig.log_ints
    out = []
    for name, a, b, result in sig.log:
        sides = []
        for side in (a, b):
            if side is _INT:
                sides.append(poly_of(fit, index))
                index += 1
            else:
                sides.append(poly_const(side, n) if isinstance(side, (int, float)) else None)
        out.append((name, sides[0], sides[1], result))
    return out


def _check_comparisons(syms, fit, base):
    """Every comparison the code made on sizes holds over each symbol's range (others at their base sizes)."""
    comparisons = [c for c in _log_polys(fit) if c[0] in COMPARE and c[0] != "read" and None not in c[1:3]]
    for k, sym in enumerate(syms):
        hi = sym.hi if sym.hi != int_oo else None
        points = {sym.lo, base[k]}
        for _, lhs, rhs, _ in comparisons:
            for r in poly_roots_1d(poly_add(lhs, poly_scale(rhs, -1)), k, base):
                if math.isfinite(r) and abs(r) < _FAR:
                    points.update(range(math.floor(r) - 1, math.ceil(r) + 2))
        far = max(points) + 2
        points.add(hi if hi is not None else max(far, _FAR))
        points = sorted(p for p in points if sym.lo <= p <= (hi if hi is not None else math.inf))

        def ok(n):
            at = list(base)
            at[k] = n
            return all(COMPARE[name](poly_eval(lhs, at), poly_eval(rhs, at)) == result
                       for name, lhs, rhs, result in comparisons)
        bad = [p for p in points if not ok(p)]
        if bad:
            lo = max([p + 1 for p in bad if p < base[k]], default=sym.lo)
            top = min([p - 1 for p in bad if p > base[k]], default=sym.hi)
            raise _Violation(k, _violated(syms, k, f"the code compares sizes, and the branch the example took does "
                                                   f"not hold at {sym.label} = {bad[0]}", lo=lo, hi=top))
