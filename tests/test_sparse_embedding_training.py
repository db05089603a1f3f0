"""The training stack on ``sparse=True`` embeddings against PyTorch 2.13: the optimizers that take a sparse gradient
(SGD with and without momentum, SparseAdam, Adagrad, LBFGS: several steps from one initial table to the same
parameters and state, rows never looked up unchanged, a looked-up row with a zero gradient updated by SparseAdam) and
those that refuse it, with torch's errors; gradient clipping and ``GradScaler``; ``jitorch.compile``d modules and
``reduce-overhead`` train steps (run eagerly where a graph cannot hold a sparse gradient), and a CPU graph capture's
refusal."""
import numpy as np
import pytest
import torch

import jitorch
from helpers import same_error
from test_sparse_embedding_grad import _np, assert_sparse_same

pytestmark = [pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")]

RNG = np.random.default_rng(8)
W = RNG.standard_normal((10, 3)).astype(np.float32)
IDX = np.array([[4, 1, 4], [0, 2, 1]])
G = RNG.standard_normal((2, 3, 3)).astype(np.float32)
LIBS = (jitorch, torch)


# -- optimizers ----------------------------------------------------------------------------------------------------
STEP_IDX = [RNG.integers(0, 7, (3, 4)) for _ in range(6)]  # rows 7..9 are never looked up
STEP_G = [RNG.standard_normal((3, 4, 3)).astype(np.float32) for _ in range(6)]
for g, idx in zip(STEP_G, STEP_IDX):
    g[idx == idx[0, 0]] = 0.0  # a looked-up row with an exactly zero gradient: SparseAdam still updates it


def _train(L, name, kwargs):
    emb = L.nn.Embedding.from_pretrained(L.tensor(W.copy()), freeze=False, sparse=True)
    opt = getattr(L.optim, name)(emb.parameters(), **kwargs)
    for idx, g in zip(STEP_IDX, STEP_G):
        opt.zero_grad()
        if name == "LBFGS":
            def closure():
                opt.zero_grad()
                loss = (emb(L.tensor(idx)) * L.tensor(g)).sum() + (emb(L.tensor(idx)) ** 2).sum()
                loss.backward()
                return loss
            opt.step(closure)
        else:
            emb(L.tensor(idx)).backward(L.tensor(g))
            opt.step()
    return emb.weight, opt.state[emb.weight]


@pytest.mark.parametrize("name,kwargs", [
    ("SGD", dict(lr=0.1)), ("SGD", dict(lr=0.1, momentum=0.9)), ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.1, momentum=0.5, dampening=0.3, maximize=True)), ("SGD", dict(lr=0.1, foreach=True)),
    ("Adagrad", dict(lr=0.1)), ("Adagrad", dict(lr=0.1, lr_decay=0.1, initial_accumulator_value=0.2, eps=1e-3)),
    ("Adagrad", dict(lr=0.1, maximize=True)), ("SparseAdam", dict(lr=0.1)),
    ("SparseAdam", dict(lr=0.05, betas=(0.5, 0.9), eps=1e-6, maximize=True)), ("LBFGS", dict(lr=0.1, max_iter=3)),
])
def test_optimizers_train_a_sparse_table_as_torch(name, kwargs):
    (jw, jstate), (tw, tstate) = (_train(L, name, kwargs) for L in LIBS)
    np.testing.assert_allclose(_np(jw), _np(tw), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(_np(jw)[7:], W[7:])  # rows never looked up keep their values
    assert sorted(jstate) == sorted(tstate)
    for key, t in tstate.items():
        j = jstate[key]
        if isinstance(t, torch.Tensor) and t.is_sparse:  # SGD's momentum buffer
            assert_sparse_same(j, t, values_atol=1e-5)
        elif isinstance(t, torch.Tensor) and key != "step":
            np.testing.assert_allclose(_np(j), _np(t), rtol=1e-5, atol=1e-6, err_msg=key)
        elif key == "step":
            assert float(j) == float(t)


@pytest.mark.parametrize("name,kwargs", [
    ("SGD", dict(lr=0.1, weight_decay=0.1)), ("SGD", dict(lr=0.1, fused=True)),
    ("Adagrad", dict(lr=0.1, weight_decay=0.1)), ("Adagrad", dict(lr=0.1, fused=True)),
    ("Adam", {}), ("Adam", dict(fused=True)), ("AdamW", {}), ("RMSprop", {}), ("Adadelta", {}), ("Adamax", {}),
    ("NAdam", {}), ("RAdam", {}), ("Rprop", {}), ("ASGD", {}), ("Adafactor", {}), ("Muon", {}),
])
def test_optimizers_refuse_a_sparse_gradient_as_torch(name, kwargs):
    def run(L):
        emb = L.nn.Embedding.from_pretrained(L.tensor(W), freeze=False, sparse=True)
        opt = getattr(L.optim, name)(emb.parameters(), **kwargs)
        emb(L.tensor(IDX)).backward(L.tensor(G))
        opt.step()
    same_error(run)


def test_sparse_adam_refuses_a_dense_gradient_as_torch():
    def run(L):
        w = L.tensor(W, requires_grad=True)
        opt = L.optim.SparseAdam([w])
        L.nn.functional.embedding(L.tensor(IDX), w).backward(L.tensor(G))
        opt.step()
    same_error(run)


@pytest.mark.parametrize("clip", ["norm", "value"])
def test_gradient_clipping_refuses_a_sparse_gradient_as_torch(clip):
    for L in LIBS:
        emb = L.nn.Embedding(6, 3, sparse=True)
        emb(L.tensor(IDX)).backward(L.tensor(G))
        with pytest.raises(NotImplementedError, match="SparseCPU"):
            if clip == "norm":
                L.nn.utils.clip_grad_norm_(emb.parameters(), 0.5)
            else:
                L.nn.utils.clip_grad_value_(emb.parameters(), 0.5)


def test_grad_scaler_unscales_the_sparse_values():
    grads = []
    for L in LIBS:
        emb = L.nn.Embedding.from_pretrained(L.tensor(W), freeze=False, sparse=True)
        opt = L.optim.SGD(emb.parameters(), lr=0.1)
        scaler = L.amp.GradScaler("cpu", init_scale=8.0)
        scaler.scale((emb(L.tensor(IDX)) * L.tensor(G)).sum()).backward()
        scaler.step(opt)
        grads.append((emb.weight.grad, _np(emb.weight)))
    assert_sparse_same(grads[0][0], grads[1][0])
    np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-6)


class _Tables(jitorch.nn.Module):
    """Two sparse tables and a dense layer."""

    def __init__(self):
        super().__init__()
        self.emb = jitorch.nn.Embedding(10, 4, sparse=True)
        self.bag = jitorch.nn.EmbeddingBag(10, 4, mode="sum", sparse=True)
        self.lin = jitorch.nn.Linear(8, 1)

    def forward(self, idx):
        return self.lin(jitorch.cat([self.emb(idx).mean(1), self.bag(idx)], 1)).sum()


def test_compiled_module_with_sparse_tables_trains_like_eager():
    # The joint graph cannot hold a sparse gradient: the compiled module trains eagerly, with the same gradients.
    jitorch.manual_seed(0)
    eager = _Tables()
    jitorch.manual_seed(0)
    module = _Tables()
    compiled = jitorch.compile(module)
    opts = [jitorch.optim.SGD(n.parameters(), lr=0.1, momentum=0.9) for n in (eager, module)]
    for idx in STEP_IDX[:3]:
        for opt in opts:
            opt.zero_grad()
        eager(jitorch.tensor(idx)).backward()
        compiled(jitorch.tensor(idx)).backward()
        assert module.emb.weight.grad.is_sparse and module.bag.weight.grad.is_sparse
        assert_sparse_same(module.emb.weight.grad, eager.emb.weight.grad)
        for opt in opts:
            opt.step()
    for (name, a), b in zip(eager.named_parameters(), module.parameters()):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-6, atol=1e-7, err_msg=name)
    with jitorch.no_grad():
        idx = jitorch.tensor(STEP_IDX[0])
        np.testing.assert_allclose(_np(compiled(idx)), _np(eager(idx)), rtol=1e-6)


@pytest.mark.parametrize("name", ["SGD", "SparseAdam", "Adagrad"])
def test_reduce_overhead_train_step_runs_uncaptured_like_eager(name):
    results = []
    for compiled in (False, True):
        jitorch.manual_seed(0)
        net = _Tables()
        opt = getattr(jitorch.optim, name)(net.parameters() if name != "SparseAdam" else
                                           [net.emb.weight, net.bag.weight], lr=0.1)

        def step(idx):
            opt.zero_grad()
            loss = net(idx)
            loss.backward()
            opt.step()
            return loss
        run = jitorch.compile(step, mode="reduce-overhead") if compiled else step
        losses = [float(run(jitorch.tensor(idx))) for idx in STEP_IDX[:4]]
        results.append((losses, [_np(p) for p in net.parameters()]))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6)
    for a, b in zip(results[0][1], results[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["SGD", "SparseAdam", "Adagrad"])
def test_a_cpu_graph_capture_refuses_a_sparse_step(name):
    from jitorch.cpu import CPUGraph, graph

    emb = jitorch.nn.Embedding(10, 4, sparse=True)
    opt = getattr(jitorch.optim, name)(emb.parameters(), lr=0.1)
    idx = jitorch.tensor([1, 2, 1])
    with pytest.raises(RuntimeError, match="CPU graph capture"):
        with graph(CPUGraph()):
            opt.zero_grad()
            emb(idx).sum().backward()
            opt.step()
