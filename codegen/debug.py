"""``JITORCH_DEBUG``: 1 logs each compile and its time, 2 also prints the generated source (to stderr).

The level is read on every call, so it can be changed while a program runs (and by tests).

>>> import os
>>> os.environ["JITORCH_DEBUG"] = "0"
>>> level()
0
"""
from __future__ import annotations

import os
import sys

__all__ = ["level", "log", "log_compile", "log_source"]


def level() -> int:
    """The current ``JITORCH_DEBUG`` level; 0 when unset or not a number.

    >>> isinstance(level(), int)
    True
    """
    try:
        return int(os.environ.get("JITORCH_DEBUG", "0"))
    except ValueError:
        return 0


def log(message: str, at_level: int = 1) -> None:
    """Print ``message`` to stderr when the debug level is at least ``at_level``.

    >>> log("not shown unless JITORCH_DEBUG >= 1")
    """
    if level() >= at_level:
        print(f"[jitorch] {message}", file=sys.stderr)


def log_compile(backend: str, what: str, seconds: float) -> None:
    """Level 1: one line per compile, e.g. ``[jitorch] nvrtc compile add [sm_80]: 41.2 ms``.

    >>> log_compile("nvrtc", "add [sm_80]", 0.0412)
    """
    log(f"{backend} compile {what}: {seconds * 1e3:.1f} ms")


def log_source(name: str, source: str) -> None:
    """Level 2: the generated source of ``name``, with line numbers that match compiler messages.

    >>> log_source("k", "int x;")
    """
    if level() >= 2:
        numbered = "\n".join(f"{i:4d} | {line}" for i, line in enumerate(source.splitlines(), start=1))
        print(f"[jitorch] source of {name}:\n{numbered}", file=sys.stderr)
