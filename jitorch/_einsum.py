"""``einsum``: the equation normalized (the sublist form, ``...``, an implicit output, size-1 broadcasting) into
the explicit, ellipsis-free form the ``einsum`` row of ``ops/linalg.py`` takes, with PyTorch's errors.

Split from ``_linalg.py`` (the other matrix products), which re-exports it.

>>> import jitorch
>>> a, b = jitorch.ones(2, 3), jitorch.ones(3, 4)
>>> jitorch.einsum("ij,jk", a, b).shape, jitorch.einsum(a, [0, 1], b, [1, 2], [0, 2]).sum().item()
(jitorch.Size([2, 4]), 24.0)
>>> jitorch.einsum("...j,j->...", jitorch.ones(5, 2, 3), jitorch.ones(3)).shape
jitorch.Size([5, 2])
"""
from __future__ import annotations

import string
from collections import Counter

from ._dispatch import apply
from .ops import linalg as L
# _linalg imports this module at its end, once this is defined.
from ._linalg import _check_tensors


def einsum(*args):
    """Einstein summation: ``einsum("ij,jk->ik", a, b)``, ``einsum("ij,jk", [a, b])`` or the sublist form
    ``einsum(a, [0, 1], b, [1, 2], [0, 2])``. Supports ``...``, implicit output and size-1 broadcasting."""
    if not args:
        raise RuntimeError("einsum(): must specify the equation string and at least one operand, or at least one "
                           "operand and its subscripts list")
    if isinstance(args[0], str):
        operands = args[1:]
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = operands[0]
        return _einsum(args[0].replace(" ", ""), list(operands))
    return _einsum(*_sublist_equation(args))


def _sublist_equation(args):
    def letters(sub):
        out = ""
        for s in sub:
            if s is Ellipsis:
                out += "..."
            elif isinstance(s, int) and 0 <= s < 52:
                out += string.ascii_letters[s]
            else:
                raise RuntimeError(f"einsum(): expected subscript to be within the range [0, 52), but got {s}")
        return out

    explicit = len(args) % 2 == 1  # a trailing sublist after the last operand is the output
    body = args[:-1] if explicit else args
    operands, terms = list(body[0::2]), [letters(s) for s in body[1::2]]
    if explicit:
        output = letters(args[-1])
    else:  # implicit output: labels used once, ordered by their integer value (not by letter)
        counts = Counter("".join(terms).replace(".", ""))
        once = sorted((string.ascii_letters.index(c) for c, k in counts.items() if k == 1))
        output = ("..." if any("..." in t for t in terms) else "") + "".join(string.ascii_letters[i] for i in once)
    return ",".join(terms) + "->" + output, operands


def _einsum(equation, operands):
    _check_tensors("einsum", *operands)
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        more = "more" if len(operands) > len(terms) else "fewer"
        raise RuntimeError(f"einsum(): {more} operands were provided than specified in the equation "
                           f"({len(operands)} operands for {len(terms)} terms)")
    for c in equation:
        if not (c in string.ascii_letters or c in ",.->"):
            raise RuntimeError("einsum(): invalid subscript given in the equation string, subscripts must be in "
                               f"[a-zA-Z], got {c!r}")
    ellipsis_dims = []
    for i, (t, op) in enumerate(zip(terms, operands)):
        named = len(t.replace("...", ""))
        if "..." in t:
            if t.count("...") > 1 or t.replace("...", "").count("."):
                raise RuntimeError(f"einsum(): found more than one '...' (or a stray '.') in term {i}: {t!r}")
            if named > op._data.ndim:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation ({named}) is more than the "
                                   f"number of dimensions ({op._data.ndim}) for operand {i}")
            ellipsis_dims.append(op._data.ndim - named)
        else:
            if named != op._data.ndim:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation ({named}) does not match the "
                                   f"number of dimensions ({op._data.ndim}) for operand {i} and no ellipsis was given")
            ellipsis_dims.append(0)
    # Ellipsis dims become fresh letters, right-aligned across operands so they broadcast like NumPy's.
    widest = max(ellipsis_dims, default=0)
    fresh = "".join(c for c in string.ascii_letters if c not in equation)[:widest]
    terms = [t.replace("...", fresh[widest - n:]) for t, n in zip(terms, ellipsis_dims)]
    if arrow:
        output = rhs.replace("...", fresh)
        for c in set(output):
            if output.count(c) > 1:
                raise RuntimeError(f"einsum(): output subscript {c} appears more than once in the output")
            if not any(c in t for t in terms):
                raise RuntimeError(f"einsum(): output subscript {c} does not appear in the equation for any input "
                                   "operand")
    else:
        counts = Counter("".join(terms))
        output = fresh + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in fresh))
    sizes = _label_sizes(terms, operands)
    expanded = []
    for t, op in zip(terms, operands):
        shape = tuple(sizes[c] for c in t)
        expanded.append(op if shape == op._data.shape else op.expand(shape))
    return apply(L.EINSUM, *expanded, equation=",".join(terms) + "->" + output)


def _label_sizes(terms, operands):
    sizes = {}
    for i, (t, op) in enumerate(zip(terms, operands)):
        local = {}
        for c, n in zip(t, op._data.shape):
            if local.get(c, n) != n:
                raise RuntimeError(f"einsum(): subscript {c} is repeated for operand {i} but the sizes don't match, "
                                   f"{local[c]} != {n}")
            local[c] = n
        for c, n in local.items():
            seen = sizes.get(c, 1)
            if n != 1 and seen != 1 and n != seen:
                raise RuntimeError(f"einsum(): subscript {c} has size {n} for operand {i} which does not broadcast "
                                   f"with previously seen size {seen}")
            sizes[c] = n if n != 1 else seen
    return sizes
