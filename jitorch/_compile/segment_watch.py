"""The session of a recording or replay: tensor values read into Python reported to the active mode.

While a call is recorded (`segments.Recorder`) or replayed (`replay.Replay`), `watching` wraps the `Tensor` methods
that move a value into Python (``WATCHED``: ``item``, ``__bool__``, ``numpy``...), the generator's draws and version
bumps made behind the dispatcher, and hands each to the mode: a graph break; ``print`` and logging go to the mode's
``python_output`` (`python_output`). `value_key` is the exact key a value
read guards the next segment with; `user_location` the user's line that caused a break. `_ModeBase` is what both
modes share: running an op with the mode lifted, and handing the rest of the call to another mode.

>>> import jitorch
>>> class Log(_ModeBase):
...     def host_read(self, name, t, fn, args, kwargs):
...         print("read", name, value_key(name, self._run(fn, t, *args, **kwargs)))
...         return self._run(fn, t, *args, **kwargs)
>>> with watching(Log()):
...     jitorch.full((2,), 0.75).sum().item()
read item ('float', '0x1.8000000000000p+0')
1.5
"""
from __future__ import annotations

import linecache
import os
import sys
import threading
from contextlib import contextmanager

from .. import _random
from .._random_generator import Generator
from .._dispatch import MODES, pop_mode, push_mode
from .._tensor import Tensor
from .python_output import noting_output


_RESEEDS = ("manual_seed", "seed", "set_state")
# Methods that move a tensor's value into Python, where no graph can follow it.
WATCHED = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "__array__", "__complex__",
           "backward")
# After these the rest of the call runs eagerly. ``backward`` in a compiled training step (``loss.backward()``, then
# ``opt.step()``): the forward before it is a compiled training segment, whose compiled backward the eager
# ``backward`` runs; the optimizer's writes that follow would otherwise make the whole call eager.
# In-place geometry changes swap a tensor's array outside every op (``_movement._set_geometry``): the graph could
# not follow the tensor, and a caller's input must come back with its new shape. They run eagerly with the rest.
GEOMETRY = ("t_", "transpose_", "swapdims_", "swapaxes_", "squeeze_", "unsqueeze_", "resize_", "resize_as_")
# ``h.retain_grad()`` asks for the gradient of a value a compiled backward keeps inside its kernels: ``h`` comes out
# of the compiled segment before it, and the rest of the call runs eagerly, so ``h.grad`` is filled.
WATCHED += (*GEOMETRY, "retain_grad")
ESCAPES = ("numpy", "__array__", "backward", *GEOMETRY, "retain_grad")
_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_lock = threading.RLock()
_session = []  # the active recorder or replay mode: the watched methods report to it


def user_location():
    """``(file:line, source line)`` of the innermost frame outside jitorch: the user's line that caused a break."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PKG + os.sep):
        frame = frame.f_back
    if frame is None:
        return "", ""
    name, line = frame.f_code.co_filename, frame.f_lineno
    return f"{name}:{line}", linecache.getline(name, line).strip()


def value_key(name, value):
    """An exact, hashable key for a value read into Python (floats by their hex form: -0.0 and nan included)."""
    if name == "__bool__":
        return bool(value)
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, (bool, int)):
        return (type(value).__name__, value)
    return (type(value).__name__, repr(value))


def host_reason(name):
    if name == "backward":
        return ("Tensor.backward() runs autograd: the compiled forward's backward, then the rest of the call (an "
                "optimizer step) eagerly")
    if name == "retain_grad":
        return "Tensor.retain_grad() keeps a gradient the compiled backward does not give out (the rest of the call " \
               "runs eagerly)"
    if name in GEOMETRY:
        return f"Tensor.{name}() changes a tensor's shape in place (the rest of the call runs eagerly)"
    if name in ESCAPES:
        return f"Tensor.{name}() hands tensor memory to Python (the rest of the call runs eagerly)"
    return f"Tensor.{name}() reads a tensor value into Python (data-dependent control flow)"


@contextmanager
def watching(mode):
    """Report value reads and random draws to ``mode`` while the function runs (one session at a time)."""
    with _lock:
        originals = {name: getattr(Tensor, name) for name in WATCHED}
        original_rng = _random._rng

        def wrap(name, fn):
            def watched(self, *args, **kwargs):
                current = _session[-1] if _session else None
                if current is None or current.busy:
                    return fn(self, *args, **kwargs)
                return current.host_read(name, self, fn, args, kwargs)
            watched.__name__ = name
            return watched

        def rng(generator):
            if _session and not _session[-1].busy:
                _session[-1].random_draw()
            return original_rng(generator)

        # Reseeding (``manual_seed`` inside the function) changes what every later draw gives: as a draw outside the
        # ops, it makes the call rerun its Python each time, in order with the graph's deferred draws.
        reseeds = {name: getattr(Generator, name) for name in _RESEEDS}

        def reseeding(name, fn):
            def reseed(self, *args, **kwargs):
                if _session and not _session[-1].busy:
                    _session[-1].random_draw()
                return fn(self, *args, **kwargs)
            reseed.__name__ = name
            return reseed

        original_bump = Tensor._bump_version

        def bump(self, times=1):
            # A version bump outside every recorded op: memory written behind the dispatcher's back (an optimizer's
            # array-level update, a ``.data`` write). The graph holds no such write, so its replay would skip it.
            current = _session[-1] if _session else None
            if current is not None and not current.busy:
                hidden = getattr(current, "hidden_write", None)
                if hidden is not None:
                    hidden()
            return original_bump(self, times)

        def output(what):
            current = _session[-1] if _session else None
            if current is not None and not current.busy and hasattr(current, "python_output"):
                current.python_output(what)

        for name, fn in originals.items():
            setattr(Tensor, name, wrap(name, fn))
        Tensor._bump_version = bump
        _random._rng = rng
        for name, fn in reseeds.items():
            setattr(Generator, name, reseeding(name, fn))
        _session.append(mode)
        try:
            with noting_output(output):
                yield
        finally:
            _session.pop()
            Tensor._bump_version = original_bump
            _random._rng = original_rng
            for name, fn in reseeds.items():
                setattr(Generator, name, fn)
            for name, fn in originals.items():
                setattr(Tensor, name, fn)


class _ModeBase:
    """What the recorder and the replay share: running an op with the mode off, and swapping modes mid-call."""

    busy = False
    compiling = True  # ``jitorch.compiler.is_compiling()`` while a call is recorded or replayed

    def _run(self, fn, *args, **kwargs):
        active = bool(MODES) and MODES[-1] is self  # a flush after the call has no mode to lift
        if active:
            pop_mode()
        self.busy = True
        try:
            return fn(*args, **kwargs)
        finally:
            self.busy = False
            if active:
                push_mode(self)

    def become(self, other):
        """Hand the rest of the call to ``other`` (the replay switching to recording a new branch)."""
        MODES[MODES.index(self)] = other
        _session[_session.index(self)] = other
