"""Optimizer steps and CPU graph capture: the step count kept in a 0-d tensor and advanced in place, and what a
capture of ``optimizer.step()`` records (the group options as guards) or refuses (a count read as a Python number).

>>> import jitorch
>>> step = jitorch.tensor(0.0)
>>> increment_step(step)
1.0
"""
from __future__ import annotations

from contextlib import contextmanager
from functools import partial

import numpy as np

from .._tensor import Tensor
from .._thread_listeners import ThreadListeners

__all__ = ["capturing", "guard_hyperparameters", "increment_step", "advance_step", "count_up", "refuse_capture",
           "adopting_capturable", "adopt_capturable", "factor_step", "noting_optimizer_steps", "note_step", "STEPPED"]

_adopting: list = []  # per active `adopting_capturable`: the dicts it set capturable=True in (restored after)
STEPPED = ThreadListeners()  # while a reduce-overhead warm-up runs: the optimizers its thread stepped


def noting_optimizer_steps():
    """Collect the optimizers whose ``step`` runs inside, on this thread (`note_step`): a reduce-overhead warm-up
    asks each whether a capture could replay it (``Optimizer._capture_refusal``)."""
    return STEPPED.listening([])


def note_step(optimizer):
    """An optimizer's ``step`` is running: tell the warm-up of this thread, if one is noting (`STEPPED`)."""
    seen = STEPPED.innermost()
    if seen is not None and optimizer not in seen:
        seen.append(optimizer)


def capturing():
    """Whether a CPU graph is capturing (its mode records optimizer updates made of tensor ops)."""
    from .._dispatch import MODES

    return bool(MODES) and getattr(MODES[-1], "records_updates", False)


@contextmanager
def adopting_capturable():
    """While ``jitorch.compile(mode="reduce-overhead")`` captures a step: optimizers stepped in it take their
    capturable form (`adopt_capturable`) for the capture, as torch.compile makes a CUDA optimizer capturable; the
    flag is restored after it (a saved state dict keeps the user's setting). A capture the user makes
    (``jitorch.cpu.graph``) still refuses a non-capturable step, as CUDA graph capture does."""
    changed = []
    _adopting.append(changed)
    try:
        yield
    finally:
        _adopting.remove(changed)
        for options in changed:  # the captured ops keep the capturable form; state dicts keep the user's flag
            options["capturable"] = False


def adopt_capturable(optimizer):
    """Inside `adopting_capturable`, while a CPU graph captures: set ``capturable=True`` on each group that has the
    option set False, so the step keeps its count in a tensor and replays advance it.

    >>> import jitorch
    >>> opt = jitorch.optim.Adam([jitorch.nn.Parameter(jitorch.ones(2))])
    >>> adopt_capturable(opt), opt.param_groups[0]["capturable"]  # not capturing: left alone
    (False, False)
    """
    if not (_adopting and capturing()):
        return False
    groups = [g for g in optimizer.param_groups if g.get("capturable") is False]
    for group in groups:
        group["capturable"] = True
    _adopting[-1].extend(groups)
    return bool(groups)


def factor_step(step_t):
    """The count a captured update computes its step-dependent factors from: in float64 for a host count (a float32
    ``1 - 0.999 ** step`` loses digits to cancellation, RAdam's rectification 1% at step 6; eager updates use
    Python floats), the count itself otherwise."""
    return step_t.double() if type(step_t._data) is np.ndarray and step_t.dtype.itemsize < 8 else step_t


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


_SCALARS = (bool, int, float, complex, str, type(None))


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
            # (not capturable: the captured ops keep their form whatever the flag says later, and an adopted
            # capture sets it only while capturing)
            if key not in ("params", "capturable"):
                value = group[key]
                # A number read straight from the dict: every replay reads every option (a C call, not a lambda).
                read = partial(group.get, key) if type(value) in _SCALARS else \
                    (lambda group=group, key=key: _plain(group.get(key)))
                mode.guard_value(f"{name}.param_groups[{i}][{key!r}]", read, _plain(value))


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
