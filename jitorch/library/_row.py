"""A registered operator as ONE op-table row while a dispatcher mode is active (tracing, compiling, fake tensors).

The row's arguments are the call's tensors, flattened (lists expanded); everything else travels in one ``spec``
attribute, a tuple with one entry per schema argument: ``"T"`` a tensor, ``"M"`` a tensor the op mutates, ``"N"``
None, ``"L:TNM"`` a list (one letter per element), ``("V", value)`` / ``("VL", values)`` a constant or a list of
them. No structure is an integer, so compile's size fitting never mistakes a count for a size.

The row's kernel wraps the arrays into tensors again (views, so make_fx's refusal to read traced values does not see
the kernel's own reads; copies for mutated inputs), runs the kernel, or the fake implementation on fake or meta
tensors, and returns the output arrays followed by the mutated copies, which `run_row` writes back into the inputs.

>>> import jitorch
>>> from jitorch.fx import make_fx
>>> @jitorch.library.custom_op("doc_row::twice", mutates_args=())
... def twice(x: jitorch.Tensor) -> jitorch.Tensor:
...     return x * 2
>>> gm = make_fx(lambda x: twice(x) + 1)(jitorch.ones(2))
>>> [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"]
['doc_row::twice', 'add']
"""
from __future__ import annotations

import sys

from .._dispatch import apply
from .._tensor import Tensor
from ..ops.table import NOT_DIFFERENTIABLE, OPS, OpDef, Opaque
from . import _registry

__all__ = ["row_for", "run_row"]

_ROWS: dict = {}  # key -> the OpDef made for it (a redefinition with another output count replaces it)


def row_for(entry):
    nout = entry.n_returns + len(entry.mutated)
    op = _ROWS.get(entry.key)
    if op is None or op.nout != nout:
        op = OpDef(entry.key, _kernel_for(entry.key), NOT_DIFFERENTIABLE, Opaque("custom op"), nout=nout)
        if OPS.get(entry.key) is not None:
            from ..fx.make_fx import _primitive

            _primitive.cache_clear()  # its cache would hand out the replaced row
        OPS[entry.key] = _ROWS[entry.key] = op
    return op


def _spec(entry, values):
    flat, spec = [], []
    for i, (a, v) in enumerate(zip(entry.schema.arguments, values)):
        if isinstance(v, Tensor):
            flat.append(v)
            spec.append("M" if a.mutable else "T")
        elif v is None:
            spec.append("N")
        elif a.kind == "tensor_list":
            flat.extend(t for t in v if t is not None)
            spec.append("L:" + "".join("N" if t is None else "M" if a.mutable else "T" for t in v))
        elif isinstance(v, list):
            spec.append(("VL", tuple(v)))
        else:
            spec.append(("V", v))
    return flat, tuple(spec)


def run_row(entry, values):
    """The op as one row (the dispatcher hands it to the active mode); mutated inputs written back with ``copy_``."""
    flat, spec = _spec(entry, values)
    out = apply(entry.row(), *flat, spec=spec)
    outs = out if isinstance(out, tuple) else (out,)
    n = entry.n_returns
    if len(outs) > n:
        mutated = [t for t, s in zip(flat, _letters(spec)) if s == "M"]
        for t, new in zip(mutated, outs[n:]):
            t.copy_(new)
            t._bump_version()
    if n == 0:
        return None
    return tuple(outs[:n]) if entry.schema.returns_tuple else outs[0]


def _letters(spec):
    for s in spec:
        if s in ("T", "M"):
            yield s
        elif isinstance(s, str) and s.startswith("L:"):
            yield from (c for c in s[2:] if c != "N")


def _rebuild(spec, tensors):
    it = iter(tensors)
    values = []
    for s in spec:
        if s in ("T", "M"):
            values.append(next(it))
        elif s == "N":
            values.append(None)
        elif isinstance(s, str):
            values.append([None if c == "N" else next(it) for c in s[2:]])
        else:
            values.append(list(s[1]) if s[0] == "VL" else s[1])
    return values


def _is_fake(tensors):
    fake = sys.modules.get("jitorch.fx._fake")
    if fake is None or not fake._active:
        return False
    mode = fake._active[-1]
    return any(mode.is_fake(t) for t in tensors)


def _kernel_for(key):
    def kernel(xp, *arrays, spec):
        entry = _registry.REGISTRY.get(key)
        if entry is None:
            raise RuntimeError(f"{key}: the operator no longer exists (its Library was destroyed)")
        # Views for the inputs: the same memory as another object, so make_fx's refusal to read traced values does
        # not stop the kernel's own host reads (the kernel is opaque, as in torch); copies for the mutated ones.
        letters = list(_letters(spec))
        tensors = [Tensor._make(a.copy() if m == "M" else a.view()) for a, m in zip(arrays, letters)]
        values = _rebuild(spec, tensors)
        out = _registry.run_kernel(entry, values, tensors, fake=_is_fake(tensors))
        outs = () if entry.n_returns == 0 else tuple(out) if entry.schema.returns_tuple else (out,)
        result = [o._data for o in outs] + [t._data for t, m in zip(tensors, letters) if m == "M"]
        return result[0] if len(result) == 1 else tuple(result)
    kernel.__name__ = key
    return kernel
