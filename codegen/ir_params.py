"""Size-generic kernels: a kernel's sizes, strides and offsets as run-time integers, so one compile serves every size.

`parametrize` collapses a kernel and replaces each integer that is not structural by a `Sym`, an ``i64`` argument
of the emitted function. Structural integers stay literal, because code generation branches on them: sizes 0 and
1, strides 0 (broadcast), 1 and -1 (contiguous, the vectorized direction), an innermost stride of +-2
(`INNER_LITERAL_STRIDES`), offset 0. Constants of the expression
become arguments too (a mean's ``1 / N`` changes with the size), except `LITERAL_CONSTANTS`, which LLVM folds
(``x * 1``, ``x + 0``, a halving), and a power's exponent. So two kernels that differ only in their sizes, their
other strides and offsets or their constants give the same template, the same LLVM text and one compiled function:
a training step at a new sequence length or batch size finds every kernel compiled.

>>> from jitorch.codegen.ir import Buffer, Kernel, Store, load, op
>>> def scaled(rows):
...     return Kernel((rows, 96), (Buffer("f32", (96, 1)), Buffer("f32", (0, 1), 8)),
...                   (Store(0, op("mul", load(0, "f32"), load(1, "f32"))),))
>>> a, b = parametrize(scaled(16)), parametrize(scaled(24))
>>> str(a[0]) == str(b[0]), a[1], b[1]
(True, (16, 96, 96, 8), (24, 96, 96, 8))
>>> print(a[0])
kernel ($q0, $q1) reduce=0
  buf0 f32 strides=($q2, 1) offset=0
  buf1 f32 strides=(0, 1) offset=$q3
  %0 = load buf0
  %1 = load buf1
  %2 = mul %0 %1
  store buf0 %2
"""
from __future__ import annotations

import numpy as np

from .codeblock import LLVM_TYPES
from .ir import Buffer, Expr, Kernel, Store, collapse

__all__ = ["Sym", "parametrize", "arguments", "outer_size", "is_template", "literal_size", "unit_stride", "bits",
           "LITERAL_CONSTANTS", "INNER_LITERAL_STRIDES"]

LITERAL_CONSTANTS = (0, 1, -1, 2, -2, 0.5, -0.5)
# Innermost strides that stay literal: LLVM vectorizes a known stride-2 walk (pooling, ``x[..., ::2]``) with wide
# loads and shuffles, and a run-time one with gathers, measured 3x slower for a 2x2 max pool.
INNER_LITERAL_STRIDES = (2, -2)


class Sym:
    """Run-time argument number ``index`` of a template, of LLVM type ``ty``: ``%q<index>`` in LLVM text,
    ``$q<index>`` in a kernel's canonical text.

    It has no arithmetic, so emitter code that would fold a size into a constant fails loudly instead of baking one
    size into code shared by all. An ``i64`` one stands for a size >= 2, a stride other than 0 and +-1, or an offset
    other than 0 (see `literal_size` and `unit_stride`); others for an expression's constant.
    """

    __slots__ = ("index", "ty")

    def __init__(self, index, ty="i64"):
        self.index, self.ty = index, ty

    def __str__(self):
        return f"%q{self.index}"

    def __repr__(self):
        return f"$q{self.index}"

    def __eq__(self, other):
        return isinstance(other, Sym) and other.index == self.index and other.ty == self.ty

    def __hash__(self):
        return hash(("Sym", self.index, self.ty))


def parametrize(kernel):
    """``(template, values)``: the collapsed ``kernel`` with its non-structural integers and constants as `Sym` s,
    and their values in argument order (shape, each buffer's strides and offset, then constants)."""
    k = collapse(kernel)
    values = []

    def hoist(v, keep, ty="i64"):
        if keep:
            return v
        values.append(v)
        return Sym(len(values) - 1, ty)

    shape = tuple(hoist(n, n < 2) for n in k.shape)
    last = len(k.shape) - 1
    buffers = tuple(Buffer(b.dtype, tuple(hoist(s, s in (0, 1, -1) or d == last and s in INNER_LITERAL_STRIDES)
                                          for d, s in enumerate(b.strides)), hoist(b.offset, b.offset == 0))
                    for b in k.buffers)
    rebuilt = {}

    def constants(e, keep=False):
        found = rebuilt.get((e, keep))
        if found is None:
            if e.op == "const":
                keep = keep or e.dtype == "bool" or e.value in LITERAL_CONSTANTS
                found = Expr("const", (), e.dtype, hoist(e.value, keep, LLVM_TYPES[e.dtype]))
            else:
                # A power's constant exponent stays code: llvm_math folds its integer and odd checks.
                found = e if not e.args else Expr(e.op, [constants(a, e.op == "pow" and i == 1)
                                                         for i, a in enumerate(e.args)], e.dtype, e.value)
            rebuilt[e, keep] = found
        return found

    stores = tuple(Store(s.buffer, constants(s.value), s.reduce, s.phase, s.row) for s in k.stores)
    return Kernel(shape, buffers, stores, k.reduce_axes), tuple(values)


def arguments(kernel):
    """The LLVM types of a template's `Sym` arguments, in order (empty for a kernel with every value literal)."""
    found = [v for v in list(kernel.shape) + [v for b in kernel.buffers for v in (*b.strides, b.offset)]
             if isinstance(v, Sym)]
    found += [e.value for e in kernel.nodes() if e.op == "const" and isinstance(e.value, Sym)]
    types = [None] * len(found)
    for v in found:
        types[v.index] = v.ty
    return types


def outer_size(template, values):
    """The size of dimension 0 (the range callers split across threads) of the kernel ``parametrize`` made
    ``(template, values)`` from."""
    n = template.shape[0]
    return values[n.index] if isinstance(n, Sym) else n


def is_template(kernel):
    """Whether ``kernel`` came from `parametrize` (it is collapsed already; collapsing needs its integers)."""
    return bool(arguments(kernel))


def bits(value, ty):
    """``value`` of LLVM type ``ty`` as the int64 whose low bytes hold it (a program's integer array).

    >>> bits(1.5, "float"), bits(-3, "i32"), bits(-3, "i64")
    (1069547520, 4294967293, -3)
    """
    if ty == "float":
        return int(np.float32(value).view(np.uint32))
    if ty == "double":
        return int(np.float64(value).view(np.int64))
    if ty == "i32":
        return int(np.int32(value).view(np.uint32))
    return int(value)


def literal_size(n, below):
    """Whether size ``n`` is known to be smaller than ``below`` (<= 2): a `Sym` size is >= 2."""
    return not isinstance(n, Sym) and n < below


def unit_stride(s):
    """Whether stride ``s`` is +-1 (a `Sym` stride never is)."""
    return not isinstance(s, Sym) and abs(s) == 1
