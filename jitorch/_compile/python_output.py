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

__all__ = ["noting_output"]

_lock = threading.RLock()


@contextmanager
def noting_output(note):
    """While inside, ``note(what)`` runs before each ``print()`` and each logging record a logger handles (records
    below the logger's level never reach ``Logger.handle``: no note, as nothing would be written)."""
    with _lock:
        original_print, original_handle = builtins.print, logging.Logger.handle

        def printing(*args, **kwargs):
            note("print()")
            return original_print(*args, **kwargs)

        def handle(self, record):
            note(f"logging ({self.name})")
            return original_handle(self, record)

        builtins.print, logging.Logger.handle = printing, handle
        try:
            yield
        finally:
            builtins.print, logging.Logger.handle = original_print, original_handle
