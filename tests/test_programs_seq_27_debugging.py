"""Debugging aids research scripts lean on, against torch: anomaly mode's forward-call traceback on a failing
backward, and the loss size-mismatch warning pointing at the caller's line."""
from __future__ import annotations

import warnings

import pytest
import torch

import jitorch
import jitorch.nn.functional as JF


def _anomaly_warnings(lib, make_loss):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with lib.autograd.detect_anomaly():
            loss = make_loss(lib)
            with pytest.raises(RuntimeError) as err:
                loss.backward()
    return [str(w.message) for w in caught if "Error detected" in str(w.message)], str(err.value)


def _sqrt_of_zero(lib):
    z = lib.tensor([0.0, 1.0], requires_grad=True)
    y = z.sqrt()  # the forward line the warning must show
    return (y * 0 + z).sum()


def test_anomaly_warns_with_the_forward_traceback_like_torch():
    got, got_err = _anomaly_warnings(jitorch, _sqrt_of_zero)
    want, want_err = _anomaly_warnings(torch, _sqrt_of_zero)
    assert got_err == want_err
    assert len(got) == len(want) == 1
    for message in (got[0], want[0]):
        assert message.startswith("Error detected in SqrtBackward0. Traceback of forward call that caused the error:")
        assert "y = z.sqrt()  # the forward line the warning must show" in message
        assert "in _sqrt_of_zero" in message
    assert "jitorch/" not in got[0].replace("jitorch/tests", "")  # no frames of jitorch's own dispatch


class _Explodes:
    """A custom Function whose backward raises: the warning names it and shows where it was applied."""

    @staticmethod
    def make(lib):
        class Explode(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                raise ValueError("boom in backward")
        return Explode


def _custom_function_loss(lib):
    x = lib.ones(3, requires_grad=True)
    out = _Explodes.make(lib).apply(x)  # applied here
    return out.exp().sum()


def test_anomaly_warns_for_any_error_in_a_backward_like_torch():
    for lib in (jitorch, torch):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with lib.autograd.detect_anomaly(check_nan=False):
                loss = _custom_function_loss(lib)
                with pytest.raises(ValueError, match="boom in backward"):
                    loss.backward()
        messages = [str(w.message) for w in caught if "Error detected" in str(w.message)]
        assert len(messages) == 1, (lib.__name__, messages)
        assert messages[0].startswith("Error detected in ExplodeBackward")
        assert "out = _Explodes.make(lib).apply(x)  # applied here" in messages[0]


def test_anomaly_keeps_stacks_only_while_enabled():
    for lib in (jitorch, torch):
        x = lib.ones(2, requires_grad=True)
        assert "traceback_" not in (x * 2).grad_fn.metadata
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with lib.autograd.detect_anomaly():
                y = x.exp()
        stack = y.grad_fn.metadata["traceback_"]
        assert isinstance(stack, list) and all(isinstance(s, str) for s in stack)
        assert "y = x.exp()" in stack[-1], (lib.__name__, stack[-1])
        assert "traceback_" not in (x * 3).grad_fn.metadata
        y.sum().backward()  # no error: no warning, gradients as usual
        assert x.grad.tolist() == pytest.approx([2.718281828] * 2)


def test_anomaly_mode_leaves_checkpoint_regions_working():
    from jitorch.utils.checkpoint import checkpoint
    lin = jitorch.nn.Linear(3, 3)
    x = jitorch.randn(2, 3, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with jitorch.autograd.detect_anomaly():
            checkpoint(lambda t: lin(t).tanh(), x, use_reentrant=False).sum().backward()
    expected = jitorch.autograd.grad(lin(x).tanh().sum(), x)[0]
    assert jitorch.allclose(x.grad, expected)
    from jitorch.autograd import node_recording
    assert node_recording._recording == [] and not node_recording.forward_stacks.on


@pytest.mark.parametrize("call", [
    lambda F, nn, a, b: F.mse_loss(a, b),
    lambda F, nn, a, b: F.l1_loss(a, b, reduction="sum"),
    lambda F, nn, a, b: F.smooth_l1_loss(a, b),
    lambda F, nn, a, b: F.huber_loss(a, b),
])
def test_loss_size_warning_points_at_the_callers_line(call):
    for lib, F in ((jitorch, JF), (torch, torch.nn.functional)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = call(F, lib.nn, lib.zeros(3, 1), lib.ones(3, 3))
        sized = [w for w in caught if "different to the input size" in str(w.message)]
        assert len(sized) == 1, lib.__name__
        assert sized[0].filename == __file__, (lib.__name__, sized[0].filename)
        assert "Size([3, 3])" in str(sized[0].message) and "Size([3, 1])" in str(sized[0].message)
        assert float(value) > 0


def test_loss_module_size_warning_points_outside_jitorch():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jitorch.nn.MSELoss()(jitorch.zeros(3, 1), jitorch.ones(3, 3))
    sized = [w for w in caught if "different to the input size" in str(w.message)]
    assert len(sized) == 1 and sized[0].filename == __file__
