"""Sums with sparse_coo tensors in ATen's order, against PyTorch 2.13: ``sparse + sparse`` is ATen's merge walk
(the vectorized `walk_positions` against the entry-by-entry replay and against torch, the sub-walks of shared
records at every depth, an SGD momentum buffer growing over steps), and ``dense + sparse`` adds each entry in turn,
``(d + v1) + v2``, wherever it happens: ``dense + s``, ``dense.add_(s)``, a dense ``.grad`` taking a sparse gradient,
the engine's sum of a dense and a sparse gradient, SGD's update; with autograd through it."""
import numpy as np
import pytest
import torch

import jitorch
from helpers import same_error
from jitorch.sparse import _coo_walk
from jitorch.sparse._coo_walk import _replay, walk_positions
from test_sparse_embedding_grad import _np, assert_sparse_same

pytestmark = [pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")]

LIBS = (jitorch, torch)
EPS = 2.0 ** -24  # half an ulp of 1.0 in float32: 1 + eps rounds back to 1


def _lists(rng, trial, n, m, vocab):
    """Two key lists of one of the shapes the walk meets: random, one a prefix of the other, sorted against
    reversed, both reversed, a sorted (coalesced) one against a random one, a shared maximum leading both."""
    kt, ks = rng.integers(0, vocab, n), rng.integers(0, vocab, m)
    kind = trial % 6
    if kind == 1:
        ks = np.concatenate([kt[:m], ks[n:]])
    elif kind == 2:
        kt, ks = np.sort(kt), -np.sort(-ks)
    elif kind == 3:
        kt, ks = -np.sort(-kt), -np.sort(-ks)
    elif kind == 4:
        kt = np.sort(kt)
    elif kind == 5:
        kt[0] = ks[0] = vocab
    return kt, ks


@pytest.mark.parametrize("replay_below,max_work", [(256, 4), (0, 4), (0, 1)], ids=["default", "vectorized", "replayed"])
def test_walk_positions_equal_the_entry_by_entry_walk(monkeypatch, replay_below, max_work):
    # (0, 4): every walk vectorized, however small; (0, 1): sub-walks below the top one replayed.
    monkeypatch.setattr(_coo_walk, "_REPLAY", replay_below)
    monkeypatch.setattr(_coo_walk, "_MAX_WORK", max_work)
    rng = np.random.default_rng(3)
    for trial in range(240):
        vocab = int(rng.choice([2, 3, 40, 10 ** 6]))
        n, m = (int(x) for x in rng.integers(1, 60 if trial % 2 else 900, 2))
        kt, ks = _lists(rng, trial, n, m, vocab)
        for a, b in zip(walk_positions(kt, ks), _replay(kt, ks)):
            np.testing.assert_array_equal(a, b)


def test_walk_positions_of_deep_wide_and_signed_keys():
    rng = np.random.default_rng(4)
    k = 400  # records shared depth after depth: [2k, 0, 2k-1, 1, ...] against [2k, 2k-1, 0, 2k-2, 1, ...]
    t = np.empty(2 * k, np.int64)
    t[0::2], t[1::2] = np.arange(2 * k, k, -1), np.arange(k)
    s = np.empty(2 * k, np.int64)
    s[0], s[1::2], s[2::2] = 2 * k, np.arange(2 * k - 1, k - 1, -1), np.arange(k - 1)
    cases = [(t, s), (rng.integers(-5, 5, 700), rng.integers(-5, 5, 500))]
    wide = rng.integers(-2 ** 62, 2 ** 62, 600)
    cases.append((wide, np.concatenate([rng.choice(wide, 300), rng.integers(-2 ** 62, 2 ** 62, 300)])))
    big_t, big_s = rng.integers(0, 50000, 30000), rng.integers(0, 50000, 3000)
    big_t[9000] = big_s[1000] = 50000  # the largest key in both lists, the usual state of a momentum buffer
    cases += [(big_t, big_s), (np.sort(big_t), big_s)]
    early_t, early_s = big_t.copy(), big_s.copy()
    early_t[1] = early_s[1] = 50001  # a shared maximum right after the first entries: a sub-walk of almost all
    cases.append((early_t, early_s))
    for kt, ks in cases:
        for a, b in zip(walk_positions(kt, ks), _replay(kt, ks)):
            np.testing.assert_array_equal(a, b)


def test_sparse_sums_follow_aten_s_walk():
    rng = np.random.default_rng(11)
    for trial in range(60):  # up to 1500 + 1500 entries, 1-D indices, in place with alpha, coalesced or not
        vocab = int(rng.choice([5, 50, 5000]))
        n, m = int(rng.integers(0, 1500)), int(rng.integers(0, 1500))
        i, j = rng.integers(0, vocab, (1, n)), rng.integers(0, vocab, (1, m))
        if trial % 3 == 1:
            i, j = np.sort(i), np.sort(j)
        elif trial % 3 == 2:
            j[:, :min(n, m)] = i[:, :min(n, m)]
        u, v = rng.standard_normal((n, 2)).astype(np.float32), rng.standard_normal((m, 2)).astype(np.float32)
        sums = []
        for L in LIBS:
            a = L.sparse_coo_tensor(L.tensor(i), L.tensor(u), (vocab, 2))
            a = a.coalesce() if trial % 2 else a
            c = a.clone()
            c.add_(L.sparse_coo_tensor(L.tensor(j), L.tensor(v), (vocab, 2)), alpha=0.7)
            sums.append(c)
        assert_sparse_same(*sums, values_atol=1e-5)  # (coalesce's sums of hundreds of entries round differently)
    for _ in range(20):  # 2-D indices, in place and not
        i, j = rng.integers(0, 3, (2, 9)), rng.integers(0, 3, (2, 7))
        u, v = rng.standard_normal((9, 2)), rng.standard_normal((7, 2))
        sums = []
        for L in LIBS:
            a, b = (L.sparse_coo_tensor(L.tensor(x), L.tensor(y), (3, 3, 2)) for x, y in ((i, u), (j, v)))
            c = a.clone()
            c.add_(b, alpha=-0.5)
            sums.append((a + b, c))
        for j_sum, t_sum in zip(*sums):
            assert_sparse_same(j_sum, t_sum)


def test_a_growing_momentum_buffer_keeps_torch_s_order():
    rng = np.random.default_rng(5)
    table = rng.standard_normal((3000, 4)).astype(np.float32)
    steps = [rng.integers(0, 3000, (40, 25)) for _ in range(6)]
    results = []
    for L in LIBS:
        emb = L.nn.Embedding.from_pretrained(L.tensor(table), freeze=False, sparse=True)
        opt = L.optim.SGD(emb.parameters(), lr=0.1, momentum=0.9)
        for idx in steps:
            opt.zero_grad()
            emb(L.tensor(idx)).pow(2).sum().backward()
            opt.step()
        results.append((opt.state[emb.weight]["momentum_buffer"], _np(emb.weight)))
    assert results[0][0]._nnz() > 4000  # a buffer of several steps' entries, walked against each new gradient
    assert_sparse_same(results[0][0], results[1][0], values_atol=1e-5)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-5, atol=1e-6)


# -- dense + sparse: each entry in turn --------------------------------------------------------------------------
def _duplicates(L, dtype="float32"):
    return L.sparse_coo_tensor(L.tensor([[1, 1]]), L.tensor([[EPS], [EPS]], dtype=getattr(L, dtype)), (4, 1))


ROUNDINGS = {
    "dense + s": lambda L: L.ones(4, 1) + _duplicates(L),
    "add(dense, s)": lambda L: L.add(L.ones(4, 1), _duplicates(L)),
    "dense.add_(s)": lambda L: L.ones(4, 1).add_(_duplicates(L)),
    "float64 sparse into float32": lambda L: L.ones(4, 1) + _duplicates(L, "float64"),
    "float16": lambda L: L.ones(4, 1, dtype=L.float16) + L.sparse_coo_tensor(
        L.tensor([[1] * 4]), L.full((4, 1), 2.0 ** -12, dtype=L.float16), (4, 1)),
}


@pytest.mark.parametrize("case", sorted(ROUNDINGS))
def test_dense_plus_sparse_adds_each_entry_in_turn(case):
    (j, t) = (ROUNDINGS[case](L) for L in LIBS)
    assert str(j.dtype).split(".")[1] == str(t.dtype).split(".")[1]
    np.testing.assert_array_equal(_np(j).astype(np.float64), _np(t).astype(np.float64))


def _leaf_with_dense_grad(L):
    w = L.ones(4, 1, requires_grad=True)
    w.grad = L.ones(4, 1)
    L.nn.functional.embedding(L.tensor([1, 1]), w, sparse=True).backward(L.tensor([[EPS], [EPS]]))
    return w.grad


def _engine_sum(L):
    w = L.ones(4, 1, requires_grad=True)
    s = w * 1.0
    e = L.nn.functional.embedding(L.tensor([1, 1]), s, sparse=True)
    ((e * L.tensor([[EPS], [EPS]])).sum() + s.sum()).backward()
    return w.grad


def _sgd_step(L):
    w = L.ones(4, 1, requires_grad=True)
    opt = L.optim.SGD([w], lr=1.0)
    L.nn.functional.embedding(L.tensor([1, 1]), w, sparse=True).backward(L.tensor([[-EPS], [-EPS]]))
    opt.step()
    return w


def _sgd_dense_momentum(L):
    w = L.ones(4, 1, requires_grad=True)
    opt = L.optim.SGD([w], lr=1.0, momentum=1.0)
    (w * 0.0).sum().backward()  # a dense first gradient: a dense momentum buffer
    opt.step()
    opt.zero_grad()
    L.nn.functional.embedding(L.tensor([1, 1]), w, sparse=True).backward(L.tensor([[EPS], [EPS]]))
    w.data.fill_(1.0)
    opt.state[w]["momentum_buffer"].fill_(1.0)
    opt.step()
    return opt.state[w]["momentum_buffer"]


@pytest.mark.parametrize("where", [_leaf_with_dense_grad, _engine_sum, _sgd_step, _sgd_dense_momentum],
                         ids=lambda f: f.__name__.strip("_"))
def test_sparse_gradients_join_dense_ones_entry_by_entry(where):
    j, t = (_np(where(L)) for L in LIBS)
    np.testing.assert_array_equal(j, t)


@pytest.mark.parametrize("alpha", [1, -1])
def test_many_repeated_rows_add_in_turn_at_scale(alpha):
    # Past np.add.at's size: by levels (each row's first entry, then its second...), still bit for bit torch's.
    rng = np.random.default_rng(6)
    dense = rng.standard_normal((500, 8)).astype(np.float32)
    ids = rng.integers(0, 60, (1, 3000))  # about 50 entries per row
    values = (rng.standard_normal((3000, 8)) * 1e-3).astype(np.float32)
    out = []
    for L in LIBS:
        s = L.sparse_coo_tensor(L.tensor(ids), L.tensor(values), (500, 8))
        d = L.tensor(dense)
        out.append((_np(L.add(d, s, alpha=alpha)), _np(d.clone().add_(s, alpha=alpha))))
    for j, t in zip(*out):
        np.testing.assert_array_equal(j, t)


@pytest.mark.parametrize("size,sparse_dims,nnz", [((30, 20, 8), 2, 4000), ((50,), 1, 9000), ((3,), 0, 5)],
                         ids=["two_sparse_dims", "no_dense_dims", "no_sparse_dims"])
def test_dense_plus_sparse_of_every_layout(size, sparse_dims, nnz):
    rng = np.random.default_rng(8)
    dense = rng.standard_normal(size).astype(np.float32)
    ids = rng.integers(0, 5, (sparse_dims, nnz))
    values = (rng.standard_normal((nnz,) + size[sparse_dims:]) * 1e-3).astype(np.float32)
    j, t = (_np(L.tensor(dense) + L.sparse_coo_tensor(L.tensor(ids), L.tensor(values), size)) for L in LIBS)
    np.testing.assert_array_equal(j, t)  # (no sparse dims: ATen adds the entries' sum)


def test_dense_plus_sparse_is_differentiable_in_both():
    rng = np.random.default_rng(7)
    dense, values = rng.standard_normal((5, 3)), rng.standard_normal((4, 3))
    ids, upstream = np.array([[3, 1, 3, 0]]), rng.standard_normal((5, 3))
    grads = []
    for L in LIBS:
        d = L.tensor(dense, requires_grad=True)
        v = L.tensor(values, requires_grad=True)
        s = L.sparse_coo_tensor(L.tensor(ids), v, (5, 3))
        out = d + s
        assert out.requires_grad and not out.is_sparse
        out.backward(L.tensor(upstream))
        grads.append((_np(out), _np(d.grad), _np(v.grad)))
    for j, t in zip(*grads):
        np.testing.assert_allclose(j, t, rtol=1e-12)
    same_error(lambda L: L.ones(5, 1) + L.sparse_coo_tensor(L.tensor(ids), L.ones(4, 3), (5, 3)))  # no broadcasting
