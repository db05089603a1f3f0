"""Which tensor each parameter's ``.grad`` is, across a CPU graph capture and its replays.

A replay writes the captured gradient tensors; ``.grad`` itself is a Python attribute no step sets. The capture's
backward either stored a new gradient (the parameter had none: ``zero_grad()`` before it, inside the captured step
or outside) or added into the one it found. So:
- after a replay, a parameter whose ``.grad`` is None gets the captured gradient back (gradient accumulation with
  ``zero_grad()`` outside a captured forward and backward: eager backward would give it a new one);
- a replay that would add into another tensor than the one the capture added into is refused
  (`CPUGraph.changed_value`), instead of training on a stale gradient;
- a gradient the captured steps only read (an optimizer step captured alone, backward eager) is copied into the
  captured one when the parameter holds another (each eager backward makes a new one);
- a replay that stores a new gradient where the parameter holds one (not set to None since, nor by the captured
  step itself) is what CUDA graphs do (torch's whole-network capture replays into its static gradients), but not
  what eager backward does (it adds): ``jitorch.compile(mode="reduce-overhead")``, which promises eager results,
  captures again there (``eager=True``).

>>> import jitorch
>>> from jitorch.cpu import CPUGraph, graph
>>> w = jitorch.nn.Parameter(jitorch.ones(2)); g = CPUGraph()
>>> with graph(g):
...     (w * 3).sum().backward()
>>> w.grad = None; g.replay(); w.grad
tensor([3., 3.])
>>> g.changed_value() is None, grad_mismatch(g._grads, eager=True).split(":")[0]
(True, "a parameter's .grad holds a gradient, and the capture stored a new one (it had none)")
"""
from __future__ import annotations

import weakref

import numpy as np

from ._steps import root_of

__all__ = ["grad_binds", "grad_mismatch", "prepare", "rebind"]


def grad_binds(inputs, cleared, written):
    """After a capture: ``[(weakref to a parameter, its .grad now, kind, cleared)]`` for the leaves the steps read
    (``inputs``: the capture's ``(weakref, array, description)`` entries) that have a host gradient. ``kind``:
    ``"stored"`` (the capture's backward made it), ``"added"`` (it added into the one it found) or ``"read"`` (the
    steps only read it: a captured optimizer step); ``cleared``: ids of the tensors whose ``.grad`` the captured code
    set to None; ``written``: ids of the root arrays some step writes."""
    input_roots = {id(root_of(a)) for _, a, _ in inputs}
    out = []
    for ref, _, _ in inputs:
        p = ref()
        if p is None or not p._requires_grad or p.grad_fn is not None:
            continue
        g1 = p._grad
        if g1 is None or type(g1._data) is not np.ndarray:
            continue
        root = id(root_of(g1._data))
        kind = "stored" if root not in input_roots else "added" if root in written else "read"
        out.append((weakref.ref(p), g1, kind, id(p) in cleared))
    return out


def grad_mismatch(binds, eager=False):
    """Why a replay would leave a parameter with the wrong gradient (a sentence), or None; ``eager``: also where
    eager backward would add into the gradient a replay overwrites."""
    for ref, g1, kind, cleared in binds:
        p = ref()
        if p is None:
            continue
        now = p._grad
        if kind == "added" and now is not g1:
            return ("a parameter's .grad is " + ("None" if now is None else "another tensor") + ", and the capture "
                    "added into the gradient it had: keep that gradient between replays (optimizer.zero_grad("
                    "set_to_none=False)), or capture again")
        if kind == "read" and now is not g1 and not _copyable(now, g1):
            return ("a parameter's .grad is " + ("None" if now is None else "of another shape or type") + ", and the "
                    "captured step reads it")
        if eager and kind == "stored" and not cleared and now is not None:
            return ("a parameter's .grad holds a gradient, and the capture stored a new one (it had none): eager "
                    "backward would add into it; set .grad to None between replays (optimizer.zero_grad()), or "
                    "capture with it set")
    return None


def _copyable(now, g1):
    return now is not None and type(now._data) is np.ndarray and now._data.shape == g1._data.shape and \
        now._data.dtype == g1._data.dtype


def prepare(binds):
    """Before a replay: a gradient the captured steps only read (an optimizer step captured alone) that is now
    another tensor (eager backward made a new one) is copied into the one they read."""
    for ref, g1, kind, _ in binds:
        p = ref()
        if kind == "read" and p is not None and p._grad is not g1 and p._grad is not None:
            np.copyto(g1._data, p._grad._data)


def rebind(binds):
    """After a replay: a parameter whose ``.grad`` is None gets the gradient tensor the replay filled."""
    for ref, g1, kind, _ in binds:
        p = ref()
        if kind != "read" and p is not None and p._grad is None:
            p._grad = g1
