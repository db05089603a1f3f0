"""Patches installed for the duration of one CPU graph capture, and removed by ``uninstall`` however it ends.

- Host reads (``item``, ``tolist``, ``numpy``, ``bool``, printing...) would bake one capture-time value into Python
  control flow, so they raise and end the capture, as CUDA graph capture does for synchronising calls.
- ``jitorch._random._rng`` is where every sampler gets its NumPy Generator: while capturing it hands out a proxy that
  notes the draw, and the samplers that wrap a draw straight into a tensor (``_sample``, ``_fill_from``) turn it into a
  replay step that draws again from the generator on each replay. Other samplers raise instead of freezing numbers.
- ``Tensor._make`` notes the arrays of tensors created inside the capture (creation functions), so an in-place op on
  one can restore its initial value at the start of each replay.

>>> import jitorch
>>> from jitorch.cpu import CPUGraph, graph
>>> g = CPUGraph()
>>> with graph(g):
...     noise = jitorch.rand(2)
>>> first = noise.clone(); g.replay(); bool((noise != first).all())
True
"""
from __future__ import annotations

import numpy as np

from .. import _random
from .._tensor import Tensor
from ._recorder import Record
from ._steps import draw_step

__all__ = ["install", "uninstall", "FORBIDDEN"]

FORBIDDEN = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "__array__", "__repr__",
             "__str__", "__format__")
_PATCHED = ("detach", "data", "grad")  # aliases made without an op; the .grad setter


class _DrawProxy:
    """Stands in for a generator's NumPy ``Generator``: draws for real and tells the capture what was drawn."""

    def __init__(self, mode, generator):
        self._mode, self._generator = mode, generator

    def __getattr__(self, method):
        mode, generator = self._mode, self._generator

        def draw(*args, **kwargs):
            if mode.pending_draw is not None:
                mode.fail(f"CPU graph capture: the random sampler drawing with '{mode.pending_draw[1]}' is not "
                          "supported yet (rand, randn, randint, randperm, normal and the in-place samplers are)")
            values = getattr(generator._rng, method)(*args, **kwargs)
            mode.pending_draw = (generator, method, args, kwargs, values)
            return values
        return draw


def _take_draw(mode, values):
    """The pending draw if ``values`` is exactly its array, else None (after ending the capture if one is pending)."""
    pending = mode.pending_draw
    if pending is None:
        return None
    if pending[4] is not values or type(values) is not np.ndarray:
        mode.fail(f"CPU graph capture: the random sampler drawing with '{pending[1]}' is not supported yet (rand, "
                  "randn, randint, randperm, normal and the in-place samplers are)")
    mode.pending_draw = None
    return pending


def install(mode, abort):
    """Install the patches for ``mode``; returns the originals for ``uninstall``."""
    saved = {"tensor": {name: Tensor.__dict__[name] for name in FORBIDDEN + ("_inplace_accumulate",) + _PATCHED
                        if name in Tensor.__dict__},
             "make": Tensor.__dict__["_make"],
             "random": {name: getattr(_random, name) for name in ("_rng", "_sample", "_fill_from", "_finish")}}
    original = saved["random"]

    def forbid(name):
        def refuse(self, *args, **kwargs):
            abort()
            shown = "print/repr" if name in ("__repr__", "__str__", "__format__") else name.strip("_")
            raise RuntimeError(f"operation not permitted when the CPU graph is capturing: {shown}(). It reads a "
                               "value on the host, which replay would not recompute; move it out of the captured "
                               "region.")
        return refuse

    for name in FORBIDDEN:
        if name in saved["tensor"]:
            setattr(Tensor, name, forbid(name))

    def accumulate(self, other):
        # The engine's ``grad += g`` on raw arrays would escape the recording: run it as an op instead.
        self.add_(other if other.dtype == self.dtype else other.to(self.dtype))
    Tensor._inplace_accumulate = accumulate
    make = saved["make"].__func__
    aliasing = [False]

    def make_noting(data):
        if not aliasing[0]:
            mode.note_born(data)
        return make(data)
    Tensor._make = staticmethod(make_noting)

    def alias(fn):
        # ``w.detach()`` and ``w.data`` wrap w's own memory: not a birth. Noted as one, an in-place update of a
        # parameter through it (``p.detach().add_(g)``) would get a restore of the capture-time value before
        # every replay, undoing the previous replay's update.
        def call(self):
            aliasing[0] = True
            try:
                return fn(self)
            finally:
                aliasing[0] = False
        return call
    Tensor.detach = alias(saved["tensor"]["detach"])
    Tensor.data = property(alias(saved["tensor"]["data"].fget), saved["tensor"]["data"].fset)
    grad = saved["tensor"]["grad"]

    def set_grad(self, value):
        if value is None:  # zero_grad() inside the capture: its backward's new gradient is no accumulation
            mode.cleared.add(id(self))
        grad.fset(self, value)
    Tensor.grad = property(grad.fget, set_grad, grad.fdel)

    def rng(generator):
        return _DrawProxy(mode, generator or _random.default_generator)

    def sample(values, dt, device, requires_grad):
        pending = _take_draw(mode, values)
        t = original["_sample"](values, dt, device, requires_grad)
        if pending is not None:
            if type(t._data) is not np.ndarray:
                mode.fail("CPU graph capture: random sampling on a non-CPU device cannot be recorded")
            mode.add_step(Record("draw", draw_step(*pending[:4], t._data),
                                 f"buf{id(t._data) & 0xffff:04x} = draw {pending[1]}", outs=[t._data]))
        return t

    def fill_from(self, values):
        pending = _take_draw(mode, values)
        if pending is not None:
            # The drawn array becomes a static buffer refilled by each replay; the copy_ into ``self`` that
            # ``_fill_from`` runs next is recorded by the mode as reading from it.
            mode.add_step(Record("draw", draw_step(*pending[:4], values),
                                 f"buf{id(values) & 0xffff:04x} = draw {pending[1]}", outs=[values]))
        return original["_fill_from"](self, values)

    def finish(data, *args, **kwargs):
        _take_draw(mode, None)  # a draw reaching a tensor any other way is a sampler we cannot replay
        return original["_finish"](data, *args, **kwargs)

    _random._rng, _random._sample, _random._fill_from, _random._finish = rng, sample, fill_from, finish
    return saved


def uninstall(saved):
    for name, value in saved["tensor"].items():
        setattr(Tensor, name, value)
    Tensor._make = saved["make"]
    for name, value in saved["random"].items():
        setattr(_random, name, value)
