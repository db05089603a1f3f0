"""``torch.autograd.Variable`` as pre-0.4 research code still calls it (``repackage_hidden``, ``volatile=True``),
against torch: a detached tensor sharing the values, ``isinstance(t, Variable)`` for every tensor, torch's
warning and errors."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch


@pytest.mark.parametrize("lib", [jitorch, torch], ids=["jitorch", "torch"])
def test_variable_detaches_and_shares_values(lib):
    x = lib.ones(3, requires_grad=True)
    y = x * 2
    v = lib.autograd.Variable(y)
    assert type(v) is lib.Tensor and not v.requires_grad and v.grad_fn is None and v.is_leaf
    with lib.no_grad():
        y[0] = 7.0
    assert v.tolist() == [7.0, 2.0, 2.0]  # one storage, as detach()
    w = lib.autograd.Variable(lib.zeros(2), requires_grad=True)
    assert w.requires_grad and w.is_leaf
    (w * 3).sum().backward()
    assert w.grad.tolist() == [3.0, 3.0]
    positional = lib.autograd.Variable(lib.zeros(2), True)
    assert positional.requires_grad


@pytest.mark.parametrize("lib", [jitorch, torch], ids=["jitorch", "torch"])
def test_variable_isinstance_and_empty(lib):
    Variable = lib.autograd.Variable
    assert isinstance(lib.ones(2), Variable) and isinstance(lib.nn.Parameter(lib.ones(1)), Variable)
    assert not isinstance(np.ones(2), Variable) and not isinstance(2.0, Variable)
    empty = Variable()
    assert tuple(empty.shape) == (0,) and str(empty.dtype).endswith("float32")
    assert hasattr(Variable._execution_engine, "queue_callback")


@pytest.mark.parametrize("lib", [jitorch, torch], ids=["jitorch", "torch"])
def test_variable_volatile_warns_at_the_caller_and_errors_like_torch(lib):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        v = lib.autograd.Variable(lib.ones(2), volatile=True)
    assert not v.requires_grad
    assert [str(w.message) for w in caught] == [
        "volatile was removed and now has no effect. Use `with torch.no_grad():` instead."]
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="Variable can't be volatile and require_grad at the same time!"):
            lib.autograd.Variable(lib.ones(2), requires_grad=True, volatile=True)
    with pytest.raises(TypeError, match="Variable data has to be a tensor, but got list"):
        lib.autograd.Variable([1.0, 2.0])
    with pytest.raises(RuntimeError, match="floating point and complex dtype"):
        lib.autograd.Variable(lib.ones(2, dtype=lib.int64), requires_grad=True)


def _legacy_lm_loss(lib):
    """A 2017-style truncated-BPTT loop: hidden states re-wrapped in Variables between chunks."""
    Variable = lib.autograd.Variable
    rnn = lib.nn.GRU(3, 4)
    rng = np.random.RandomState(0)
    with lib.no_grad():
        for p in rnn.parameters():
            p.copy_(lib.from_numpy(rng.uniform(-0.5, 0.5, tuple(p.shape)).astype(np.float32)))
    data = lib.from_numpy(rng.randn(8, 2, 3).astype(np.float32))

    def repackage_hidden(h):
        return Variable(h.data) if isinstance(h, Variable) else tuple(repackage_hidden(v) for v in h)

    hidden = Variable(lib.zeros(1, 2, 4))
    losses = []
    for i in range(0, 8, 4):
        hidden = repackage_hidden(hidden)
        out, hidden = rnn(Variable(data[i:i + 4]), hidden)
        loss = out.pow(2).mean()
        rnn.zero_grad()
        loss.backward()  # would fail with "backward through the graph a second time" if not detached
        losses.append(loss.item())
    return losses, rnn.weight_hh_l0.grad.numpy()


def test_legacy_repackage_hidden_loop_matches_torch():
    got_losses, got_grad = _legacy_lm_loss(jitorch)
    want_losses, want_grad = _legacy_lm_loss(torch)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-4, atol=1e-6)
