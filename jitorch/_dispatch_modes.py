"""The mode stack of the dispatcher: interpreters of ops (tracers, capture recorders, autocast) that see each op
before it runs eagerly. `jitorch._dispatch.apply` hands an op to the innermost one; a mode runs ops beneath itself
with `run_below`.

>>> from jitorch._dispatch_modes import MODES, is_compiling
>>> MODES, is_compiling()
([], False)
"""
from __future__ import annotations

__all__ = ["MODES", "push_mode", "pop_mode", "run_below", "is_compiling"]

# Active interpreters of ops (tracers, capture recorders); the innermost one sees each op first.
MODES: list = []


def is_compiling():
    """Whether ``jitorch.compile`` is tracing, recording or replaying the code running now (``torch.compiler.
    is_compiling``): code may choose a form the compiler handles, as a checkpointed block does."""
    return any(getattr(m, "compiling", False) for m in MODES)


def push_mode(mode):
    MODES.append(mode)


def pop_mode():
    return MODES.pop()


def run_below(mode, fn, *args, **kwargs):
    """Call ``fn`` with ``mode`` (the innermost) popped, so the ops it runs reach the modes beneath; then restore it.

    Modes assign it as a method: ``_run = run_below`` gives ``self._run(apply, op, *args)``.
    """
    pop_mode()
    try:
        return fn(*args, **kwargs)
    finally:
        push_mode(mode)
