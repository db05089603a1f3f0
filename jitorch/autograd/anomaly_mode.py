"""Anomaly detection (``torch.autograd.detect_anomaly`` / ``set_detect_anomaly``): while enabled with
``check_nan``, a backward function that returns a NaN gradient raises, naming the function, as in torch. Nodes
recorded while it is on keep their forward call's stack (``node.metadata["traceback_"]``); a backward function that
raises first warns "Error detected in ..." with that stack, as torch does.

>>> import warnings; warnings.simplefilter("ignore", UserWarning)
>>> import jitorch
>>> x = jitorch.tensor([-1.0], requires_grad=True)
>>> with jitorch.autograd.detect_anomaly():
...     x.sqrt().sum().backward()
Traceback (most recent call last):
RuntimeError: Function 'SqrtBackward0' returned nan values in its 0th output.
"""
from __future__ import annotations

import warnings

from .node_recording import set_forward_stacks

__all__ = ["detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled", "is_anomaly_check_nan_enabled",
           "set_anomaly_enabled"]


class AnomalyState:
    """Read by the backward engine after each node (class attributes: a cheap read)."""

    enabled = False
    check_nan = True


def is_anomaly_enabled():
    return AnomalyState.enabled


def is_anomaly_check_nan_enabled():
    return AnomalyState.check_nan


def set_anomaly_enabled(enabled, check_nan=True):
    AnomalyState.enabled, AnomalyState.check_nan = bool(enabled), bool(check_nan)
    set_forward_stacks(enabled)


def warn_forward_stack(node):
    """torch's warning when ``node``'s backward raises in anomaly mode: the stack of the forward call behind it."""
    from .._stat_checks import warn_at_caller  # (imports the dispatcher, which imports autograd)

    stack = (node.__dict__.get("_metadata") or {}).get("traceback_")
    if stack:
        warn_at_caller(f"Error detected in {node.name()}. Traceback of forward call that caused the error:\n"
                       + "".join(stack))


def check_gradients(node, grads):
    """Raise when ``grads`` (a backward function's outputs) hold a NaN; called only while anomaly mode is on."""
    if not AnomalyState.check_nan:
        return
    for i, g in enumerate(grads):
        if g is not None and g.is_sparse:  # a sparse gradient: its values hold the numbers
            g = g._values()
        if g is not None and g._data.dtype.kind in "fc" and bool((g._data != g._data).any()):
            raise RuntimeError(f"Function '{node.name()}' returned nan values in its {i}th output.")


class detect_anomaly:
    """Context manager and decorator enabling anomaly detection inside (``check_nan``: NaN gradients raise)."""

    def __init__(self, check_nan=True):
        self.prev = is_anomaly_enabled()
        self.check_nan = check_nan
        self.prev_check_nan = is_anomaly_check_nan_enabled()
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and should only be "
                      "enabled for debugging.", stacklevel=2)

    def __enter__(self):
        set_anomaly_enabled(True, self.check_nan)

    def __exit__(self, *args):
        set_anomaly_enabled(self.prev, self.prev_check_nan)

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(self.check_nan):
                return fn(*args, **kwargs)
        return wrapper


class set_detect_anomaly:
    """``set_detect_anomaly(mode)`` applies at once and, used with ``with``, restores the previous mode on exit."""

    def __init__(self, mode, check_nan=True):
        self.prev = is_anomaly_enabled()
        self.prev_check_nan = is_anomaly_check_nan_enabled()
        set_anomaly_enabled(mode, check_nan)

    def __enter__(self):
        return None

    def __exit__(self, *args):
        set_anomaly_enabled(self.prev, self.prev_check_nan)
