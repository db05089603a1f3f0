"""The op table: one ``OpDef`` row per primitive op.

A row holds everything jitorch knows about a primitive:

- ``kernel(xp, *arrays, **attrs)``: the eager computation, written once against the array module ``xp`` (NumPy or CuPy);
- ``backward(ctx, *grads)``: gradients of the inputs, written in jitorch ops so double backward and tracing work
  (``NOT_DIFFERENTIABLE`` for ops without a gradient, e.g. comparisons);
- ``fusion``: how the code generator may fuse it: ``Pointwise(expr)`` with a C-like expression over ``{0}``, ``{1}``,
  ``Reduction(kind)``, ``View()`` or ``Opaque()`` (a library call such as BLAS that ends a fused group);
- ``promotion``: how input dtypes combine (``"promote"``, ``"float"``, ``"compare"``, ``"keep"``, ``"integral"``);
- ``saves``: what the backward needs (``"inputs"``, ``"outputs"``, ``"both"`` or ``None``);
- ``row_major_out``: the kernel always returns fresh row-major arrays, whatever its inputs' layout (reductions, linear).

Composite ops are not rows: they are functions of rows and inherit backward and fusion.

>>> from jitorch.ops.table import OPS
>>> OPS["add"].fusion
Pointwise(expr='{0} + {1}')
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OpDef", "OPS", "defop", "validate_row", "Pointwise", "Reduction", "View", "Opaque",
           "NOT_DIFFERENTIABLE"]


@dataclass(frozen=True)
class Pointwise:
    expr: str


@dataclass(frozen=True)
class Reduction:
    kind: str


@dataclass(frozen=True)
class View:
    pass


@dataclass(frozen=True)
class Opaque:
    why: str = "library call"


def NOT_DIFFERENTIABLE(ctx, *grads):  # noqa: N802 - a sentinel that reads as a constant in rows
    raise RuntimeError(f"{ctx.name()}: this op is not differentiable")


PROMOTIONS = ("promote", "float", "compare", "keep", "integral")
SAVES = (None, "inputs", "outputs", "both")


class OpDef:
    """One primitive. See the module docstring for the columns."""

    __slots__ = ("name", "kernel", "backward", "fusion", "promotion", "saves", "view", "nout", "meta",
                 "grad_name", "ufunc", "nondiff_outputs", "differentiable", "node_cls", "masks", "pointwise",
                 "single_keep", "save_if", "complex_error", "row_major_out", "__weakref__")

    def __init__(self, name, kernel, backward, fusion, promotion="keep", saves=None, view=False, nout=1,
                 meta=False, grad_name=None, ufunc=None, nondiff_outputs=(), masks=False, save_if=None,
                 row_major_out=False):
        if promotion not in PROMOTIONS:
            raise ValueError(f"op {name}: promotion must be one of {PROMOTIONS}, got {promotion!r}")
        if saves not in SAVES:
            raise ValueError(f"op {name}: saves must be one of {SAVES}, got {saves!r}")
        self.name = name
        self.kernel = kernel
        self.backward = backward
        self.fusion = fusion
        self.promotion = promotion
        self.saves = saves
        self.view = view
        self.nout = nout
        self.meta = meta  # record input shapes/dtypes; the engine reduces broadcast gradients to them
        self.grad_name = grad_name or "".join(p.capitalize() for p in name.split("_")) + "Backward0"
        self.ufunc = ufunc  # name of an array-module ufunc usable with ``out=`` for in-place fast paths
        self.nondiff_outputs = nondiff_outputs
        self.masks = masks  # bool inputs are masks: promotion never casts them
        # A sum's backward may fill a fresh row-major gradient for an input that comes from such a row (reduction.py).
        self.row_major_out = row_major_out
        self.pointwise = isinstance(fusion, Pointwise)
        # save_if(needs) -> which inputs to save, given which inputs need a gradient (``mul`` keeps ``b`` only when
        # ``a`` needs one): saving less keeps less memory alive and avoids spurious in-place errors.
        self.save_if = save_if
        # complex_error(dtype_name) -> the exception PyTorch raises for a complex input (ordering rows refuse them:
        # ops/complex_refusals.py); None: complex inputs are fine. The dispatcher checks it before the kernel.
        self.complex_error = None
        self.single_keep = promotion == "keep" and nout == 1  # eligible for the dispatcher's one-input path
        self.differentiable = backward is not NOT_DIFFERENTIABLE
        from ..autograd.graph import node_class_for

        self.node_cls = node_class_for(self)

    def __repr__(self):
        return f"OpDef({self.name})"


OPS: dict[str, OpDef] = {}


def defop(name, kernel, backward, fusion, **kw) -> OpDef:
    """Register one row; a name may be defined once."""
    if name in OPS:
        raise ValueError(f"op {name!r} is already defined")
    op = OpDef(name, kernel, backward, fusion, **kw)
    OPS[name] = op
    return op


def validate_row(op) -> OpDef:
    """Check that every column of ``op`` is filled and consistent; raise ``ValueError`` naming each problem.

    >>> validate_row(OPS["add"])
    OpDef(add)
    """
    name = getattr(op, "name", None)
    problems = []
    if not isinstance(name, str) or not name:
        problems.append("name must be a non-empty string")
    if not callable(getattr(op, "kernel", None)):
        problems.append("kernel must be callable (xp, *arrays, **attrs)")
    if not callable(getattr(op, "backward", None)):
        problems.append("backward must be callable or NOT_DIFFERENTIABLE")
    fusion = getattr(op, "fusion", None)
    if not isinstance(fusion, (Pointwise, Reduction, View, Opaque)):
        problems.append(f"fusion must be a Pointwise, Reduction, View or Opaque, got {fusion!r}")
    elif isinstance(fusion, Pointwise) and not (isinstance(fusion.expr, str) and fusion.expr):
        problems.append("a Pointwise fusion needs a non-empty expression")
    elif isinstance(fusion, Reduction) and not (isinstance(fusion.kind, str) and fusion.kind):
        problems.append("a Reduction fusion needs a non-empty kind")
    if getattr(op, "promotion", None) not in PROMOTIONS:
        problems.append(f"promotion must be one of {PROMOTIONS}")
    if getattr(op, "saves", None) not in SAVES:
        problems.append(f"saves must be one of {SAVES}")
    nout = getattr(op, "nout", None)
    if not isinstance(nout, int) or nout < 1:
        problems.append("nout must be a positive int")
    elif not set(getattr(op, "nondiff_outputs", ())) <= set(range(nout)):
        problems.append("nondiff_outputs must index outputs")
    if bool(getattr(op, "view", False)) != isinstance(fusion, View):
        problems.append("view rows and View fusion go together")
    if not isinstance(getattr(op, "row_major_out", None), bool):
        problems.append("row_major_out must be a bool")
    if not isinstance(getattr(op, "grad_name", None), str) or not op.grad_name:
        problems.append("grad_name must be a non-empty string")
    if getattr(op, "differentiable", None) is not (getattr(op, "backward", None) is not NOT_DIFFERENTIABLE):
        problems.append("differentiable must say whether backward is NOT_DIFFERENTIABLE")
    if problems:
        raise ValueError(f"op {name!r}: " + "; ".join(problems))
    return op
