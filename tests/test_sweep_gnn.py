"""Graph neural networks written without PyG, run with ``lib=torch`` and ``lib=jitorch`` from the same weights and data.

One model mixes the usual layers: GCN over a sparse normalized adjacency (``sparse_coo_tensor`` + ``sparse.mm``,
degrees by ``bincount``), GraphSAGE mean aggregation by ``index_add_``, GIN sum aggregation by ``scatter_add``,
max/mean aggregation by ``scatter_reduce_(include_self=False)``, GAT attention with a per-edge softmax (scatter max
subtraction, ``exp``, scatter sum) and global mean/max pooling per graph from a batch vector.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree, load_numpy_state, numpy_state, to_numpy

pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks")


def _graph_batch(seed=0):
    """Three random undirected graphs in one batch; node 29 has no edges (an isolated node, as real data has)."""
    rng = np.random.default_rng(seed)
    batch = np.repeat(np.arange(3), [8, 12, 10])
    src, dst = [], []
    for g in range(3):
        nodes = np.where(batch == g)[0][:-1 if g == 2 else None]
        for _ in range(len(nodes) * 2):
            a, b = rng.choice(nodes, 2, replace=False)
            src += [a, b]
            dst += [b, a]
    x = rng.standard_normal((len(batch), 5)).astype(np.float32)
    return x, np.array([src, dst], dtype=np.int64), batch.astype(np.int64), rng.integers(0, 2, 3)


def _gnn(lib, edge_index, batch, n):
    nn, F = lib.nn, lib.nn.functional
    src, dst = edge_index
    deg = lib.bincount(dst, minlength=n).float() + 1  # + the self loop
    dinv = deg.pow(-0.5)
    loops = lib.arange(n)
    row, col = lib.cat([src, loops]), lib.cat([dst, loops])
    adj = lib.sparse_coo_tensor(lib.stack([col, row]), dinv[row] * dinv[col], (n, n)).coalesce()
    graphs = int(batch.max()) + 1

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.gcn1, self.gcn2 = nn.Linear(5, 16), nn.Linear(16, 16)
            self.sage = nn.Linear(32, 16)
            self.gin = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
            self.gin_eps = nn.Parameter(lib.tensor(0.1))
            self.att = nn.Parameter(lib.randn(32) * 0.1)
            self.out = nn.Linear(32, 2)

        def forward(self, x):
            h = lib.relu(lib.sparse.mm(adj, self.gcn1(x)))
            h = lib.relu(lib.sparse.mm(adj, self.gcn2(h)))
            msg = h[src]
            summed = lib.zeros_like(h).index_add_(0, dst, msg)
            count = lib.zeros(n).index_add_(0, dst, lib.ones(len(dst))).clamp(min=1)
            h = lib.relu(self.sage(lib.cat([h, summed / count[:, None]], 1)))
            msg = h[src]
            index = dst[:, None].expand(-1, h.shape[1])
            amax = lib.zeros_like(h).scatter_reduce_(0, index, msg, reduce="amax", include_self=False)
            mean = lib.zeros_like(h).scatter_reduce_(0, index, msg, reduce="mean", include_self=False)
            h = self.gin((1 + self.gin_eps) * h + lib.zeros_like(h).scatter_add_(0, index, msg)) + 0.5 * (amax + mean)
            score = F.leaky_relu(lib.cat([h[src], h[dst]], 1) @ self.att, 0.2)
            top = lib.full((n,), -float("inf")).scatter_reduce(0, dst, score, reduce="amax", include_self=True)
            e = (score - top[dst]).exp()
            alpha = e / lib.zeros(n).scatter_add_(0, dst, e)[dst]
            h = F.elu(lib.zeros_like(h).index_add(0, dst, alpha[:, None] * h[src])) + h
            sizes = lib.bincount(batch, minlength=graphs).float()
            mean_pool = lib.zeros(graphs, h.shape[1]).index_add_(0, batch, h) / sizes[:, None]
            max_pool = lib.full((graphs, h.shape[1]), -float("inf")).scatter_reduce_(
                0, batch[:, None].expand_as(h), h, "amax")
            return self.out(lib.cat([mean_pool, max_pool], 1))

    return Net()


def _train_gnn(lib, state=None, steps=4):
    x, edge_index, batch, y = (lib.tensor(a) for a in _graph_batch())
    lib.manual_seed(0)
    model = _gnn(lib, edge_index, batch, x.shape[0])
    if state is None:
        return numpy_state(model)
    load_numpy_state(lib, model, state)
    # SGD, not Adam: the attention vector has a few entries whose true gradient is 0 (the softmax does not see them),
    # and Adam would turn their rounding noise (1e-11, of either sign) into full-size steps.
    opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        out = model(x)
        loss = lib.nn.functional.cross_entropy(out, y)
        loss.backward()
        history.append([out, loss, {k: p.grad for k, p in model.named_parameters()}])
        opt.step()
    return to_numpy(history), numpy_state(model)


def test_gnn_training_matches_torch():
    state = _train_gnn(torch)
    assert_close_tree(_train_gnn(torch, state), _train_gnn(jitorch, state), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin", "prod"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_aggregation_with_empty_rows(reduce, include_self):
    # Rows 2 and 5 receive nothing: they keep the input's value whether or not include_self is set.
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((12, 3)).astype(np.float32), rng.standard_normal((6, 3)).astype(np.float32),
              rng.standard_normal((6, 3)).astype(np.float32)]
    index = np.array([0, 0, 1, 1, 1, 3, 3, 0, 4, 4, 1, 3])[:, None].repeat(3, 1)

    def run(lib):
        src, base = (lib.tensor(a, requires_grad=True) for a in arrays[:2])
        out = base.scatter_reduce(0, lib.tensor(index), src, reduce=reduce, include_self=include_self)
        return [out, *lib.autograd.grad(out, [src, base], lib.tensor(arrays[2]))]

    assert_close_tree(run(torch), run(jitorch), rtol=1e-5, atol=1e-6)


def test_sparse_adjacency_with_learned_edge_weights():
    rng = np.random.default_rng(2)
    index = np.array([[0, 1, 1, 3, 1], [1, 0, 3, 1, 0]])  # (1, 0) twice: summed by coalesce and by the product
    arrays = [rng.random(5).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32),
              rng.standard_normal((5, 3)).astype(np.float32)]

    def run(lib):
        weights, x = lib.tensor(arrays[0], requires_grad=True), lib.tensor(arrays[1], requires_grad=True)
        adj = lib.sparse_coo_tensor(lib.tensor(index), weights, (5, 5))
        out = lib.sparse.mm(adj, x) + adj @ x + lib.sparse.mm(adj.t(), x)
        degree = lib.sparse.sum(adj, dim=1).to_dense()
        return [out, degree, *lib.autograd.grad((out * lib.tensor(arrays[2])).sum(), [weights, x])]

    assert_close_tree(run(torch), run(jitorch), rtol=1e-5, atol=1e-6)
