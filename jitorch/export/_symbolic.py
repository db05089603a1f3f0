"""The integers of an exported graph as expressions of its symbolic sizes.

Dynamic dimensions are exported without symbolic tracing: the module is traced at its example sizes and at probe
sizes next to them (`_compile.shape_fit`: a `Fit` of every integer of the graph as a polynomial of the sizes). The
exported graph then computes each integer that changes with a size from the inputs: ``sym_size_int(x, 0)`` reads
the size (torch's ``aten.sym_size.int``), ``*``, ``+`` and ``//`` nodes combine them, and the ops take those nodes
where the trace had a number (``view(x, shape=(sym_mul, 16))``). One graph runs every size in range.

>>> p = poly_add(poly_scale(poly_var(0, 1), 5), poly_const(1, 1))
>>> poly_text(p, ["s0"]), poly_eval(p, [3])
('5*s0 + 1', 16)
"""
from __future__ import annotations

import math
import operator
from fractions import Fraction

import numpy as np

from ..fx.node import Node
from .._compile.shape_fit import _is_int, _map, _node_parts

__all__ = ["sym_size_int", "Symbolizer", "argument_ints", "remap", "poly_of", "poly_const", "poly_var", "poly_add",
           "poly_mul", "poly_scale", "poly_eval", "poly_text", "poly_roots_1d"]


def sym_size_int(t, dim):
    """torch's ``aten.sym_size.int``: the size of ``t``'s dimension ``dim`` as a Python int.

    >>> import jitorch
    >>> sym_size_int(jitorch.zeros(3, 4), 1)
    4
    """
    return int(t._data.shape[dim])


# -- polynomials: {exponents (one per symbol): Fraction} --------------------------------------------------------------
def poly_const(c, n):
    return {(0,) * n: Fraction(c)} if c else {}


def poly_var(j, n, shift=0):
    """``s_j - shift``."""
    exps = tuple(int(i == j) for i in range(n))
    return poly_add({exps: Fraction(1)}, poly_const(-shift, n))


def poly_add(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
        if not out[k]:
            del out[k]
    return out


def poly_scale(a, c):
    return {k: v * c for k, v in a.items()} if c else {}


def poly_mul(a, b):
    out = {}
    for ka, va in a.items():
        for kb, vb in b.items():
            out = poly_add(out, {tuple(x + y for x, y in zip(ka, kb)): va * vb})
    return out


def poly_eval(p, sizes):
    """``p`` at ``sizes``: an int, or a Fraction where a coefficient makes it one (a comparison with ``3.5``)."""
    total = sum(v * math.prod(s ** e for s, e in zip(sizes, k)) for k, v in p.items())
    return int(total) if Fraction(total).denominator == 1 else total


def poly_of(fit, i):
    """Integer ``i`` of ``fit``'s signatures as a polynomial of the absolute sizes (binomial basis expanded)."""
    n, out = fit.n, {}
    for term, c in zip(fit.terms, fit.coef[:, i].tolist()):
        if not c:
            continue
        p = poly_const(c, n)
        for j, k in enumerate(term):
            d = poly_var(j, n, int(fit.base[j]))
            if k >= 1:
                p = poly_mul(p, d)
            if k == 2:
                p = poly_scale(poly_mul(p, poly_add(d, poly_const(-1, n))), Fraction(1, 2))
        out = poly_add(out, p)
    return out


def _terms(p):
    """Non-constant monomials, highest degree first, then the constant."""
    return sorted(((k, v) for k, v in p.items() if any(k)), key=lambda kv: (-sum(kv[0]), kv[0]))


def poly_text(p, names):
    """``5*s0 + 1``, ``s0**2``, ``(s0**2 + s0)//2``: a size as torch prints it."""
    den = math.lcm(*(v.denominator for v in p.values())) if p else 1
    parts = []
    for k, v in _terms(p):
        mono = "*".join(names[j] + (f"**{e}" if e > 1 else "") for j, e in enumerate(k) if e)
        c = v * den
        parts.append(mono if c == 1 else f"-{mono}" if c == -1 else f"{c}*{mono}")
    const = p.get((0,) * len(names), 0) * den
    if const or not parts:
        parts.append(str(const))
    text = " + ".join(parts).replace("+ -", "- ")
    return text if den == 1 else f"({text})//{den}"


def poly_roots_1d(p, j, at):
    """Real roots of ``p`` along symbol ``j`` with the others at ``at`` (degree <= 2)."""
    coef = [Fraction(0)] * 3
    for k, v in p.items():
        rest = math.prod(Fraction(at[i]) ** e for i, e in enumerate(k) if i != j)
        coef[k[j]] += v * rest
    c, b, a = (float(x) for x in coef)
    if a == 0:
        return [-c / b] if b else []
    disc = b * b - 4 * a * c
    if disc < 0:
        return []
    return [(-b - math.sqrt(disc)) / (2 * a), (-b + math.sqrt(disc)) / (2 * a)]


class _Int:
    """An integer leaf of a node, numbered in the signature's order."""

    __slots__ = ("index", "value")

    def __init__(self, index, value):
        self.index, self.value = index, value


class Symbolizer:
    """Rebuilds a template graph's nodes into ``graph`` with each size-dependent integer computed from the inputs.

    ``fit`` is None for a static export (integers stay numbers; sizes read while tracing become plain ints).
    `mark` every node first, then `resolve` their arguments while the new graph is built.
    ``sources[k]`` is the ``(placeholder, dim)`` whose size symbol ``k`` is; ``names[k]`` its name (``s0``).
    """

    def __init__(self, graph, fit=None, sources=(), names=()):
        self.graph, self.fit, self.sources, self.names = graph, fit, list(sources), list(names)
        self._count, self._polys, self._nodes, self._syms = 0, {}, {}, {}

    def mark(self, gm, node, recipes):
        """``(args, kwargs, meta, const)`` of a template node with its integers numbered in the signature's order
        (call it on every node, in order, before resolving any); ``const`` is a ``get_attr``'s object, or
        ``("recipe", fn, args, kwargs)`` for a tensor a creation function made."""
        def leaf(x):
            if _is_int(x):
                self._count += 1
                return _Int(self._count - 1, x)
            return x
        return _map(_node_parts(gm, node, recipes), leaf)[3:]

    def shape(self, meta):
        """The symbolic shape of a marked ``meta``'s value (``(5, 's0')``), or None when nothing is symbolic."""
        val = meta.get("val")
        if self.fit is None or not (isinstance(val, tuple) and len(val) == 2 and isinstance(val[0], tuple)):
            return None
        return tuple(self.text(x) for x in val[0])

    def _poly(self, leaf):
        if self.fit is None:
            return None
        if leaf.index not in self._polys:
            p = poly_of(self.fit, leaf.index)
            self._polys[leaf.index] = p if any(any(k) for k in p) else None
        return self._polys[leaf.index]

    def varies(self, obj):
        found = []
        _map(obj, lambda x: found.append(x) if isinstance(x, _Int) and self._poly(x) is not None else x)
        return bool(found)

    def text(self, leaf):
        p = self._poly(leaf) if isinstance(leaf, _Int) else None
        if p is None:
            return int(leaf.value) if isinstance(leaf, _Int) else leaf
        return poly_text(p, self.names)

    def resolve(self, obj):
        """``obj`` with each integer leaf a plain int, or the node computing it where it depends on a size (and
        each float fitted as a ratio of sizes, ``_size_floats.SizeFloat``, the node dividing them)."""
        def leaf(x):
            if getattr(x, "ratio", None) is not None and isinstance(x, float):
                return self.ratio_node(x.ratio)
            if not isinstance(x, _Int):
                return x
            p = self._poly(x)
            if p is None:
                return type(x.value)(x.value) if isinstance(x.value, np.integer) else int(x.value)
            return self.node_for(p)
        return _map(obj, leaf)

    def ratio_node(self, ratio):
        """The node computing ``num / den`` (two polynomials of the symbols) as a Python float."""
        key = ("ratio",) + tuple(tuple(sorted(p.items())) for p in ratio)
        if key not in self._nodes:
            num, den = (self.node_for(p) if any(any(k) for k in p) else int(p.get((0,) * len(self.names), 0))
                        for p in ratio)
            node = self._op(operator.truediv, num, den, "sym_truediv")
            node.meta["sym"] = "/".join(f"({poly_text(p, self.names)})" for p in ratio)
            self._nodes[key] = node
        return self._nodes[key]

    def symbol(self, k):
        if k not in self._syms:
            ph, dim = self.sources[k]
            node = self.graph.call_function(sym_size_int, (ph, dim), name="sym_size_int")
            node.meta["sym"] = self.names[k]
            self._syms[k] = node
        return self._syms[k]

    def _op(self, fn, a, b, name):
        return self.graph.call_function(fn, (a, b), name=name)

    def node_for(self, p):
        """The node computing the polynomial ``p`` of the symbols; every polynomial (and each of its terms) is
        computed once per graph."""
        key = tuple(sorted(p.items()))
        if key in self._nodes:
            return self._nodes[key]
        n = len(self.names)
        den = math.lcm(*(v.denominator for v in p.values()))
        terms = _terms(p)
        const = int(p.get((0,) * n, 0) * den)
        if den == 1 and len(terms) == 1 and not const:
            (k, v), = terms
            if v != 1:
                node = self._op(operator.mul, self.node_for({k: Fraction(1)}), int(v), "sym_mul")
            else:
                j = max(i for i, e in enumerate(k) if e)
                rest = tuple(e - (i == j) for i, e in enumerate(k))
                node = self.symbol(j) if not any(rest) else \
                    self._op(operator.mul, self.node_for({rest: Fraction(1)}), self.symbol(j), "sym_mul")
        else:
            node = None
            for k, v in terms:
                term = self.node_for({k: v * den})
                node = term if node is None else self._op(operator.add, node, term, "sym_add")
            if const:
                node = self._op(operator.add if const > 0 else operator.sub, node, abs(const), "sym_add")
            if den != 1:
                node = self._op(operator.floordiv, node, den, "sym_floordiv")
        node.meta.setdefault("sym", poly_text(p, self.names))
        self._nodes[key] = node
        return node


def argument_ints(gm, recipes):
    """A mask over a trace's signature integers: True for those the graph computes with (node arguments, the sizes
    of creation recipes, the logged comparisons), False for metadata (traced shapes and strides: a size-1
    dimension's stride is arbitrary, which a fit must not hold against the sizes 0 and 1)."""
    mask = []
    for node in gm.graph.nodes:
        parts = _node_parts(gm, node, recipes)
        recipe = isinstance(parts[6], tuple) and parts[6][:1] == ("recipe",)
        for j, part in enumerate(parts):
            flag = j in (3, 4) or (j == 6 and recipe)
            _map(part, lambda x, flag=flag: mask.append(flag) if _is_int(x) else x)
    return np.asarray(mask, dtype=bool)


def remap(obj, env):
    """``obj`` with the template's nodes replaced by their counterparts ``env[node]``."""
    return _map(obj, lambda x: env[x] if isinstance(x, Node) and x in env else x)
