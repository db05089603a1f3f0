"""jitorch.compile of models with dropout (random nodes drawn afresh per call) and BatchNorm in training mode
(running statistics updated functionally and written back), against eager jitorch (same seed: same masks, bit for
bit) and PyTorch (the same masks applied, or no randomness at all)."""
import copy

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as F
from jitorch import nn
from training_helpers import train_like_eager

from compile_random_buffers_helpers import _close, _np, _torch


def _forward_ops(entry):
    return [n.target.__name__ for n in entry.plan.fwd.gm.graph.nodes if n.op == "call_function"]


class MLP(nn.Module):
    def __init__(self, p=0.4):
        super().__init__()
        self.l1, self.drop, self.l2 = nn.Linear(6, 16), nn.Dropout(p), nn.Linear(16, 3)

    def forward(self, x):
        return self.l2(self.drop(F.relu(self.l1(x))))


def _mask(seed, shape, p):
    """The mask (0 or 1 / (1 - p)) the first dropout after ``manual_seed(seed)`` draws, from eager jitorch."""
    jitorch.manual_seed(seed)
    return F.dropout(jitorch.ones(shape), p)


def _twins(make, seed=0):
    """An eager module, a deep copy with the same weights, and that copy compiled."""
    jitorch.manual_seed(seed)
    eager = make()
    model = copy.deepcopy(eager)
    return eager, model, jitorch.compile(model)


def test_dropout_training_compiles_one_graph_and_draws_eager_masks():
    eager, model, compiled = _twins(MLP)
    rng = np.random.default_rng(0)
    outs = []
    for step in range(4):
        x = jitorch.tensor(rng.standard_normal((5, 6)).astype(np.float32))
        up = jitorch.tensor(rng.standard_normal((5, 3)).astype(np.float32))
        jitorch.manual_seed(10 + step)
        oe = eager(x)
        after_e = jitorch.rand(3)  # the generator ends where eager leaves it
        jitorch.manual_seed(10 + step)
        oc = compiled(x)
        after_c = jitorch.rand(3)
        _close(oc, oe)
        np.testing.assert_array_equal(_np(after_c), _np(after_e))
        for m in (eager, model):
            m.zero_grad()
        oe.backward(up)
        oc.backward(up)
        for pe, pc in zip(eager.parameters(), model.parameters()):
            _close(pc.grad, pe.grad)
        # PyTorch with the mask eager jitorch drew for this seed: outputs and gradients.
        mask = _torch(_mask(10 + step, (5, 16), 0.4))
        w1, b1, w2, b2 = (_torch(p).requires_grad_() for p in model.parameters())
        ot = torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(_torch(x), w1, b1)) * mask, w2, b2)
        ot.backward(_torch(up))
        _close(oc, ot)
        for pc, pt in zip(model.parameters(), (w1, b1, w2, b2)):
            _close(pc.grad, pt.grad)
        outs.append(oc)
    cf = compiled._compiled_call
    entry = cf.train_entries[0]
    assert len(cf.train_entries) == 1 and entry.plan is not None and entry.break_reason is None and not entry.breaks
    assert "bernoulli_mask" in _forward_ops(entry) and entry.plan.forward_kernels
    # The backward reads the saved mask: no random row is recomputed there.
    assert not any(n.target.__name__ == "bernoulli_mask" for n in entry.plan.bwd.gm.graph.nodes
                   if n.op == "call_function")
    # Fresh masks on every call: the same input gives other outputs without reseeding.
    x = jitorch.ones(5, 6)
    assert not np.array_equal(_np(compiled(x)), _np(compiled(x)))


class Reparameterized(nn.Module):
    """A VAE's sampling step: ``mu + eps * std`` with ``eps = randn_like(std)``, and uniform noise on the input."""

    def __init__(self):
        super().__init__()
        self.enc, self.dec = nn.Linear(6, 8), nn.Linear(4, 6)

    def forward(self, x):
        x = x + 0.01 * jitorch.rand_like(x)
        mu, logvar = self.enc(x).chunk(2, dim=-1)
        z = mu + jitorch.randn_like(mu) * (0.5 * logvar).exp()
        return self.dec(z)


def test_rand_and_randn_train_compiled_in_one_graph_with_eager_numbers():
    eager, model, compiled = _twins(Reparameterized)
    rng = np.random.default_rng(2)
    for step in range(3):
        x = jitorch.tensor(rng.standard_normal((5, 6)).astype(np.float32))
        up = jitorch.tensor(rng.standard_normal((5, 6)).astype(np.float32))
        outs, after = [], []
        for net in (eager, compiled):
            jitorch.manual_seed(20 + step)
            outs.append(net(x))
            after.append(jitorch.rand(3))  # the generator ends where eager leaves it
        _close(outs[1], outs[0])
        np.testing.assert_array_equal(_np(after[1]), _np(after[0]))
        for m in (eager, model):
            m.zero_grad()
        for o in outs:
            o.backward(up)
        for pe, pc in zip(eager.parameters(), model.parameters()):
            _close(pc.grad, pe.grad)
    # PyTorch with the noise eager jitorch drew for the last seed.
    jitorch.manual_seed(22)
    noise, eps = jitorch.rand(5, 6), jitorch.randn(5, 4)
    w1, b1, w2, b2 = (_torch(p).requires_grad_() for p in model.parameters())
    h = torch.nn.functional.linear(_torch(x) + 0.01 * _torch(noise), w1, b1)
    ot = torch.nn.functional.linear(h[:, :4] + _torch(eps) * (0.5 * h[:, 4:]).exp(), w2, b2)
    ot.backward(_torch(up))
    _close(outs[1], ot)
    for pc, pt in zip(model.parameters(), (w1, b1, w2, b2)):
        _close(pc.grad, pt.grad, rtol=1e-4)
    entry = compiled._compiled_call.train_entries[0]
    assert len(compiled._compiled_call.train_entries) == 1 and entry.break_reason is None and not entry.breaks
    assert {"uniform_sample", "normal_sample"} <= set(_forward_ops(entry))
    assert not any(n.target.__name__.endswith("_sample") for n in entry.plan.bwd.gm.graph.nodes
                   if n.op == "call_function")  # the backward reads the saved draw
    x = jitorch.ones(5, 6)
    assert not np.array_equal(_np(compiled(x)), _np(compiled(x)))  # fresh numbers on every call


def test_compiled_inference_draws_rand_each_call_and_fuses_the_arithmetic_around_it():
    f = jitorch.compile(lambda x: (x + 0.5 * jitorch.randn(4, 3, dtype=jitorch.float64)).tanh())
    x = jitorch.ones(4, 3, dtype=jitorch.float64)
    jitorch.manual_seed(4)
    got = f(x)
    jitorch.manual_seed(4)
    # The same draws (the fused tanh is within a few ulp of NumPy's).
    _close(got, (x + 0.5 * jitorch.randn(4, 3, dtype=jitorch.float64)).tanh(), rtol=1e-13, atol=0)
    assert got.dtype is jitorch.float64 and not np.array_equal(_np(f(x)), _np(f(x)))
    report = jitorch.compiler.explain(f)(x)
    assert report.graph_break_count == 0 and report.kernels == [["mul", "add", "tanh"]]


def test_dropout_eval_is_identity_on_its_own_specialization():
    jitorch.manual_seed(1)
    model = MLP(0.5)
    compiled = jitorch.compile(model)
    x = jitorch.randn(4, 6)
    compiled(x).sum().backward()
    compiled.eval()
    out = compiled(x)
    w1, b1, w2, b2 = (_torch(p) for p in model.parameters())
    _close(out, torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(_torch(x), w1, b1)), w2, b2))
    _close(compiled(x), out)
    cf = compiled._compiled_call
    assert len(cf.train_entries) == 2 and all(e.plan is not None for e in cf.train_entries)
    assert "bernoulli_mask" not in _forward_ops(cf.train_entries[1])


@pytest.mark.parametrize("drop", [
    lambda h: F.dropout2d(h, 0.5),
    lambda h: F.alpha_dropout(h, 0.3, training=True),
    lambda h: F.feature_alpha_dropout(h, 0.3, training=True),
])
def test_feature_and_alpha_dropout_compile_with_eager_masks(drop):
    def f(x, w):
        return drop((x * w).tanh()) * 2

    compiled = jitorch.compile(f)
    x = jitorch.randn(3, 4, 2, 2)
    w = jitorch.randn(3, 4, 2, 2, requires_grad=True)
    we = w.detach().clone().requires_grad_()
    up = jitorch.randn(3, 4, 2, 2)
    for seed in (3, 4):
        w.grad = we.grad = None
        jitorch.manual_seed(seed)
        oe = f(x, we)
        jitorch.manual_seed(seed)
        oc = compiled(x, w)
        _close(oc, oe)
        oe.backward(up)
        oc.backward(up)
        _close(w.grad, we.grad)
    assert compiled.train_entries[0].plan is not None


def test_dropout_with_a_graph_break_draws_every_mask_in_eager_order():
    def f(x, w):
        h = F.dropout(x @ w, 0.5)
        F.dropout(h, 0.5)  # drawn and never read: the generator still advances
        if h.sum() > -1e9:
            h = h * 2
        return (F.dropout(h, 0.5) * 3).sum()

    compiled = jitorch.compile(f)
    for step in range(3):
        x = jitorch.randn(3, 4)
        w = jitorch.randn(4, 5, requires_grad=True)
        we = w.detach().clone().requires_grad_()
        jitorch.manual_seed(step)
        le = f(x, we)
        le.backward()
        after_e = jitorch.rand(2)
        jitorch.manual_seed(step)
        lc = compiled(x, w)
        lc.backward()
        after_c = jitorch.rand(2)
        _close(lc, le)
        np.testing.assert_array_equal(_np(after_c), _np(after_e))
        _close(w.grad, we.grad)
        with jitorch.no_grad():
            jitorch.manual_seed(step)
            ie = f(x, we)
            jitorch.manual_seed(step)
            _close(compiled(x, w), ie)
    entry = compiled.train_entries[0]
    assert entry.replay is not None and entry.replay.bailed is None and entry.breaks
    assert compiled.entries[0].replay.bailed is None


def test_double_backward_through_compiled_dropout_reuses_the_forward_mask():
    def f(x):
        return (F.dropout(x, 0.5) ** 3).sum()

    compiled = jitorch.compile(f)
    x = jitorch.randn(6, requires_grad=True)
    xe = x.detach().clone().requires_grad_()
    for seed in (0, 1):
        jitorch.manual_seed(seed)
        (ge,) = jitorch.autograd.grad(f(xe), xe, create_graph=True)
        (gge,) = jitorch.autograd.grad(ge.sum(), xe)
        after_e = jitorch.rand(2)
        jitorch.manual_seed(seed)
        (gc,) = jitorch.autograd.grad(compiled(x), x, create_graph=True)
        (ggc,) = jitorch.autograd.grad(gc.sum(), x)
        after_c = jitorch.rand(2)
        _close(gc, ge)
        _close(ggc, gge)
        np.testing.assert_array_equal(_np(after_c), _np(after_e))


def test_bernoulli_of_computed_probabilities_compiles_and_keeps_later_draws_after_it():
    # The rand after bernoulli(probs) reads only a constant, but moving it ahead would change its numbers.
    def f(x):
        return jitorch.bernoulli(x.sigmoid()) * 2 + jitorch.rand(4, 5) + x

    compiled = jitorch.compile(f)
    x = jitorch.randn(4, 5)
    for seed in range(4):
        jitorch.manual_seed(seed)
        got = compiled(x)
        jitorch.manual_seed(seed)
        _close(got, f(x))
    report = jitorch.compiler.explain(f)(x)
    assert report.graph_break_count == 0
    assert compiled.entries[0].break_reason is None


class Denoiser(nn.Module):
    """A diffusion training step's loss: random timesteps, noise, and the schedule's entries at those steps."""

    def __init__(self, steps=10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(7, 16), nn.SiLU(), nn.Linear(16, 6))
        self.register_buffer("alpha_bar", jitorch.linspace(0.99, 0.1, steps))
        self.steps = steps

    def forward(self, x0):
        t = jitorch.randint(0, self.steps, (x0.shape[0],))
        noise = jitorch.randn_like(x0)
        a = self.alpha_bar[t].unsqueeze(1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        pred = self.net(jitorch.cat([xt, t.unsqueeze(1).float() / self.steps], 1))
        return F.mse_loss(pred, noise)


def test_diffusion_step_with_randint_timesteps_trains_compiled_like_eager():
    rng = np.random.default_rng(12)
    batches = [(jitorch.tensor(rng.standard_normal((8, 6)).astype(np.float32)),) for _ in range(3)]
    entry = train_like_eager(Denoiser, batches)  # the same seed per step in both runs: the same draws
    assert entry.plan is not None and entry.break_reason is None
    assert {"integer_sample", "normal_sample"} <= set(_forward_ops(entry))
