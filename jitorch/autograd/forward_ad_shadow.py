"""Tangents of ops run with grad mode off inside a dual level (forward AD ignores ``no_grad`` in torch).

`forward_ad.py` takes tangents through reverse-mode history, which ``no_grad`` does not record. While a level is open
this mode sees the ops it can act on: when grad mode is off (not inference mode, where torch has no tangents either)
and an input requires grad or has a shadow, the op also runs with grad mode on over the inputs' shadows, and that
recorded result becomes the output's *shadow*: the tensor `unpack_dual` differentiates in the output's place. The
output itself is what ``no_grad`` makes (no history, ``requires_grad`` False). Ops on a shadowed tensor keep extending
shadows with grad mode on too, so ``y`` made under ``no_grad`` still carries its tangent into later ops; an in-place
op on a shadowed or dual tensor replaces its shadow by the op's out-of-place result.

The mode sits on the dispatcher's stack only while it can act (grad mode off, or shadows alive): the grad-mode
switches call `sync_shadow_modes`, so ops in a level with grad mode on and no shadows keep the dispatcher's fast path.

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

from .._dispatch_modes import MODES, run_below
from .._grad_state import GradState
from .._tensor import Tensor
from .grad_mode import SWITCH_HOOKS

__all__ = ["ShadowMode", "forget_shadows", "shadow_of_output", "sync_shadow_modes"]

_LEVEL_MODES: list = []  # the open levels' modes, outermost first, on the stack or not
_BUSY = [0]  # ShadowMode.dispatch calls under way: their mode is off the stack in `run_below`, leave the stack alone


class ShadowMode:
    """The mode one open dual level pushes; ``shadows`` maps ``id(tensor)`` to ``(weakref(tensor), shadow)``."""

    def __init__(self, level, floor):
        self.shadows = {}
        self.level = level
        self.floor = floor  # how many other modes were beneath it when its level opened: its place on the stack
        self.pushed = False

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
        _BUSY[0] += 1
        try:
            return self._dispatch(op, args, attrs)
        finally:
            _BUSY[0] -= 1
            if not self.shadows and GradState.enabled:  # the last shadowed tensor died: back to the fast path
                sync_shadow_modes()

    def dispatch_inplace(self, op, self_tensor, args, attrs):
        _BUSY[0] += 1
        try:
            return self._dispatch_inplace(op, self_tensor, args, attrs)
        finally:
            _BUSY[0] -= 1

    def _dispatch(self, op, args, attrs):
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

    def _dispatch_inplace(self, op, self_tensor, args, attrs):
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
    """Make the `ShadowMode` of a newly opened dual level and return it; it goes on the stack once it can act."""
    floor = sum(type(m) is not ShadowMode for m in MODES)
    mode = ShadowMode(len(_LEVEL_MODES), floor)
    _LEVEL_MODES.append(mode)
    if len(_LEVEL_MODES) == 1:
        SWITCH_HOOKS.append(sync_shadow_modes)
    sync_shadow_modes()
    return mode


def pop_shadow_mode(mode):
    """Forget ``mode`` (a dual level closed), taking it off the stack wherever it sits."""
    if mode.pushed:
        _take_off(mode)
    if mode in _LEVEL_MODES:
        _LEVEL_MODES.remove(mode)
    if not _LEVEL_MODES and sync_shadow_modes in SWITCH_HOOKS:
        SWITCH_HOOKS.remove(sync_shadow_modes)


def sync_shadow_modes():
    """Put each open level's mode on the stack while it can act (grad mode off, or shadows alive), off otherwise.

    Called after each grad-mode switch while a level is open, so the cost outside levels stays zero.
    """
    if _BUSY[0]:
        return
    inference, enabled = GradState.inference, GradState.enabled
    for mode in _LEVEL_MODES:
        wanted = not inference and (not enabled or bool(mode.shadows))
        if wanted and not mode.pushed:
            _put_on(mode)
        elif mode.pushed and not wanted:
            _take_off(mode)


def _put_on(mode):
    # At the place it had when its level opened: above the modes that were there, below those pushed since
    # (a tracer's `run_below` pops the innermost mode, which must still be the tracer).
    seen = i = 0
    while i < len(MODES):
        m = MODES[i]
        if type(m) is ShadowMode:
            if m.level > mode.level and seen >= mode.floor:
                break
        elif seen >= mode.floor:
            break
        else:
            seen += 1
        i += 1
    MODES.insert(i, mode)
    mode.pushed = True


def _take_off(mode):
    for i in range(len(MODES) - 1, -1, -1):
        if MODES[i] is mode:
            del MODES[i]
            break
    mode.pushed = False


def forget_shadows(tensors):
    """Drop the shadows of ``tensors`` (a custom Function's outputs: their tangent is the Function's ``jvp``, not
    that of the ops its forward ran with grad mode off)."""
    for mode in _LEVEL_MODES:
        for t in tensors:
            entry = mode.shadows.get(id(t))
            if entry is not None and entry[0]() is t:
                del mode.shadows[id(t)]


def shadow_of_output(t):
    """The shadow the innermost open level keeps for ``t``, or None."""
    return _LEVEL_MODES[-1]._shadow(t) if _LEVEL_MODES else None
