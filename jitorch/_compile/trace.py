"""Trace a call into a primitive graph (``make_fx``'s recorder) and notice data-dependent Python.

Each node gets ``meta["val"] = (shape, numpy dtype)`` of the value it produced on the example inputs; the fusion
pass needs it to know iteration spaces and dtypes. While tracing, the Tensor methods that hand a value to Python
(``item``, ``bool``, ``float``, ``tolist``...) are watched: the trace still finishes with the real value (so the
call's result is correct), but the graph it recorded only holds for that value, so it is marked as broken.

>>> import jitorch
>>> t = trace(lambda x: x * 2 if x.sum() > 0 else x, (jitorch.ones(2),), {})
>>> t.break_reason
'Tensor.__bool__() reads a tensor value into Python (data-dependent control flow)'
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from .. import _random
from .._dispatch import pop_mode, push_mode
from .._tensor import Tensor
from ..fx.graph import Graph
from ..fx.graph_module import GraphModule
from ..fx.make_fx import _RecordingMode
from ..fx.node import map_aggregate
from ..nn.modules.module import Module

__all__ = ["Trace", "trace"]

# Methods that move a tensor's value into Python, where the tracer cannot follow it.
_WATCHED = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "__array__", "__complex__")
_lock = threading.Lock()


@dataclass
class Trace:
    gm: GraphModule | None
    result: object
    break_reason: str | None


class _MetaMode(_RecordingMode):
    """The recorder, plus each node's shape and dtype, plus a note when Python reads a tensor value."""

    break_reason = None

    def bind(self, tensor, node):
        super().bind(tensor, node)
        node.meta["val"] = (tuple(tensor._data.shape), tensor._data.dtype)


def _watch_random(mode):
    """Every sampler draws its generator through ``_random._rng``: a traced draw would freeze into a constant."""
    original = _random._rng

    def watched(generator):
        if mode.break_reason is None:
            mode.break_reason = "random sampling inside the function (a compiled graph would replay fixed numbers)"
        return original(generator)

    _random._rng = watched
    return original


def _watch(mode):
    originals = {name: getattr(Tensor, name) for name in _WATCHED}

    def wrap(name, fn):
        def watched(self, *args, **kwargs):
            if mode.break_reason is None:
                mode.break_reason = f"Tensor.{name}() reads a tensor value into Python (data-dependent control flow)"
            return fn(self, *args, **kwargs)
        return watched

    for name, fn in originals.items():
        setattr(Tensor, name, wrap(name, fn))
    return originals


def trace(fn, args, kwargs):
    """Run ``fn(*args, **kwargs)`` once under the recorder; keyword arguments become trailing placeholders."""
    keys = tuple(kwargs)
    flat = tuple(args) + tuple(kwargs[k] for k in keys)
    nargs = len(args)
    graph, root = Graph(), Module()
    mode = _MetaMode(graph, root)
    for i, a in enumerate(flat):
        node = graph.placeholder(f"arg{i}")
        if isinstance(a, Tensor):
            mode.bind(a, node)
    # One trace at a time: the watched methods are patched on the class.
    with _lock:
        originals = _watch(mode)
        original_rng = _watch_random(mode)
        push_mode(mode)
        try:
            result = fn(*flat[:nargs], **dict(zip(keys, flat[nargs:])))
        finally:
            pop_mode()
            _random._rng = original_rng
            for name, method in originals.items():
                setattr(Tensor, name, method)
    if mode.break_reason is not None:
        return Trace(None, result, mode.break_reason)
    graph.output(map_aggregate(result, mode.arg))
    return Trace(GraphModule(root, graph), result, None)
