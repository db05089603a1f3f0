"""Compiled training and inference over modules with buffers (batch norm statistics, expanded buffers), writes into
inputs and buffers, models closed over by a compiled function, and common residual blocks, checked against eager
and PyTorch 2.13.
"""
import copy

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as F
from jitorch import nn
from training_helpers import classification_batches, train_like_eager

from compile_random_buffers_helpers import _close, _np, _torch


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


def test_in_place_write_into_a_plain_input_is_written_back_as_a_buffer_is():
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
    assert entry.breaks == [] and entry.replay is None and entry.writes_inputs


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
