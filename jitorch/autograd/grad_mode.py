"""Grad-mode switches: ``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``.

Each works as a context manager and as a decorator.

>>> import jitorch
>>> x = jitorch.ones(2, requires_grad=True)
>>> with jitorch.no_grad():
...     y = x * 2
>>> y.requires_grad
False
"""
from __future__ import annotations

import functools
import inspect

from .._grad_state import GradState

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled",
           "is_inference_mode_enabled"]

# Called after every switch while non-empty: an open forward-AD level keeps its mode on the dispatcher's stack only
# while grad mode is off (`forward_ad_shadow.sync_shadow_modes`); empty outside levels, so switching costs nothing more.
SWITCH_HOOKS: list = []




def is_grad_enabled() -> bool:
    return GradState.enabled


def is_inference_mode_enabled() -> bool:
    return GradState.inference


class _GradModeContext:
    """Base of the switches: subclasses set ``_target`` (the grad mode inside)."""

    _target = True

    def __enter__(self):
        self._prev = (GradState.enabled, GradState.inference)
        GradState.enabled = self._target
        if SWITCH_HOOKS:
            SWITCH_HOOKS[0]()
        return self

    def __exit__(self, *exc):
        GradState.enabled, GradState.inference = self._prev
        if SWITCH_HOOKS:
            SWITCH_HOOKS[0]()
        return False

    def __call__(self, fn):
        if inspect.isclass(fn):
            raise TypeError(f"{type(self).__name__} cannot decorate a class; decorate its methods")
        make = self.clone

        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def gen_wrapper(*args, **kwargs):
                # Every resumption of the generator runs under the mode; its return value passes through.
                gen = fn(*args, **kwargs)
                try:
                    with make():
                        response = gen.send(None)
                    while True:
                        try:
                            request = yield response
                        except GeneratorExit:
                            with make():
                                gen.close()
                            raise
                        except BaseException as e:
                            with make():
                                response = gen.throw(e)
                        else:
                            with make():
                                response = gen.send(request)
                except StopIteration as stop:
                    return stop.value
            return gen_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with make():
                return fn(*args, **kwargs)
        return wrapper

    def clone(self):
        return type(self)()


class _NoArgumentContext(_GradModeContext):
    """A switch without arguments, which also decorates without parentheses (``@no_grad``), as torch's."""

    def __new__(cls, orig_func=None):
        self = super().__new__(cls)
        return self(orig_func) if callable(orig_func) else self  # (a function: Python skips __init__)

    def __init__(self, orig_func=None):
        pass


class no_grad(_NoArgumentContext):
    """Disable gradient recording inside the block or the decorated function."""

    _target = False


class enable_grad(_NoArgumentContext):
    """Enable gradient recording inside ``no_grad``."""

    _target = True


class set_grad_enabled(_GradModeContext):
    """``set_grad_enabled(mode)``: applies at once (like PyTorch) and restores on exit when used with ``with``."""

    def __init__(self, mode: bool):
        self._target = bool(mode)
        self._prev = (GradState.enabled, GradState.inference)
        GradState.enabled = self._target
        if SWITCH_HOOKS:
            SWITCH_HOOKS[0]()

    def __enter__(self):
        return self

    def __call__(self, fn):
        # Used as a decorator: the mode applies inside calls only, so undo the immediate switch.
        GradState.enabled, GradState.inference = self._prev
        if SWITCH_HOOKS:
            SWITCH_HOOKS[0]()
        return super().__call__(fn)

    def clone(self):
        prev = (GradState.enabled, GradState.inference)
        ctx = set_grad_enabled(self._target)
        ctx._prev = prev
        return ctx


class inference_mode(_GradModeContext):
    """Like ``no_grad``; tensors made inside never record history (``@inference_mode`` with or without
    parentheses, as torch)."""

    def __new__(cls, mode=True):
        self = super().__new__(cls)
        if callable(mode):  # the bare decorator: ``mode`` is the function (a function: Python skips __init__)
            self.__init__(True)
            return self(mode)
        return self

    def __init__(self, mode: bool = True):
        self.mode = bool(mode)
        self._target = not self.mode

    def __enter__(self):
        super().__enter__()
        GradState.inference = self.mode
        if SWITCH_HOOKS:
            SWITCH_HOOKS[0]()
        return self

    def clone(self):
        return inference_mode(self.mode)


_multithreading = [True]


def is_multithreading_enabled():
    """Whether backward may use several threads (a setting only: jitorch's engine runs each backward on the calling
    thread; its kernels use jitorch's own threads either way)."""
    return _multithreading[0]


class set_multithreading_enabled:
    """``torch.autograd.set_multithreading_enabled(mode)``: records the setting (see `is_multithreading_enabled`),
    restored on exit when used with ``with``.

    >>> with set_multithreading_enabled(False):
    ...     is_multithreading_enabled()
    False
    """

    def __init__(self, mode: bool):
        self._prev, _multithreading[0] = _multithreading[0], bool(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _multithreading[0] = self._prev
        return False

    def __call__(self, fn):
        # As a decorator: the setting applies inside calls only.
        mode, _multithreading[0] = _multithreading[0], self._prev

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_multithreading_enabled(mode):
                return fn(*args, **kwargs)
        return wrapper
