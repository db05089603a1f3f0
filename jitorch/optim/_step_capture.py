"""Optimizer steps and CPU graph capture: the step count kept in a 0-d tensor and advanced in place, and what a
capture of ``optimizer.step()`` records (the group options as guards) or refuses (a count read as a Python number).

>>> import jitorch
>>> step = jitorch.tensor(0.0)
>>> increment_step(step)
1.0
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from .._tensor import Tensor

__all__ = ["capturing", "guard_hyperparameters", "increment_step", "advance_step", "count_up", "refuse_capture",
           "adopting_capturable", "adopt_capturable", "noting_optimizer_steps", "STEPPED"]

_adopting = [0]
STEPPED = []  # while a reduce-overhead warm-up runs: a list of the optimizers stepped (`noting_optimizer_steps`)


@contextmanager
def noting_optimizer_steps():
    """Collect the optimizers whose ``step`` runs inside (`Optimizer` steps append themselves to ``STEPPED[-1]``):
    a reduce-overhead warm-up asks each whether a capture could replay it (``Optimizer._capture_refusal``)."""
    seen = []
    STEPPED.append(seen)
    try:
        yield seen
    finally:
        STEPPED.pop()


def capturing():
    """Whether a CPU graph is capturing (its mode records optimizer updates made of tensor ops)."""
    from .._dispatch import MODES

    return bool(MODES) and getattr(MODES[-1], "records_updates", False)


@contextmanager
def adopting_capturable():
    """While ``jitorch.compile(mode="reduce-overhead")`` captures a step: optimizers stepped in it become capturable
    (`adopt_capturable`), as torch.compile sets ``capturable=True`` on the groups of an optimizer it compiles. A
    capture the user makes (``jitorch.cpu.graph``) still refuses a non-capturable step, as CUDA graph capture does."""
    _adopting[0] += 1
    try:
        yield
    finally:
        _adopting[0] -= 1


def adopt_capturable(optimizer):
    """Inside `adopting_capturable`, while a CPU graph captures: set ``capturable=True`` on each group that has the
    option set False, so the step keeps its count in a tensor and replays advance it.

    >>> import jitorch
    >>> opt = jitorch.optim.Adam([jitorch.nn.Parameter(jitorch.ones(2))])
    >>> adopt_capturable(opt), opt.param_groups[0]["capturable"]  # not capturing: left alone
    (False, False)
    """
    if not (_adopting[0] and capturing()):
        return False
    groups = [g for g in optimizer.param_groups if g.get("capturable") is False]
    for group in groups:
        group["capturable"] = True
    if groups and "capturable" in optimizer.defaults:
        optimizer.defaults["capturable"] = True  # groups added later follow
    return bool(groups)


class _Memory:
    """A tensor hyperparameter's guard: equal while it is the same memory; shown with the value it held."""

    __slots__ = ("ident", "text")

    def __init__(self, t):
        self.ident = id(t._data)
        self.text = f"a tensor holding {t._data.reshape(-1)[:4].tolist()}" if t._data.size else "an empty tensor"

    def __eq__(self, other):
        return isinstance(other, _Memory) and other.ident == self.ident

    def __repr__(self):
        return self.text


def _plain(value):
    """A hyperparameter as a comparable Python value. A tensor one is read live by the captured steps (changed in
    place by a scheduler, it needs no new capture): only its memory must stay the same (the array the steps hold,
    so its id is not reused while the graph lives)."""
    if isinstance(value, Tensor):
        return _Memory(value)
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v) for v in value)
    return value


def guard_hyperparameters(optimizer):
    """While a CPU graph captures ``optimizer.step()``: every group option becomes a guard of the capture.

    The update reads them as Python numbers, so the recorded steps hold the values of this moment; the graph checks
    them before each replay (a scheduler changing ``lr`` must not be ignored silently).
    """
    from .._dispatch import MODES

    mode = MODES[-1]
    name = type(optimizer).__name__
    for i, group in enumerate(optimizer.param_groups):
        for key in group:
            if key != "params":
                mode.guard_value(f"{name}.param_groups[{i}][{key!r}]",
                                 lambda group=group, key=key: _plain(group.get(key)), _plain(group[key]))


def increment_step(step_t):
    """``state['step'] += 1`` in place (a 0-d tensor, as in PyTorch); returns the new count as a Python float.

    For updates that read the count as a Python number (non-capturable Adam, Adagrad's lr decay): a CPU graph
    would replay the captured number forever, so capturing one ends the capture with an error.
    """
    if capturing():
        refuse_capture("CPU graph capture of an optimizer step: this optimizer's step count is a Python number in "
                       "its update, which replay would not advance; construct the optimizer with capturable=True "
                       "(where it has one), or step it outside the captured region")
    count_up(step_t)
    return float(step_t._data)


def advance_step(step_t):
    """``state['step'] += 1`` for updates that never read the count in Python (capturable ones, RMSprop, Adadelta).

    While a CPU graph captures, the increment is a recorded op, so every replay advances the count.
    """
    if capturing():
        step_t.add_(1)
        return
    count_up(step_t)


def count_up(step_t):
    """``step_t += 1`` on its array, the version bumped: a host count through its item (``+= 1`` on a 0-d NumPy
    array costs 1.4 us, this 0.2, with the same rounding in its dtype); device and meta arrays in place."""
    count = step_t._data
    if type(count) is np.ndarray:
        count[()] = count[()] + 1
    else:
        count += 1
    step_t._bump_version()


def refuse_capture(message):
    """End the CPU graph capture in progress, then raise ``RuntimeError(message)`` (an uncapturable step)."""
    from .._dispatch import MODES

    mode = MODES[-1]
    if hasattr(mode, "fail"):
        mode.fail(message)
    raise RuntimeError(message)
