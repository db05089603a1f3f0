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
from training_helpers import classification_batches, train_like_eager


def _np(t):
    return t.detach().numpy()


def _close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(_np(a) if isinstance(a, jitorch.Tensor) else a.detach().numpy(),
                               _np(b) if isinstance(b, jitorch.Tensor) else b.detach().numpy(), rtol=rtol, atol=atol)


def _torch(t):
    return torch.tensor(_np(t))


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


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.fc = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(F.max_pool2d(F.relu(self.bn(self.conv(x))), 2).flatten(1))


def _torch_cnn(model):
    t = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                            torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 5))
    with torch.no_grad():
        for pt, pj in zip(t.parameters(), model.parameters()):
            pt.copy_(_torch(pj))
    return t


def _buffers_close(model, eager, ref):
    bn = model.bn
    for name in ("running_mean", "running_var"):
        _close(getattr(bn, name), getattr(eager.bn, name))
        _close(getattr(bn, name), getattr(ref[1], name))
    assert int(bn.num_batches_tracked) == int(eager.bn.num_batches_tracked) == int(ref[1].num_batches_tracked)


def test_batchnorm_cnn_trains_in_one_graph_like_eager_and_torch():
    jitorch.manual_seed(2)
    eager = CNN()
    model = copy.deepcopy(eager)
    ref = _torch_cnn(model)
    compiled = jitorch.compile(model)
    running_mean = model.bn.running_mean
    opts = [jitorch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, model)]
    opt_t = torch.optim.SGD(ref.parameters(), lr=0.1)
    rng = np.random.default_rng(2)
    for _ in range(5):
        x = jitorch.tensor(rng.standard_normal((6, 3, 8, 8)).astype(np.float32))
        y = jitorch.tensor(rng.integers(0, 5, 6))
        le, lc = F.cross_entropy(eager(x), y), F.cross_entropy(compiled(x), y)
        lt = torch.nn.functional.cross_entropy(ref(_torch(x)), _torch(y))
        _close(lc, le)
        _close(lc, lt)
        for opt in opts:
            opt.zero_grad()
        opt_t.zero_grad()
        le.backward()
        lc.backward()
        lt.backward()
        for pe, pc, pt in zip(eager.parameters(), model.parameters(), ref.parameters()):
            _close(pc.grad, pe.grad)
            _close(pc.grad, pt.grad, rtol=1e-4, atol=1e-5)
        for opt in opts:
            opt.step()
        opt_t.step()
        _buffers_close(model, eager, ref)
    cf = compiled._compiled_call
    entry = cf.train_entries[0]
    assert len(cf.train_entries) == 1 and entry.plan is not None and not entry.breaks and entry.break_reason is None
    assert sorted(map(id, entry.plan.writes)) == sorted(map(id, model.bn.buffers()))
    assert model.bn.running_mean is running_mean  # written back into the buffer's own memory
    report = jitorch.compiler.explain(copy.deepcopy(model))(jitorch.randn(6, 3, 8, 8))
    assert report.graph_count == 1 and report.graph_break_count == 0
    # Evaluation reads the running statistics (its own specialization).
    compiled.eval()
    eager.eval()
    ref.eval()
    x = jitorch.randn(6, 3, 8, 8)
    out = compiled(x)
    _close(out, eager(x))
    _close(out, ref(_torch(x)), rtol=1e-4, atol=1e-5)
    assert int(model.bn.num_batches_tracked) == 5


def test_batchnorm_inference_compile_in_train_mode_updates_the_buffers():
    class Twice(nn.Module):
        """The same BatchNorm twice: its second call reads the statistics the first one wrote."""

        def __init__(self):
            super().__init__()
            self.lin, self.bn = nn.Linear(4, 6), nn.BatchNorm1d(6, momentum=0.3)

        def forward(self, x):
            return self.bn(self.bn(self.lin(x)).relu())

    jitorch.manual_seed(3)
    eager = Twice()
    model = copy.deepcopy(eager)
    compiled = jitorch.compile(model)
    ref = torch.nn.BatchNorm1d(6, momentum=0.3)
    memory = model.bn.running_var._data
    with jitorch.no_grad():
        for _ in range(4):  # the third call onwards runs the native runner
            x = jitorch.randn(8, 4)
            oe, oc = eager(x), compiled(x)
            _close(oc, oe)
            with torch.no_grad():
                ot = ref(ref(torch.nn.functional.linear(_torch(x), _torch(model.lin.weight),
                                                        _torch(model.lin.bias))).relu())
            _close(oc, ot, rtol=1e-4, atol=1e-5)
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                _close(getattr(model.bn, name), getattr(eager.bn, name))
                _close(getattr(model.bn, name), getattr(ref, name))
    entry = compiled._compiled_call.entries[0]
    assert entry.replay is None and not entry.breaks and entry.break_reason is None and entry.kernel_ops
    assert model.bn.running_var._data is memory


def test_batchnorm_with_a_graph_break_replays_the_buffer_updates():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.bn = nn.Linear(4, 6), nn.BatchNorm1d(6)

        def forward(self, x):
            h = self.bn(self.lin(x))
            if h.sum() > -1e9:
                h = h * 2
            return self.bn(h)

    jitorch.manual_seed(4)
    eager = Net()
    model = copy.deepcopy(eager)
    compiled = jitorch.compile(model)
    memory = model.bn.running_mean._data
    for grad in (True, False):
        with jitorch.set_grad_enabled(grad):
            for _ in range(3):
                x = jitorch.randn(5, 4)
                _close(compiled(x), eager(x))
                for name in ("running_mean", "running_var", "num_batches_tracked"):
                    _close(getattr(model.bn, name), getattr(eager.bn, name))
    cf = compiled._compiled_call
    for entry in (cf.train_entries[0], cf.entries[0]):
        assert entry.replay is not None and entry.replay.bailed is None
        assert all(b.kind == "host" for b in entry.breaks)  # the buffer writes are no breaks
    assert model.bn.running_mean._data is memory


def test_in_place_write_into_a_plain_input_still_breaks():
    def f(x, y):
        y.add_(1)
        return x * y

    compiled = jitorch.compile(f)
    y_e, y_c = jitorch.zeros(3), jitorch.zeros(3)
    x = jitorch.arange(3.0)
    for _ in range(3):
        np.testing.assert_array_equal(_np(compiled(x, y_c)), _np(f(x, y_e)))
    np.testing.assert_array_equal(_np(y_c), _np(y_e))
    entry = compiled.entries[0]
    assert [b.name for b in entry.breaks] == ["add_"] and entry.replay is not None


def test_buffer_written_with_a_tensor_that_requires_grad_is_not_functionalized():
    class Leaky(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(jitorch.ones(3))
            self.register_buffer("acc", jitorch.zeros(3))

        def forward(self, x):
            self.acc.add_(x * self.w)  # eager gives the buffer a history: no functional write
            return self.acc.sum()

    model = Leaky()
    compiled = jitorch.compile(model)
    loss = compiled(jitorch.ones(3))
    loss.backward()
    np.testing.assert_array_equal(_np(model.w.grad), np.ones(3, np.float32))
    entry = compiled._compiled_call.train_entries[0]
    assert entry.plan is None and entry.break_reason is not None


def test_compiled_function_over_a_closed_over_model_trains_compiled():
    # ``@compile def step(x, y): return loss(model(x), y)``: the model's parameters become graph inputs and its
    # BatchNorm updates are functional, as for ``compile(model)``.
    import copy

    jitorch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Dropout(0.2),
                          nn.Linear(4 * 36, 3))
    ref = copy.deepcopy(model)

    @jitorch.compile
    def step(x, y):
        return F.cross_entropy(model(x), y)

    rng = np.random.default_rng(0)
    for i in range(3):
        x = jitorch.tensor(rng.standard_normal((5, 1, 6, 6)).astype(np.float32))
        y = jitorch.tensor(rng.integers(0, 3, 5))
        model.zero_grad()
        ref.zero_grad()
        jitorch.manual_seed(i)
        got = step(x, y)
        got.backward()
        jitorch.manual_seed(i)
        want = F.cross_entropy(ref(x), y)
        want.backward()
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
        for p, q in zip(model.parameters(), ref.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(model[1].running_var.numpy(), ref[1].running_var.numpy(), rtol=1e-5)
    assert int(model[1].num_batches_tracked) == 3
    entry = step.train_entries[0]
    assert entry.plan is not None and entry.break_reason is None and len(step.train_entries) == 1
    model.eval()
    ref.eval()
    with jitorch.no_grad():  # the training flags are guarded: eval mode is its own specialization
        np.testing.assert_allclose(step(x, y).item(), F.cross_entropy(ref(x), y).item(), rtol=1e-5)


def test_explain_of_a_decorated_step_sees_the_model_it_closes_over():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Dropout(0.1), nn.Linear(16, 3))

    @jitorch.compile
    def step(x, y):
        return F.cross_entropy(model(x), y)

    x, y = jitorch.randn(4, 8), jitorch.randint(0, 3, (4,))
    report = jitorch.compiler.explain(step)(x, y)
    assert report.graph_count == 1 and report.graph_break_count == 0 and report.backward_kernels
    assert any(g.startswith("parameters == ") for g in report.guards)


def test_a_returned_buffer_is_the_buffer_itself_in_compiled_inference():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn, self.lin = nn.BatchNorm1d(3), nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(self.bn(x)), self.bn.running_mean

    net = Net()
    compiled = jitorch.compile(net)
    x = jitorch.randn(4, 3)
    with jitorch.no_grad():
        for _ in range(4):  # the trace, the planning call and the native runner
            _, rm = compiled(x)
            assert rm is net.bn.running_mean


class _BasicBlock(nn.Module):
    """torchvision's BasicBlock shape: conv-BN-ReLU(inplace), conv-BN, ``out += identity``, ReLU(inplace)."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)
        self.c2, self.b2 = nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)
        self.relu, self.fc = nn.ReLU(inplace=True), nn.Linear(4 * 16, 3)

    def forward(self, x):
        identity = x
        out = self.relu(self.b1(self.c1(x)))
        out = self.b2(self.c2(out))
        out += identity
        return self.fc(self.relu(out).flatten(1))


class _Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.layer(x).mean(1))


@pytest.mark.parametrize("make, shape", [(_BasicBlock, (6, 4, 4, 4)), (_Encoder, (4, 5, 16))])
def test_common_blocks_train_compiled_as_one_graph_like_eager(make, shape):
    entry = train_like_eager(make, classification_batches(shape, 3, seed=0), loss=F.cross_entropy)
    assert entry.plan is not None and entry.break_reason is None


def test_inference_graph_functionalizes_inplace_relu_and_residual_add():
    block = _BasicBlock().eval()
    compiled = jitorch.compile(block)
    x = jitorch.randn(3, 4, 4, 4)
    with jitorch.no_grad():
        for _ in range(4):  # the trace, the planning call, then the native runner
            np.testing.assert_allclose(compiled(x).numpy(), block(x).numpy(), rtol=1e-5, atol=1e-6)
    entry = compiled._compiled_call.entries[0]
    # ``out += identity`` and both ReLU(inplace=True) fused into the batch-norm epilogues: no in-place row is left.
    assert ["sub", "mul", "mul", "add", "add", "copy", "relu", "copy"] in entry.kernel_ops


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


def test_an_expanded_buffer_compiles_for_training_and_inference_like_torch():
    """Hugging Face's ``register_buffer("position_ids", arange(n).expand((1, -1)), persistent=False)``: a read-only
    (expanded) buffer, which restoring the buffers between the compile-time traces tried to write (ValueError)."""
    def make(lib):
        class Embeddings(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.word, self.position = lib.nn.Embedding(10, 4), lib.nn.Embedding(8, 4)
                self.register_buffer("position_ids", lib.arange(8).expand((1, -1)), persistent=False)

            def forward(self, ids):
                return self.word(ids) + self.position(self.position_ids[:, :ids.shape[1]])
        return Embeddings()

    ref = make(torch)
    ids = np.random.default_rng(0).integers(0, 10, (3, 6))
    g = np.random.default_rng(1).normal(size=(3, 6, 4)).astype(np.float32)
    model = make(jitorch)
    model.load_state_dict({k: jitorch.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    compiled = jitorch.compile(model)
    ref(torch.tensor(ids)).backward(torch.tensor(g))
    for _ in range(3):  # the trace, the planning call and a compiled run
        model.zero_grad()
        compiled(jitorch.tensor(ids)).backward(jitorch.tensor(g))
        for p, q in zip(model.parameters(), ref.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6)
    with jitorch.no_grad():
        for _ in range(3):
            _close(compiled(jitorch.tensor(ids)), ref(torch.tensor(ids)))
    np.testing.assert_array_equal(model.position_ids.numpy(), np.arange(8)[None])
