"""``torch.export.Dim`` and the ``dynamic_shapes`` argument of ``export``.

``Dim("batch", min=1, max=64)`` names a dimension that may take any size in its range; ``dynamic_shapes`` says which
dimensions of which inputs are such (``{"x": {0: batch}}`` by argument name, or a tuple in argument order; per
tensor a dict ``{dim: Dim}`` or a list with one entry per dimension, ``None`` for static; nested lists and dicts
of inputs take the same structure). ``Dim.AUTO`` and ``Dim.DYNAMIC`` make a dimension dynamic without a name
(``AUTO`` falls back to a static size when the program specializes it), ``Dim.STATIC`` keeps it static.
`resolve` turns the argument into ``[(flat input index, dim, Dim)]``; each distinct ``Dim`` becomes one symbol of
the exported program (``s0``, ``s1``...), with a `ValueRanges` in ``ep.range_constraints``.

>>> batch = Dim("batch", min=1, max=64)
>>> batch, Dim("n"), Dim.AUTO
(Dim('batch', min=1, max=64), Dim('n', min=0), DimHint(AUTO))
>>> ValueRanges(1, int_oo)
VR[1, int_oo]
"""
from __future__ import annotations

import inspect
import sys

from .._tensor import Tensor
from ._errors import UserError, UserErrorType

__all__ = ["Dim", "dims", "DimHint", "ValueRanges", "Symbol", "int_oo", "resolve", "argument_names"]


class _IntInfinity(int):
    """The unbounded upper end of a size range (torch's ``int_oo``): compares as the largest int."""

    def __repr__(self):
        return "int_oo"

    __str__ = __repr__

    def __reduce__(self):
        return _int_oo, ()


def _int_oo():
    return int_oo


int_oo = _IntInfinity(sys.maxsize)


class DimHint:
    """``Dim.AUTO`` / ``Dim.DYNAMIC`` / ``Dim.STATIC``: a dimension's treatment without a name or a range."""

    def __init__(self, kind):
        self.kind = kind

    def __repr__(self):
        return f"DimHint({self.kind})"

    def __eq__(self, other):
        return isinstance(other, DimHint) and other.kind == self.kind

    def __hash__(self):
        return hash(("DimHint", self.kind))


class Dim:
    """A named dynamic dimension with a size range ``[min, max]`` (``min`` 0 and ``max`` unbounded by default)."""

    AUTO, DYNAMIC, STATIC = DimHint("AUTO"), DimHint("DYNAMIC"), DimHint("STATIC")

    def __init__(self, name, *, min=None, max=None):  # noqa: A002 - torch's keywords
        lo, hi = 0 if min is None else int(min), int_oo if max is None else int(max)
        if lo < 0 or hi < lo:
            raise UserError(UserErrorType.INVALID_INPUT,
                            f"Dim('{name}'): expected 0 <= min <= max, got min={lo} and max={hi}")
        self.__name__, self.min, self.max = name, lo, hi

    def __repr__(self):
        hi = "" if self.max == int_oo else f", max={self.max}"
        return f"Dim('{self.__name__}', min={self.min}{hi})"


def dims(*names, min=None, max=None):  # noqa: A002
    """One `Dim` per name, all with the same range: ``batch, seq = dims("batch", "seq", max=512)``."""
    return tuple(Dim(name, min=min, max=max) for name in names)


class ValueRanges:
    """The sizes a symbol may take: ``VR[lower, upper]``, ``upper`` possibly ``int_oo``."""

    def __init__(self, lower, upper):
        self.lower, self.upper = lower, upper

    def __repr__(self):
        return f"VR[{self.lower}, {self.upper}]"

    def __eq__(self, other):
        return isinstance(other, ValueRanges) and (other.lower, other.upper) == (self.lower, self.upper)

    def __contains__(self, value):
        return self.lower <= value <= self.upper


class Symbol:
    """A symbolic size of an exported program (``s0``): a key of ``range_constraints``."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name

    __str__ = __repr__

    def __eq__(self, other):
        return isinstance(other, Symbol) and other.name == self.name

    def __hash__(self):
        return hash(self.name)


def argument_names(mod, args, kwargs):
    """The names of ``mod.forward``'s parameters that ``args`` fill (``*args`` entries as ``args_0``...)."""
    try:
        params = list(inspect.signature(mod.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    names, star = [], None
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            star = p.name
    out = names[:len(args)]
    out += [f"{star or 'args'}_{i}" for i in range(len(out), len(args))]
    return out + list(kwargs)


def _fail(msg):
    return UserError(UserErrorType.INVALID_INPUT, msg)


def _tensor_dims(t, spec, where):
    """``[(dim, Dim or hint)]`` of one tensor's spec (a dict by dimension or a sequence over all of them)."""
    if spec is None:
        return []
    ndim = t.dim()
    if isinstance(spec, dict):
        items = list(spec.items())
    elif isinstance(spec, (list, tuple)):
        if len(spec) != ndim:
            raise _fail(f"Expected dynamic shape spec {spec!r} at {where} to have the same length as the actual "
                        f"tensor shape {tuple(t.shape)} (expected {ndim}, but got {len(spec)} instead)")
        items = list(enumerate(spec))
    else:
        raise _fail(f"Unexpected dynamic shape spec {spec!r} at {where}: use a dict {{dim: Dim}} or a list with one "
                    "entry (a Dim or None) per dimension")
    out = []
    for d, dim in items:
        if not isinstance(d, int) or not -ndim <= d < ndim:
            raise _fail(f"Dynamic shape spec {spec!r} at {where} names dimension {d!r}, but the tensor has shape "
                        f"{tuple(t.shape)}")
        if dim is None or dim == Dim.STATIC or isinstance(dim, int):
            continue
        if not isinstance(dim, (Dim, DimHint)):
            raise _fail(f"Unexpected dimension mapped to index {d} in input tensor shape {spec!r} at {where}: "
                        f"expected a torch.export.Dim, Dim.AUTO/DYNAMIC/STATIC or None, got {dim!r}")
        out.append((d % ndim, dim))
    return out


def _walk(value, spec, where, out):
    """Append ``[(dim, Dim)]`` for each pytree leaf of ``value`` (flatten order) following ``spec``."""
    from ..utils._pytree import tree_leaves

    if isinstance(value, Tensor):
        out.append(_tensor_dims(value, spec, where))
    elif type(value) in (list, tuple) and spec is not None:
        if not isinstance(spec, (list, tuple)) or len(spec) != len(value):
            raise _fail(f"Dynamic shape spec {spec!r} at {where} does not match the input's structure (a "
                        f"{type(value).__name__} of {len(value)})")
        for i, (v, s) in enumerate(zip(value, spec)):
            _walk(v, s, f"{where}[{i}]", out)
    elif type(value) is dict and spec is not None:
        if not isinstance(spec, dict) or set(spec) != set(value):
            raise _fail(f"Dynamic shape spec {spec!r} at {where} does not match the input's keys {list(value)}")
        for k, v in value.items():
            _walk(v, spec[k], f"{where}[{k!r}]", out)
    else:
        if spec is not None and not isinstance(value, (int, float, bool, str, type(None))):
            raise _fail(f"Dynamic shape spec {spec!r} at {where} is for a {type(value).__name__}, which jitorch "
                        "cannot mark dynamic (only tensors and lists/tuples/dicts of them)")
        out.extend([] for _ in tree_leaves(value))


def resolve(mod, args, kwargs, dynamic_shapes):
    """``[(flat input index, dim, Dim or DimHint)]`` for ``export(mod, args, kwargs, dynamic_shapes=...)``."""
    if dynamic_shapes is None:
        return []
    names = argument_names(mod, args, kwargs)
    values = list(args) + list(kwargs.values())
    if isinstance(dynamic_shapes, dict):
        if set(dynamic_shapes) - set(names):
            raise _fail(f"When `dynamic_shapes` is specified as a dict, its top-level keys must be the arg names "
                        f"{names} of `inputs`, but here they are {list(dynamic_shapes)}. Alternatively, you could "
                        "also ignore arg names entirely and specify `dynamic_shapes` as a list/tuple matching "
                        "`inputs`.")
        specs = [dynamic_shapes.get(n) for n in names]
    elif isinstance(dynamic_shapes, (list, tuple)):
        if len(dynamic_shapes) not in (len(args), len(values)):
            raise _fail(f"When `dynamic_shapes` is specified as a list/tuple, it must match the inputs: "
                        f"{len(values)} inputs ({names}), but {len(dynamic_shapes)} specs")
        specs = list(dynamic_shapes) + [None] * (len(values) - len(dynamic_shapes))
    else:
        raise _fail(f"dynamic_shapes must be a dict, a tuple or a list, got {type(dynamic_shapes).__name__}")
    per_leaf = []
    for name, value, spec in zip(names, values, specs):
        _walk(value, spec, f"inputs['{name}']", per_leaf)
    return [(i, d, dim) for i, leaf in enumerate(per_leaf) for d, dim in leaf]
