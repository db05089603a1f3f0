"""A pygcn-style script (Kipf's GCN: a normalized sparse adjacency from an edge list, layers ``spmm(adj, x @ W)``,
Adam) runs unchanged under ``import jitorch as torch`` and trains as under PyTorch: losses, predictions and every
parameter after each step agree."""
import math

import numpy as np
import pytest
import torch

import jitorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

RNG = np.random.default_rng(0)
N, FEATURES, HIDDEN, CLASSES = 40, 12, 16, 3
EDGES = RNG.integers(0, N, (120, 2))
X = RNG.standard_normal((N, FEATURES)).astype(np.float32)
LABELS = RNG.integers(0, CLASSES, N)


def normalized_adjacency_scipy_style(lib):
    """pygcn's pipeline: symmetric adjacency plus self loops, row-normalized on the host, then handed to torch as
    ``torch.sparse.FloatTensor(indices, values, shape)``."""
    import scipy.sparse as sp

    adj = sp.coo_matrix((np.ones(len(EDGES)), (EDGES[:, 0], EDGES[:, 1])), shape=(N, N), dtype=np.float32)
    adj = adj + adj.T.multiply(adj.T > adj) - adj.multiply(adj.T > adj)
    adj = adj + sp.eye(N)
    rowsum = np.array(adj.sum(1)).flatten()
    adj = sp.diags(np.power(rowsum, -1.0)).dot(adj).tocoo().astype(np.float32)
    indices = lib.from_numpy(np.vstack((adj.row, adj.col)).astype(np.int64))
    values = lib.from_numpy(adj.data)
    return lib.sparse.FloatTensor(indices, values, lib.Size(adj.shape))


def normalized_adjacency_torch_style(lib):
    """The same normalization written with sparse tensor ops: D^-1/2 (A + I) D^-1/2 from the edge list."""
    edges = lib.tensor(EDGES.T)
    loops = lib.arange(N).repeat(2, 1)
    index = lib.cat([edges, edges.flip(0), loops], dim=1)
    adj = lib.sparse_coo_tensor(index, lib.ones(index.shape[1]), (N, N)).coalesce()
    deg = lib.sparse.sum(adj, dim=1).to_dense()
    scale = deg.pow(-0.5)
    i = adj.indices()
    return lib.sparse_coo_tensor(i, adj.values() * scale[i[0]] * scale[i[1]], adj.shape)


def build(lib, weights):
    nn, F = lib.nn, lib.nn.functional

    class GraphConvolution(nn.Module):
        def __init__(self, in_features, out_features):
            super().__init__()
            self.weight = nn.Parameter(lib.FloatTensor(in_features, out_features))
            self.bias = nn.Parameter(lib.FloatTensor(out_features))
            stdv = 1.0 / math.sqrt(self.weight.size(1))
            self.weight.data.uniform_(-stdv, stdv)
            self.bias.data.uniform_(-stdv, stdv)

        def forward(self, input, adj):
            support = lib.mm(input, self.weight)
            output = lib.spmm(adj, support)
            return output + self.bias

    class GCN(nn.Module):
        def __init__(self, nfeat, nhid, nclass, dropout):
            super().__init__()
            self.gc1 = GraphConvolution(nfeat, nhid)
            self.gc2 = GraphConvolution(nhid, nclass)
            self.dropout = dropout

        def forward(self, x, adj):
            x = F.relu(self.gc1(x, adj))
            x = F.dropout(x, self.dropout, training=self.training)
            x = self.gc2(x, adj)
            return F.log_softmax(x, dim=1)

    model = GCN(FEATURES, HIDDEN, CLASSES, dropout=0.0)
    with lib.no_grad():
        for p, w in zip(model.parameters(), weights):
            p.copy_(lib.tensor(w))
    return model


def train(lib, make_adj, weights, steps=6):
    adj = make_adj(lib)
    features, labels = lib.tensor(X), lib.tensor(LABELS)
    idx_train = lib.LongTensor(range(25))
    model = build(lib, weights)
    optimizer = lib.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    losses = []
    for _ in range(steps):
        model.train()
        optimizer.zero_grad()
        output = model(features, adj)
        loss_train = lib.nn.functional.nll_loss(output[idx_train], labels[idx_train])
        loss_train.backward()
        optimizer.step()
        losses.append(loss_train.item())
    model.eval()
    preds = model(features, adj).max(1)[1]
    return losses, [p.detach().numpy().copy() for p in model.parameters()], preds.numpy()


@pytest.mark.parametrize("make_adj", [normalized_adjacency_scipy_style, normalized_adjacency_torch_style],
                         ids=["scipy_normalized", "sparse_ops_normalized"])
def test_gcn_trains_as_under_torch(make_adj):
    shapes = [(FEATURES, HIDDEN), (HIDDEN,), (HIDDEN, CLASSES), (CLASSES,)]
    weights = [RNG.uniform(-0.3, 0.3, shape).astype(np.float32) for shape in shapes]
    expected = train(torch, make_adj, weights)
    got = train(jitorch, make_adj, weights)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-6)
    assert expected[0][-1] < expected[0][0]  # it learned something
    for g, e in zip(got[1], expected[1]):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(got[2], expected[2])
    adj_j, adj_t = make_adj(jitorch), make_adj(torch)
    np.testing.assert_allclose(adj_j.to_dense().numpy(), adj_t.to_dense().numpy(), rtol=1e-6)


def test_attention_weights_as_sparse_values_get_gradients():
    """A GAT-style layer: per-edge scores become the values of a sparse matrix whose product aggregates neighbours;
    the scores' parameters get torch's gradients."""
    grads, weights = [], RNG.standard_normal(2 * FEATURES).astype(np.float32)
    for lib in (jitorch, torch):
        a = lib.tensor(weights, requires_grad=True)
        src, dst = lib.tensor(EDGES[:, 0]), lib.tensor(EDGES[:, 1])
        h = lib.tensor(X)
        scores = lib.exp(lib.nn.functional.leaky_relu(lib.cat([h[src], h[dst]], dim=1) @ a, 0.2))
        att = lib.sparse_coo_tensor(lib.stack([src, dst]), scores, (N, N))
        rowsum = lib.sparse.mm(att, lib.ones(N, 1))
        out = lib.sparse.mm(att, h) / (rowsum + 1e-9)
        out.pow(2).sum().backward()
        grads.append(a.grad.numpy().copy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-4, atol=1e-5)
