"""Listeners scoped to one thread's call: a traced or warmed-up call listens for what its own code does (prints, an
optimizer step), while other threads (a progress bar, a logger, a worker compiling its own call) go unheard.

>>> heard = []
>>> ears = ThreadListeners()
>>> with ears.listening(heard.append):
...     ears.innermost()("step")
>>> heard, bool(ears), ears.innermost()
(['step'], False, None)
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

__all__ = ["ThreadListeners"]


class ThreadListeners:
    """A stack of ``(thread, listener)``; ``innermost()`` is this thread's latest listener, or None. Truthy while
    any thread listens (a one-attribute test on hot paths)."""

    def __init__(self):
        self._entries = []

    def __bool__(self):
        return bool(self._entries)

    @contextmanager
    def listening(self, listener):
        entry = (threading.get_ident(), listener)
        self._entries.append(entry)
        try:
            yield listener
        finally:
            self._entries.remove(entry)

    def innermost(self):
        me = threading.get_ident()
        for thread, listener in reversed(self._entries):
            if thread == me:
                return listener
        return None
