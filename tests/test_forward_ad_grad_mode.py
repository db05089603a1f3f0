"""Forward-mode AD under grad-mode switches, against torch: ``no_grad`` and ``set_grad_enabled(False)`` do not stop
tangents (torch's forward AD ignores grad mode), ``inference_mode`` does."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as th_fwad

import jitorch
import jitorch.autograd.forward_ad as jt_fwad
from jitorch._dispatch import apply, apply_inplace
from jitorch._dispatch_modes import MODES, pop_mode, push_mode, run_below

from helpers import assert_same

RNG = np.random.default_rng(11)
P = RNG.standard_normal(5).astype(np.float32)
T1 = RNG.standard_normal(5).astype(np.float32)
Q = RNG.standard_normal(5).astype(np.float32)

FW = {jitorch: jt_fwad, torch: th_fwad}
SWITCHES = {
    "no_grad": lambda T: T.no_grad(),
    "set_grad_enabled_false": lambda T: T.set_grad_enabled(False),
    "inference_mode": lambda T: T.inference_mode(),
}


def _tangent(T, t):
    tangent = FW[T].unpack_dual(t).tangent
    return None if tangent is None else tangent.detach()


def _ops_under(T, switch):
    fw = FW[T]
    with fw.dual_level():
        x = fw.make_dual(T.tensor(P), T.tensor(T1))
        q = T.tensor(Q)
        with SWITCHES[switch](T):
            y = x.sin() * q + x.exp()
            z = T.tanh(y) @ x
        w = y * 2 + x  # grad mode on again, on a tensor made with it off
        return [y.requires_grad, _tangent(T, y), _tangent(T, z), _tangent(T, w)]


@pytest.mark.parametrize("switch", list(SWITCHES))
def test_tangents_through_grad_mode_switches_match_torch(switch):
    jt, th = _ops_under(jitorch, switch), _ops_under(torch, switch)
    assert jt[0] is th[0] is False
    for a, b in zip(jt[1:], th[1:]):
        if b is None:
            assert a is None
        else:
            assert a is not None
            assert_same(a, b, atol=1e-5, rtol=1e-5)
    assert not MODES  # the level's mode is gone with it


def _inplace_under_no_grad(T):
    fw = FW[T]
    with fw.dual_level():
        x = fw.make_dual(T.tensor(P), T.tensor(T1))
        with T.no_grad():
            x.mul_(3.0)
            x.sin_()
            x.add_(T.tensor(Q) * x)
        out = x.cos()
        return [x.detach(), _tangent(T, x), _tangent(T, out)]


def test_inplace_ops_on_a_dual_under_no_grad_match_torch():
    for a, b in zip(_inplace_under_no_grad(jitorch), _inplace_under_no_grad(torch)):
        assert_same(a, b, atol=1e-5, rtol=1e-5)


def _primal_requiring_grad(T):
    fw = FW[T]
    a = T.tensor(P, requires_grad=True)
    with fw.dual_level():
        x = fw.make_dual(a, T.tensor(T1))
        with T.no_grad():
            y = x.exp() * 2
        return [y.requires_grad, _tangent(T, y)]


def test_no_grad_output_of_a_reverse_mode_primal_has_a_tangent_and_no_history():
    jt, th = _primal_requiring_grad(jitorch), _primal_requiring_grad(torch)
    assert jt[0] is th[0] is False
    assert_same(jt[1], th[1], atol=1e-5, rtol=1e-5)


def test_func_jvp_inside_no_grad_matches_torch():
    def f(T):
        with T.no_grad():
            return T.func.jvp(lambda v: (v.sin() * v).sum(), (T.tensor(P),), (T.tensor(T1),))

    for a, b in zip(f(jitorch), f(torch)):
        assert_same(a, b, atol=1e-5, rtol=1e-5)


def _switch_calls(T):
    fw = FW[T]

    @T.no_grad()
    def scaled(v):
        return v * T.tensor(Q)

    with T.no_grad(), fw.dual_level():  # the level opens with grad mode already off
        x = fw.make_dual(T.tensor(P), T.tensor(T1))
        y = x.cos() * T.tensor(Q)
        T.set_grad_enabled(True)  # plain calls, not ``with``: they switch at once
        z = y.exp() + x
        T.set_grad_enabled(False)
        w = z * x
        T.set_grad_enabled(True)
        u = scaled(w.sin())
        T.set_grad_enabled(False)
        return [_tangent(T, t) for t in (y, z, w, u)]


def test_level_opened_under_no_grad_and_plain_set_grad_enabled_calls_match_torch():
    for a, b in zip(_switch_calls(jitorch), _switch_calls(torch)):
        assert_same(a, b, atol=1e-5, rtol=1e-5)
    assert not MODES


def test_level_mode_is_on_the_stack_only_while_grad_mode_is_off_or_shadows_live():
    # Ops in a level with grad mode on and nothing shadowed take the dispatcher's fast path (no mode).
    with jt_fwad.dual_level():
        x = jt_fwad.make_dual(jitorch.tensor(P), jitorch.tensor(T1))
        y = x * 2
        assert not MODES
        with jitorch.no_grad():
            assert len(MODES) == 1
            s = x * 3
        assert len(MODES) == 1  # ``s`` has a shadow: ops on it must keep extending it
        assert_same(jt_fwad.unpack_dual(s + y).tangent.detach(), torch.tensor(T1) * 5, atol=1e-6, rtol=1e-6)
        del s
        y + 1  # the first op after the last shadowed tensor died takes the mode off
        assert not MODES


class _PassThrough:
    """A mode pushed after the level opened, as a tracer is: the level's mode must go beneath it."""

    def dispatch(self, op, args, attrs):
        return run_below(self, apply, op, *args, **attrs)

    def dispatch_inplace(self, op, self_tensor, args, attrs):
        return run_below(self, apply_inplace, op, self_tensor, *args, **attrs)


def test_level_mode_goes_beneath_modes_pushed_after_its_level_opened():
    outer = _PassThrough()
    with jt_fwad.dual_level():
        x = jt_fwad.make_dual(jitorch.tensor(P), jitorch.tensor(T1))
        push_mode(outer)
        try:
            with jitorch.no_grad():
                assert MODES[-1] is outer and len(MODES) == 2
                y = x.exp()
                y.mul_(2.0)
        finally:
            pop_mode()
        tangent = jt_fwad.unpack_dual(y).tangent.detach()
    assert_same(tangent, torch.tensor(T1) * torch.tensor(P).exp() * 2, atol=1e-5, rtol=1e-5)
    assert not MODES
