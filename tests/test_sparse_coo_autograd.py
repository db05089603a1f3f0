"""The gradient side of sparse_coo tensors against PyTorch: ``register_hook`` (its argument, a replacement it returns),
``retain_grad``, ``register_post_accumulate_grad_hook``, ``autograd.grad`` with respect to a sparse tensor, the
``.grad`` setter (what is assigned is kept) and its identity, ``copy_`` and ``load_state_dict`` into a sparse buffer,
and ``jitorch.compile`` of a module holding a sparse buffer (the GCN pattern), training and under no_grad."""
import numpy as np
import pytest
import torch

import jitorch

pytestmark = [pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning"),
              pytest.mark.filterwarnings("ignore:torch.sparse.SparseTensor:UserWarning")]

I = np.array([[0, 1, 0, 2], [1, 0, 1, 2]])  # (0, 1) twice: uncoalesced
V = np.array([1.0, 2.0, 3.0, -1.0], dtype=np.float32)
RNG = np.random.default_rng(1)
D = RNG.standard_normal((3, 4)).astype(np.float32)
G = RNG.standard_normal((3, 4)).astype(np.float32)


def _np(t):
    return np.asarray(t.detach().numpy())


def leaf(L, coalesce=False):
    s = L.sparse_coo_tensor(L.tensor(I), L.tensor(V), (3, 3))
    return (s.coalesce() if coalesce else s).requires_grad_(True)


def loss(L, s):
    return (L.sparse.mm(s, L.tensor(D)) * L.tensor(G)).sum()


def assert_sparse_same(j, t, flag=True):
    assert j.is_sparse and t.is_sparse and tuple(j.shape) == tuple(t.shape)
    if flag:
        assert j.is_coalesced() == t.is_coalesced()
    np.testing.assert_array_equal(_np(j._indices()), _np(t._indices()))
    np.testing.assert_allclose(_np(j._values()), _np(t._values()), atol=1e-5)


@pytest.mark.parametrize("coalesce", [False, True])
def test_register_hook_sees_torch_s_gradient_and_may_replace_it(coalesce):
    seen, grads = [], []
    for L in (jitorch, torch):
        s = leaf(L, coalesce)
        calls = []
        s.register_hook(lambda g: calls.append(g))
        loss(L, s).backward()
        seen.append(calls[0])
        assert len(calls) == 1
        r = leaf(L, coalesce)
        handle = r.register_hook(lambda g: g * 3)
        loss(L, r).backward()
        handle.remove()
        loss(L, r).backward()  # removed: plain accumulation on top
        grads.append(r.grad)
    assert_sparse_same(*seen)
    np.testing.assert_allclose(_np(grads[0].to_dense()), _np(grads[1].to_dense()), atol=1e-5)


def test_hooks_on_a_non_leaf_sparse_tensor_and_retain_grad():
    out = []
    for L in (jitorch, torch):
        v = L.tensor(V, requires_grad=True)
        s = L.sparse_coo_tensor(L.tensor(I), v, (3, 3)) * 2
        calls = []
        s.register_hook(lambda g: calls.append(g))
        s.retain_grad()
        loss(L, s).backward()
        assert len(calls) == 1 and not s.is_leaf
        out.append((calls[0], s.grad, v.grad))
    assert_sparse_same(out[0][0], out[1][0])
    assert_sparse_same(out[0][1], out[1][1])
    np.testing.assert_allclose(_np(out[0][2]), _np(out[1][2]), atol=1e-5)


def test_post_accumulate_grad_hook_runs_after_accumulation():
    seen = []
    for L in (jitorch, torch):
        s = leaf(L)
        calls = []
        s.register_post_accumulate_grad_hook(lambda t: calls.append((t is s, t.grad.to_dense().clone())))
        loss(L, s).backward()
        loss(L, s).backward()
        assert [c[0] for c in calls] == [True, True]
        seen.append([_np(c[1]) for c in calls])
    for j, t in zip(*seen):
        np.testing.assert_allclose(j, t, atol=1e-5)
    with pytest.raises(RuntimeError, match="non-leaf"):
        (leaf(jitorch) * 2).register_post_accumulate_grad_hook(lambda t: None)
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        leaf(jitorch).detach().register_hook(lambda g: None)


@pytest.mark.parametrize("coalesce", [False, True])
def test_autograd_grad_with_respect_to_a_sparse_tensor(coalesce):
    out = []
    for L in (jitorch, torch):
        s, d = leaf(L, coalesce), L.tensor(D, requires_grad=True)
        gs, gd = L.autograd.grad((L.sparse.mm(s, d) * L.tensor(G)).sum(), (s, d))
        assert s.grad is None
        out.append((gs, gd))
    assert_sparse_same(out[0][0], out[1][0])
    np.testing.assert_allclose(_np(out[0][1]), _np(out[1][1]), atol=1e-5)


def test_autograd_grad_with_a_dict_and_an_unused_sparse_input():
    s, unused = leaf(jitorch), leaf(jitorch)
    got = jitorch.autograd.grad(loss(jitorch, s), {"s": s, "u": unused}, allow_unused=True)
    ts = leaf(torch)
    want = torch.autograd.grad(loss(torch, ts), ts)[0]
    assert got["u"] is None
    assert_sparse_same(got["s"], want)


def test_assigned_grad_is_kept_as_assigned_and_read_back_as_the_same_object():
    for L in (jitorch, torch):
        s = leaf(L)
        g = L.sparse_coo_tensor(L.tensor([[2], [0]]), L.tensor([5.0]), (3, 3))  # outside s's pattern
        s.grad = g
        assert s.grad is g and s.grad is s.grad
    out = []
    for L in (jitorch, torch):  # a backward after the assignment adds into it
        s = leaf(L)
        s.grad = L.sparse_coo_tensor(L.tensor([[2], [0]]), L.tensor([5.0]), (3, 3))
        loss(L, s).backward()
        first = s.grad
        assert s.grad is first
        loss(L, s).backward()
        out.append(s.grad.to_dense())
    np.testing.assert_allclose(_np(out[0]), _np(out[1]), atol=1e-5)


def test_accumulated_grad_is_one_object_across_backwards():
    for L in (jitorch, torch):
        s = leaf(L)
        loss(L, s).backward()
        first = s.grad
        assert s.grad is first
        loss(L, s).backward()
        assert s.grad is first
    j, t = leaf(jitorch), leaf(torch)
    for _ in range(2):
        loss(jitorch, j).backward()
        loss(torch, t).backward()
    np.testing.assert_allclose(_np(j.grad.to_dense()), _np(t.grad.to_dense()), atol=1e-5)
    j.grad = None
    assert j.grad is None


@pytest.mark.parametrize("value", ["dense", "size", "dtype"])
def test_grad_setter_refuses_what_torch_refuses(value):
    for L in (jitorch, torch):
        s = leaf(L)
        bad = {"dense": lambda: L.ones(3, 3),
               "size": lambda: L.sparse_coo_tensor(L.tensor([[0], [0]]), L.tensor([1.0]), (4, 4)),
               "dtype": lambda: L.sparse_coo_tensor(L.tensor([[0], [0]]), L.tensor([1.0], dtype=L.float64),
                                                    (3, 3))}[value]()
        with pytest.raises(RuntimeError, match="attempting to assign a gradient"):
            s.grad = bad


def test_copy_between_sparse_tensors_matches_torch():
    out = []
    for L in (jitorch, torch):
        s = L.sparse_coo_tensor(L.tensor([[0, 1], [1, 0]]), L.tensor([1.0, 2.0]), (3, 3))
        src = L.sparse_coo_tensor(L.tensor(I), L.tensor(V, dtype=L.float64), (3, 3))
        r = s.copy_(src)
        assert r is s
        src._values().mul_(100)  # a copy: later writes into the source do not show
        out.append(s)
    assert_sparse_same(*out)
    assert out[0].dtype is jitorch.float32
    with pytest.raises(RuntimeError, match="copy_\\(\\) between dense and sparse Tensors is not implemented"):
        leaf(jitorch).detach().copy_(jitorch.ones(3, 3))
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        leaf(jitorch).copy_(leaf(jitorch).detach())
    s = leaf(jitorch)
    with jitorch.no_grad():
        s.copy_(leaf(jitorch, True).detach() * 2)
    assert s.requires_grad and s.is_leaf
    loss(jitorch, s).backward()
    assert s.grad is not None


def test_load_state_dict_into_a_sparse_buffer():
    out = []
    for L in (jitorch, torch):
        m = L.nn.Module()
        m.register_buffer("adj", L.sparse_coo_tensor(L.tensor(I), L.tensor(V), (3, 3)).coalesce())
        m2 = L.nn.Module()
        m2.register_buffer("adj", m.adj * 0)
        m2.load_state_dict(m.state_dict())
        out.append(m2.adj)
    assert_sparse_same(*out)


class GCN(jitorch.nn.Module):
    def __init__(self, adj):
        super().__init__()
        self.lin = jitorch.nn.Linear(4, 2)
        self.register_buffer("adj", adj)

    def forward(self, x):
        return jitorch.spmm(self.adj, self.lin(x)).relu()


@pytest.mark.parametrize("coalesce", [True, False])
def test_compiled_module_with_a_sparse_buffer_trains_and_infers(coalesce):
    adj = jitorch.sparse_coo_tensor(jitorch.tensor(I), jitorch.tensor(V), (3, 3))
    model = GCN(adj.coalesce() if coalesce else adj)
    x, g = jitorch.tensor(D), jitorch.tensor(RNG.standard_normal((3, 2)).astype(np.float32))
    compiled = jitorch.compile(model)
    eager_out = model(x)
    eager_out.backward(g)
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    for _ in range(2):  # the second call runs what the first chose
        got = compiled(x)
        np.testing.assert_allclose(_np(got), _np(eager_out), atol=1e-6)
        got.backward(g)
        for p, w in zip(model.parameters(), want):
            np.testing.assert_allclose(_np(p.grad), _np(w), atol=1e-6)
        model.zero_grad()
    with jitorch.no_grad():
        np.testing.assert_allclose(_np(compiled(x)), _np(eager_out), atol=1e-6)
    tm = torch.nn.Linear(4, 2)
    with torch.no_grad():
        tm.weight.copy_(torch.tensor(_np(model.lin.weight)))
        tm.bias.copy_(torch.tensor(_np(model.lin.bias)))
    tadj = torch.sparse_coo_tensor(torch.tensor(I), torch.tensor(V), (3, 3))
    np.testing.assert_allclose(_np(torch.spmm(tadj, tm(torch.tensor(D))).relu()), _np(eager_out), atol=1e-5)
