"""Tangents of ops run with grad mode off inside a dual level (forward AD ignores ``no_grad`` in torch).

`forward_ad.py` takes tangents through reverse-mode history, which ``no_grad`` does not record. While a level is open
this mode sees every op: when grad mode is off (not inference mode, where torch has no tangents either) and an input
requires grad or has a shadow, the op also runs with grad mode on over the inputs' shadows, and that recorded result
becomes the output's *shadow*: the tensor `unpack_dual` differentiates in the output's place. The output itself is
what ``no_grad`` makes (no history, ``requires_grad`` False). Ops on a shadowed tensor keep extending shadows with
grad mode on too, so ``y`` made under ``no_grad`` still carries its tangent into later ops; an in-place op on a
shadowed or dual tensor replaces its shadow by the op's out-of-place result.

>>> import jitorch
>>> import jitorch.autograd.forward_ad as fwAD
>>> with fwAD.dual_level():
...     x = fwAD.make_dual(jitorch.tensor([0.0, 1.0]), jitorch.tensor([1.0, 2.0]))
...     with jitorch.no_grad():
...         y = x * 3
...     fwAD.unpack_dual(y).tangent
tensor([3., 6.])
"""
from __future__ import annotations

import weakref

from .._dispatch_modes import MODES, push_mode, run_below
from .._grad_state import GradState
from .._tensor import Tensor

__all__ = ["ShadowMode", "shadow_of_output"]


class ShadowMode:
    """The mode one open dual level pushes; ``shadows`` maps ``id(tensor)`` to ``(weakref(tensor), shadow)``."""

    def __init__(self):
        self.shadows = {}

    def _shadow(self, t):
        entry = self.shadows.get(id(t))
        if entry is not None and entry[0]() is t:
            return entry[1]
        return None

    def _needs_shadow(self, tensors):
        if GradState.inference:
            return False
        off = not GradState.enabled
        for t in tensors:
            if self._shadow(t) is not None or (off and t._requires_grad):
                return True
        return False

    def _substituted(self, args):
        out = []
        for a in args:
            if isinstance(a, Tensor):
                s = self._shadow(a)
                out.append(a if s is None else s)
            elif type(a) in (list, tuple):
                out.append(type(a)(self._substituted(a)))
            else:
                out.append(a)
        return tuple(out)

    def _keep(self, outs, shadows):
        if isinstance(outs, Tensor):
            outs, shadows = (outs,), (shadows,)
        for o, s in zip(outs, shadows):
            if isinstance(o, Tensor) and isinstance(s, Tensor) and s.requires_grad:
                key = id(o)
                table = self.shadows
                self.shadows[key] = (weakref.ref(o, lambda _, key=key: table.pop(key, None)), s)

    def dispatch(self, op, args, attrs):
        from .._dispatch import apply

        out = run_below(self, apply, op, *args, **attrs)
        if self._needs_shadow(_tensors(args)):
            prev = GradState.enabled
            GradState.enabled = True
            try:
                shadow = run_below(self, apply, op, *self._substituted(args), **attrs)
            finally:
                GradState.enabled = prev
            self._keep(out, shadow)
        return out

    def dispatch_inplace(self, op, self_tensor, args, attrs):
        from .._dispatch import apply, apply_inplace

        shadow = None
        if self._needs_shadow((self_tensor, *_tensors(args))):
            prev = GradState.enabled
            GradState.enabled = True
            try:
                base = self._shadow(self_tensor)
                # A copy: the shadow's history must not save the tensor the in-place op is about to overwrite.
                base = run_below(self, self_tensor.clone) if base is None else base
                shadow = run_below(self, apply, op, base, *self._substituted(args), **attrs)
                if shadow.dtype != self_tensor.dtype:
                    shadow = run_below(self, shadow.to, self_tensor.dtype)
            finally:
                GradState.enabled = prev
        out = run_below(self, apply_inplace, op, self_tensor, *args, **attrs)
        if shadow is not None:
            self._keep(self_tensor, shadow)
        return out


def _tensors(args):
    found = []
    for a in args:
        if isinstance(a, Tensor):
            found.append(a)
        elif type(a) in (list, tuple):
            found.extend(_tensors(a))
    return found


def push_shadow_mode():
    """Push a new `ShadowMode` (a dual level opened) and return it."""
    mode = ShadowMode()
    push_mode(mode)
    return mode


def pop_shadow_mode(mode):
    """Remove ``mode`` from the mode stack (a dual level closed), wherever it sits."""
    for i in range(len(MODES) - 1, -1, -1):
        if MODES[i] is mode:
            del MODES[i]
            return


def shadow_of_output(t):
    """The shadow the innermost open level keeps for ``t``, or None."""
    for m in reversed(MODES):
        if type(m) is ShadowMode:
            return m._shadow(t)
    return None
