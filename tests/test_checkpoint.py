"""jitorch.utils.checkpoint against torch.utils.checkpoint and against the same code without checkpointing."""
import warnings

import numpy as np
import pytest
import torch

import jitorch
from jitorch.utils.checkpoint import checkpoint, checkpoint_sequential
from helpers import same_error
from training_helpers import train_like_eager

MODES = [pytest.param(False, id="non-reentrant"), pytest.param(True, id="reentrant")]


def _weights(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) * 0.5 for s in ((6, 5), (6,), (3, 6), (3,))]


def _block(lib, w1, b1, w2, b2):
    F = lib.nn.functional
    return lambda x: F.linear(lib.tanh(F.linear(x, w1, b1)), w2, b2).sigmoid()


@pytest.mark.parametrize("reentrant", MODES)
def test_gradients_equal_torch_checkpoint_with_a_random_upstream_gradient(reentrant):
    rng = np.random.default_rng(1)
    xd, gd = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    results = []
    for lib, ckpt in ((jitorch, checkpoint), (torch, torch.utils.checkpoint.checkpoint)):
        params = [lib.tensor(w, requires_grad=True) for w in _weights()]
        x = lib.tensor(xd, requires_grad=True)
        out = ckpt(_block(lib, *params), x * 2, use_reentrant=reentrant)
        out.backward(lib.tensor(gd))
        results.append([out.detach().numpy(), x.grad.numpy()] + [p.grad.numpy() for p in params])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_non_reentrant_drops_saved_values_and_recomputes_once_in_the_backward():
    calls = []
    params = [jitorch.tensor(w, requires_grad=True) for w in _weights()]
    block = _block(jitorch, *params)

    def fn(x):
        calls.append(1)
        return block(x)

    x = jitorch.randn(4, 5, requires_grad=True)
    out = checkpoint(fn, x, use_reentrant=False)
    node = out.grad_fn
    # Every node of the region keeps a placeholder instead of its saved values.
    assert all(type(p.value).__name__ == "_Holder" for p in (node._saved_out or node._saved_in))
    assert len(calls) == 1
    (gx,) = jitorch.autograd.grad(out.sum(), x)  # autograd.grad works through the non-reentrant form
    assert len(calls) == 2
    expected = jitorch.autograd.grad(block(x).sum(), x)[0]
    np.testing.assert_allclose(gx.numpy(), expected.numpy(), rtol=1e-6)


@pytest.mark.parametrize("reentrant", MODES)
def test_dropout_recomputes_the_forward_masks_and_leaves_the_generator_alone(reentrant):
    net = jitorch.nn.Sequential(jitorch.nn.Linear(5, 8), jitorch.nn.Dropout(0.5), jitorch.nn.Linear(8, 2))
    x = jitorch.randn(6, 5, requires_grad=True)
    grads, after = [], []
    for use in (False, True):
        net.zero_grad()
        x.grad = None
        jitorch.manual_seed(3)
        out = checkpoint(net, x, use_reentrant=reentrant) if use else net(x)
        out.backward(jitorch.ones(6, 2))
        after.append(jitorch.rand(2).tolist())
        grads.append([x.grad.numpy().copy()] + [p.grad.numpy().copy() for p in net.parameters()])
    for got, want in zip(*grads):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert after[0] == after[1]


@pytest.mark.parametrize("changed", ["input", "outside"])
def test_in_place_changes_after_the_forward_raise_as_torch(changed):
    def attempt(lib):
        x, w = lib.ones(3, requires_grad=True), lib.ones(3)
        h = x * 1
        out = lib.utils.checkpoint.checkpoint(lambda t: (t * w).exp(), h, use_reentrant=False)
        with lib.no_grad():
            (h if changed == "input" else w).add_(1)
        out.sum().backward()

    if changed == "input":
        same_error(attempt)
    else:  # torch does not notice (its checkpoint's saved tensors skip version checks); jitorch raises as without it
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            attempt(jitorch)


@pytest.mark.parametrize("early_stop", [True, False])
@pytest.mark.parametrize("second", ["fewer", "more", "dtype", "shape"])
def test_a_recomputation_that_saves_other_tensors_raises_checkpoint_error_as_torch(second, early_stop):
    def attempt(lib):
        runs = []

        def fn(t):
            runs.append(1)
            if len(runs) == 1:
                return t.sin().exp()
            return {"fewer": lambda: t.sin() * 2, "more": lambda: t.sin().exp().cos(),
                    "dtype": lambda: t.double().sin().exp(), "shape": lambda: t[:3].sin().exp()}[second]()

        x = lib.ones(4, 2, requires_grad=True)
        lib.utils.checkpoint.checkpoint(fn, x, use_reentrant=False, early_stop=early_stop).sum().backward()
        return x.grad

    if second == "more" and early_stop:  # torch stops once the forward's two tensors are back
        np.testing.assert_allclose(attempt(jitorch).numpy(), attempt(torch).numpy(), rtol=1e-6)
        return
    with pytest.raises(torch.utils.checkpoint.CheckpointError) as want:
        attempt(torch)
    with pytest.raises(jitorch.utils.checkpoint.CheckpointError) as got:
        attempt(jitorch)
    # (torch's closing tip goes on about torch.compile's dynamic shapes; the diagnosis before it must be the same)
    assert str(got.value).replace("jitorch.", "torch.").split("Tip:")[0] == str(want.value).split("Tip:")[0]


def test_debug_adds_the_ops_of_both_runs_to_the_error():
    runs = []

    def fn(t):
        runs.append(1)
        return t.sin() if len(runs) == 1 else t.sin().exp()

    x = jitorch.ones(3, requires_grad=True)
    out = checkpoint(fn, x, use_reentrant=False, debug=True, early_stop=False)
    with pytest.raises(jitorch.utils.checkpoint.CheckpointError, match=r"(?s)original forward:\n\nSinBackward0\n\n"
                       r"Operations executed during recomputation:\n\nSinBackward0\nExpBackward0"):
        out.sum().backward()


def test_checkpoint_helpers_custom_checkpoint_functions_import():
    cp = jitorch.utils.checkpoint
    x = jitorch.ones(2, requires_grad=True)
    a, n = cp.detach_variable((x * 2, 3))
    assert a.requires_grad and a.grad_fn is None and n == 3
    with pytest.raises(RuntimeError, match="Only tuple of tensors is supported. Got Unsupported input type: list"):
        cp.detach_variable([x])
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        cp.check_backward_validity((jitorch.ones(1), 2))
    with cp.set_checkpoint_early_stop(False), cp.set_checkpoint_debug_enabled(None):
        checkpoint(lambda t: t.exp(), x, use_reentrant=False).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([1.0, 1.0]), rtol=1e-6)


def test_missing_use_reentrant_warns_and_reentrant_refuses_keywords():
    x = jitorch.ones(2, requires_grad=True)
    with pytest.warns(UserWarning, match="use_reentrant parameter should be passed explicitly"):
        checkpoint(lambda t: t * 2, x)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        checkpoint(lambda t, scale: t * scale, x, use_reentrant=True, scale=2)
    out = checkpoint(lambda t, scale: t * scale, x, use_reentrant=False, scale=3.0)
    out.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        assert not checkpoint(lambda t: t * 2, jitorch.ones(2), use_reentrant=True).requires_grad


@pytest.mark.parametrize("reentrant", MODES)
def test_checkpoint_sequential_equals_torch(reentrant):
    weights = _weights(4)
    rng = np.random.default_rng(2)
    xd, gd = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    results = []
    for lib, seq in ((jitorch, checkpoint_sequential), (torch, torch.utils.checkpoint.checkpoint_sequential)):
        net = lib.nn.Sequential(lib.nn.Linear(5, 6), lib.nn.Tanh(), lib.nn.Linear(6, 3), lib.nn.Sigmoid())
        with lib.no_grad():
            for p, w in zip(net.parameters(), weights):
                p.copy_(lib.tensor(w))
        x = lib.tensor(xd, requires_grad=True)
        out = seq(net, 2, x, use_reentrant=reentrant)
        out.backward(lib.tensor(gd))
        results.append([out.detach().numpy(), x.grad.numpy()] + [p.grad.numpy() for p in net.parameters()])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_nested_checkpoints_and_double_backward():
    x = jitorch.randn(4, dtype=jitorch.float64, requires_grad=True)

    def inner(t):
        return t.sin() * t

    def outer(t):
        return checkpoint(inner, t.exp(), use_reentrant=False).tanh()

    assert jitorch.autograd.gradcheck(lambda t: checkpoint(outer, t, use_reentrant=False), (x,))
    assert jitorch.autograd.gradgradcheck(lambda t: checkpoint(outer, t, use_reentrant=False), (x,))


@pytest.mark.parametrize("reentrant", MODES)
def test_compiled_model_with_a_checkpointed_block_trains_like_eager(reentrant):
    class Net(jitorch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pre, self.a, self.b = jitorch.nn.Linear(5, 5), jitorch.nn.Linear(5, 8), jitorch.nn.Linear(8, 3)

        def forward(self, x, y):
            # (The checkpointed input requires grad: a reentrant checkpoint gives the parameters inside no gradient
            # otherwise, in PyTorch too.)
            h = checkpoint(lambda t: jitorch.nn.functional.gelu(self.a(t)), self.pre(x), use_reentrant=reentrant)
            return jitorch.nn.functional.mse_loss(self.b(h), y)

    rng = np.random.default_rng(6)
    batches = [(jitorch.tensor(rng.standard_normal((4, 5)).astype(np.float32)),
                jitorch.tensor(rng.standard_normal((4, 3)).astype(np.float32))) for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        entry = train_like_eager(Net, batches)
    assert entry.plan is not None and entry.break_reason is None


def test_a_nested_region_that_records_nothing_leaves_the_outer_one_intact():
    from jitorch.autograd import graph

    x, c = jitorch.randn(3, requires_grad=True), jitorch.randn(3)
    out = checkpoint(lambda t: t * checkpoint(lambda u: u.exp(), c, use_reentrant=False), x, use_reentrant=False)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), c.exp().numpy(), rtol=1e-6)
    assert graph._recording == []


def test_recomputation_runs_under_the_forwards_autocast_state():
    lin = jitorch.nn.Linear(4, 4)
    x = jitorch.randn(2, 4, requires_grad=True)
    with jitorch.autocast("cpu", dtype=jitorch.bfloat16):
        y = checkpoint(lambda t: lin(t).relu(), x, use_reentrant=False)
    assert y.dtype is jitorch.bfloat16
    y.float().sum().backward()  # outside autocast, as training loops do
    with jitorch.autocast("cpu", dtype=jitorch.bfloat16):
        plain = lin(x).relu()
    (gx,) = jitorch.autograd.grad(plain.float().sum(), x)
    np.testing.assert_allclose(x.grad.numpy(), gx.numpy(), rtol=1e-2, atol=1e-2)


def test_a_stale_view_argument_is_synced_before_the_region():
    grads = []
    for use in (False, True):
        x = jitorch.tensor([0.3, -1.2, 0.7, 2.0], requires_grad=True)
        y = x * 1
        v = y[:2]
        y.mul_(2)  # v's history is regenerated lazily, at its next use
        out = checkpoint(lambda t: t.sin(), v, use_reentrant=False) if use else v.sin()
        out.sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6)
    assert grads[1][2:].tolist() == [0.0, 0.0] and grads[1][0] != 0
