"""Flat index -> per-buffer element offsets: one description, rendered as CUDA C and evaluated in Python.

A CUDA thread gets a flat (C-order) position in an iteration space and needs the element offset of every buffer
there. `IndexPlan` holds that computation as a short list of steps; `IndexPlan.c_lines` prints them as C and
`IndexPlan.evaluate` runs the very same steps with Python integers, checking that every intermediate fits the C
index type. The tests compare `evaluate` with NumPy's own strides, so the generated C inherits that check.

Why the arithmetic cannot wrap in the 32-bit (``unsigned int``) form: the offset ``off + sum(i_d * s_d)`` is built
left to right, and every partial sum is itself the offset of a valid point (the point with the not-yet-added
coordinates set to 0), so it lies in ``[0, max_offset]``; a negative stride is written as a subtraction of
``i_d * |s_d|`` so no negative constant ever meets an unsigned operand.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

INDEX32_LIMIT = 2**31  # the grid-stride loop adds blockDim * gridDim <= 2**31 to an index below n (cuda_templates)


def index64_needed(shape, strides, offsets):
    """Whether a ``shape`` walk over buffers with ``strides``/``offsets`` needs 64-bit indices.

    >>> index64_needed((1000,), [(1,)], [0]), index64_needed((2**16, 2**15), [(2**15, 1)], [0])
    (False, True)
    >>> index64_needed((10,), [(-2**28,)], [9 * 2**28])  # offsets run from 0 up to 9 * 2**28 > 2**31
    True
    """
    if math.prod(shape) >= INDEX32_LIMIT:
        return True
    if 0 in shape:
        return False
    for st, off in zip(strides, offsets):
        hi = off + sum(max(0, s * (n - 1)) for s, n in zip(st, shape))
        lo = off + sum(min(0, s * (n - 1)) for s, n in zip(st, shape))
        if lo < 0 or hi >= INDEX32_LIMIT:
            return True
    return False


def c_int(value, index64):
    """An index-typed C literal (``5u`` or ``5LL``).

    >>> c_int(5, False), c_int(5, True)
    ('5u', '5LL')
    """
    return f"{value}LL" if index64 else f"{value}u"


@dataclass(frozen=True)
class IndexPlan:
    """Offsets of ``buffers`` (indices into ``strides``/``offsets``) at flat position ``flat`` of ``shape``.

    ``prefix`` names the C variables: coordinates ``{prefix}i{d}``, quotients ``{prefix}q{d}``, offsets
    ``{prefix}o{b}``. Buffers with no nonzero stride still get a (constant) offset variable. An entry of
    ``offsets`` may be the name of a C variable instead of a number: a reduction's inner loop starts from the
    offset of its output point, so every partial sum is again a valid offset (the no-wrap argument above).
    """

    shape: tuple
    strides: tuple
    offsets: tuple
    buffers: tuple
    index64: bool
    prefix: str = ""

    def steps(self, flat):
        """The computation as ``(kind, dst, operands)``: ``div`` (dst = a / k), ``rem`` (dst = a - q * k, q = a / k),
        ``mod`` (dst = a % k, when no quotient is needed) or ``offset`` (dst = off, then +/- coordinate * |stride|
        terms in order); one ``offset`` step per buffer, in the order of ``buffers``.

        >>> plan = IndexPlan((3, 4), ((4, 1), (0, -1)), (0, 3), (0, 1), False)
        >>> for step in plan.steps("i"): print(step)
        ('div', 'q1', ('i', 4))
        ('rem', 'i1', ('i', 'q1', 4))
        ('offset', 'o0', (0, [('q1', 4), ('i1', 1)]))
        ('offset', 'o1', (3, [('i1', -1)]))
        """
        p, out, nd = self.prefix, [], len(self.shape)
        used = [any(self.strides[b][d] for b in self.buffers) for d in range(nd)]
        coord, rest = {}, flat
        for d in range(nd - 1, -1, -1):
            if not any(used[:d + 1]):
                break  # no buffer moves along dimensions 0..d: emitting their coordinates would leave dead code
            if d == 0:
                coord[0] = rest  # the caller keeps flat < prod(shape), so what is left is coordinate 0
                break
            if not any(used[:d]):
                coord[d] = f"{p}i{d}"
                out.append(("mod", coord[d], (rest, self.shape[d])))
                break
            q = f"{p}q{d}"
            out.append(("div", q, (rest, self.shape[d])))
            if used[d]:
                coord[d] = f"{p}i{d}"
                out.append(("rem", coord[d], (rest, q, self.shape[d])))
            rest = q
        for b in self.buffers:
            terms = [(coord[d], s) for d, s in enumerate(self.strides[b]) if s]
            out.append(("offset", f"{p}o{b}", (self.offsets[b], terms)))
        return out

    def c_lines(self, flat):
        """The steps as C declarations.

        >>> plan = IndexPlan((3, 4), ((4, 1), (0, -1)), (0, 3), (0, 1), False)
        >>> print("\\n".join(plan.c_lines("i")))
        const unsigned int q1 = i / 4u;
        const unsigned int i1 = i - q1 * 4u;
        const unsigned int o0 = q1 * 4u + i1;
        const unsigned int o1 = 3u - i1;
        """
        ty, lit = ("long long" if self.index64 else "unsigned int"), (lambda v: c_int(v, self.index64))
        lines = []
        for kind, dst, args in self.steps(flat):
            if kind == "div":
                rhs = f"{args[0]} / {lit(args[1])}"
            elif kind == "rem":
                rhs = f"{args[0]} - {args[1]} * {lit(args[2])}"
            elif kind == "mod":
                rhs = f"{args[0]} % {lit(args[1])}"
            else:
                rhs = lit(args[0]) if isinstance(args[0], int) else args[0]
                for var, s in args[1]:
                    term = var if abs(s) == 1 else f"{var} * {lit(abs(s))}"
                    rhs = term if rhs == lit(0) and s > 0 else f"{rhs} {'+' if s > 0 else '-'} {term}"
            lines.append(f"const {ty} {dst} = {rhs};")
        return lines

    def evaluate(self, flat, bases=None):
        """Run `steps` on integer ``flat`` (``bases`` gives the values of named offsets); returns ``{buffer: offset}``.

        Raises OverflowError when an intermediate would leave the C type (``[0, 2**31)`` in the 32-bit form):
        that check is where the tests hold the no-wrap argument above to account.

        >>> IndexPlan((3, 4), ((4, 1), (0, -1)), (0, 3), (0, 1), False).evaluate(6)
        {0: 6, 1: 1}
        """
        lo, hi = (-2**63, 2**63) if self.index64 else (0, INDEX32_LIMIT)

        def check(v):
            if not lo <= v < hi:
                raise OverflowError(f"index intermediate {v} outside [{lo}, {hi})")
            return v

        env = dict(bases or {}, __flat__=check(flat))
        val = lambda a: a if isinstance(a, int) else env[a]
        result, order = {}, iter(self.buffers)
        for kind, dst, args in self.steps("__flat__"):
            if kind == "div":
                env[dst] = check(val(args[0]) // args[1])
            elif kind == "rem":
                env[dst] = check(val(args[0]) - check(val(args[1]) * args[2]))
            elif kind == "mod":
                env[dst] = check(val(args[0]) % args[1])
            else:
                acc = check(val(args[0]))
                for var, s in args[1]:
                    acc = check(acc + (1 if s > 0 else -1) * check(val(var) * abs(s)))
                env[dst] = result[next(order)] = acc
        return result
