"""Compiled outputs in eager's memory layout: ``x.t() * 2`` returns strides ``(1, 3)`` eagerly (an elementwise op
keeps its operands' layout, as ATen's TensorIterator does) and from torch.compile too; a fused kernel writes its
output row-major. A whole graph's outputs whose traced (eager) value is dense in another order (transposed,
permuted, channels-last) are handed out in that order: one copy through the native transpose kernels, so strides,
``is_contiguous()`` and ``.view`` behave as eagerly.

>>> import jitorch
>>> f = jitorch.compile(lambda x: x.t() * 2)
>>> f(jitorch.ones(4, 3)).stride(), (jitorch.ones(4, 3).t() * 2).stride()
((1, 3), (1, 3))
"""
from __future__ import annotations

import numpy as np

from .._tensor import Tensor
from ..fx.node import map_aggregate

__all__ = ["eager_layouts", "keeping_layouts", "relaying", "LaidOutPlan", "laid_out", "memory_order",
           "in_order", "root_array"]


def _permutation(t):
    """The order of ``t``'s dimensions from outermost to innermost when its memory is dense in an order other than
    row-major, else None (row-major, a view, overlapping or gapped memory, a device array)."""
    return None if t._base is not None else memory_order(t._data)


def root_array(a):
    while isinstance(getattr(a, "base", None), np.ndarray):
        a = a.base
    return a


def memory_order(a):
    """The order of array ``a``'s dimensions from outermost to innermost when its memory is dense in an order other
    than row-major (``x.t()``, channels-last), else None."""
    if type(a) is not np.ndarray or a.flags.c_contiguous or a.ndim < 2:
        return None
    sized = [d for d in range(a.ndim) if a.shape[d] > 1]
    perm = sorted(sized, key=lambda d: -a.strides[d]) + [d for d in range(a.ndim) if d not in sized]
    expected = a.itemsize
    for d in reversed(perm):
        if a.shape[d] > 1 and a.strides[d] != expected:
            return None
        expected *= a.shape[d]
    return tuple(perm)


def eager_layouts(result, row_major=False):
    """Per tensor of ``result`` (a traced call's eager result, in `map_aggregate` order): ``(permutation, strides,
    is a view)`` of a dense non-row-major one (with ``row_major``, of a row-major one too), and of a dense view
    that shares no memory with another output (``x.t().exp().t()``: a fused kernel's row-major buffer would make it
    column-major), else None; None for the whole when no tensor has one."""
    tensors = []
    map_aggregate(result, lambda a: tensors.append(a) if isinstance(a, Tensor) else a)
    roots = [id(root_array(t._data)) for t in tensors if t._base is not None and type(t._data) is np.ndarray]
    found = []
    for a in tensors:
        d = a._data
        view = a._base is not None
        if view:
            lone = type(d) is np.ndarray and d.ndim >= 2 and roots.count(id(root_array(d))) == 1 and \
                not any(id(root_array(t._data)) == id(root_array(d)) for t in tensors if t._base is None)
            perm = (memory_order(d) or (tuple(range(d.ndim)) if d.flags.c_contiguous else None)) if lone else None
        elif type(d) is np.ndarray and id(root_array(d)) in roots:
            perm = None  # another output is a view of it: a copy would part them (their memory is one, eagerly)
        else:
            perm = _permutation(a)
            if perm is None and row_major and type(d) is np.ndarray and d.ndim >= 2 and d.flags.c_contiguous:
                perm = tuple(range(d.ndim))
        found.append(None if perm is None else (perm, d.strides, view))
    return found if any(found) else None


def _is_dense_in(a, perm):
    """Whether array ``a`` is dense in the order ``perm`` (at whatever size)."""
    return memory_order(a) == perm if not a.flags.c_contiguous else perm == tuple(range(a.ndim))


def in_order(t, perm):
    """``t``'s values in a new tensor whose memory is row-major over ``perm``'s order of its dimensions; made of ops
    when ``t`` requires grad (a compiled training output, a relaid input), so its gradient flows back through them."""
    back = tuple(int(d) for d in np.argsort(perm))
    if t.requires_grad:
        return t.permute(*perm).contiguous().permute(*back)
    dense = Tensor._make(t._data).permute(*perm).contiguous()._data
    return Tensor._make(dense.transpose(back))


def keeping_layouts(run, result, rewritten=False):
    """``run(args, kwargs)`` handing out its tensors in the layouts eager gave ``result``'s (see `eager_layouts`);
    ``run`` itself when they are all row-major (no cost per call), unless the graph's outputs were ``rewritten``
    (`permute_sinking`: a row-major eager result is then checked too)."""
    return relaying(run, eager_layouts(result, row_major=rewritten))


def relaying(run, layouts):
    """``run(args, kwargs)`` with its tensors handed out in ``layouts`` (`eager_layouts`: per tensor, in
    `map_aggregate` order, ``(permutation, strides)`` or None); ``run`` itself when ``layouts`` is None."""
    if layouts is None:
        return run
    return lambda args, kwargs: laid_out(run(args, kwargs), layouts)


class LaidOutPlan:
    """A training plan (``plan(params + args + kwargs)``) whose outputs are handed out in eager's ``layouts``; its
    other attributes (kernels, graphs) are the plan's."""

    def __init__(self, plan, layouts):
        self._plan, self._layouts = plan, layouts

    def __call__(self, flat):
        return laid_out(self._plan(flat), self._layouts)

    def __getattr__(self, name):
        return getattr(self._plan, name)


def laid_out(result, layouts):
    """``result`` with its tensors in ``layouts`` (see `relaying`). A tensor already dense in its permutation
    (at strides of another size: a dynamic specialization) is handed out as it is."""
    it, done = iter(layouts), {}

    def fix(a):
        if not isinstance(a, Tensor):
            return a
        want = next(it, None)
        d = a._data
        if want is None or type(d) is not np.ndarray or len(want[0]) != d.ndim:
            return a
        if d.strides == want[1] or _is_dense_in(d, want[0]):
            if want[2] or a._base is None or a.requires_grad:
                return a
            # (a permuted view of the graph's own value, `permute_sinking`: eager's result is no view)
            return done.setdefault(id(a), Tensor._make(d))
        if id(a) not in done:  # one tensor returned twice stays one tensor
            done[id(a)] = in_order(a, want[0])
        return done[id(a)]
    return map_aggregate(result, fix)
