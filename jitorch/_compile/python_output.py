"""Output a compiled call writes from Python (``print``, ``logging``): a side effect no graph replays.

A whole-call graph runs the tensor work only, so a ``print`` in ``forward`` would show once, while tracing.
torch.compile breaks the graph there and prints on every call; here a trace that printed or logged makes the call's
entry rerun its Python on every call (`side_effects.replay_for_side_effects`), its tensor work deferred and compiled,
as for any other Python side effect.

>>> seen = []
>>> with noting_output(seen.append):
...     print("step")
step
>>> seen
['print()']
"""
from __future__ import annotations

import builtins
import logging
import threading
from contextlib import contextmanager

from .._thread_listeners import ThreadListeners

__all__ = ["noting_output"]

_lock = threading.Lock()
_listeners = ThreadListeners()  # the calls being traced or warmed up (other threads' output is not theirs)
_originals: dict = {}  # print and Logger.handle while the patch is in


def _note(what):
    note = _listeners.innermost()
    if note is not None:
        note(what)


def _print(*args, **kwargs):
    _note("print()")
    return _originals["print"](*args, **kwargs)


def _handle(self, record):
    _note(f"logging ({self.name})")
    return _originals["handle"](self, record)


@contextmanager
def noting_output(note):
    """While inside, ``note(what)`` runs before each ``print()`` and each logging record a logger handles (records
    below the logger's level never reach ``Logger.handle``: no note, as nothing would be written), for calls made
    by this thread. The patch is installed once for all listeners (no lock is held while the body runs: a trace
    may start threads that trace too)."""
    listening = _listeners.listening(note)
    with _lock:
        if not _listeners:
            _originals.update(print=builtins.print, handle=logging.Logger.handle)
            builtins.print, logging.Logger.handle = _print, _handle
        listening.__enter__()
    try:
        yield
    finally:
        with _lock:
            listening.__exit__(None, None, None)
            if not _listeners:
                # (a user's own replacement installed meanwhile stays)
                if builtins.print is _print:
                    builtins.print = _originals["print"]
                if logging.Logger.handle is _handle:
                    logging.Logger.handle = _originals["handle"]
