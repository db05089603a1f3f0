"""``sparse=True`` embeddings against PyTorch 2.13: the weight's gradient is a sparse_coo tensor (its indices in torch's
order, uncoalesced, its values), for ``F.embedding``/``nn.Embedding`` and ``F.embedding_bag``/``nn.EmbeddingBag``; how
it accumulates across backward calls and within one graph (ATen's merge walk of two entry lists), beside dense
gradients, through ``zero_grad`` and ``Module.double()``; ``autograd.grad``, double backward, hooks and a computed
weight. The training stack (optimizers, clipping, ``GradScaler``, compile) is in test_sparse_embedding_training.py."""
import numpy as np
import pytest
import torch

import jitorch
from helpers import same_error

pytestmark = [pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning"),
              pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning")]

RNG = np.random.default_rng(7)
W = RNG.standard_normal((10, 3)).astype(np.float32)
IDX = np.array([[4, 1, 4], [0, 2, 1]])
G = RNG.standard_normal((2, 3, 3)).astype(np.float32)
LIBS = (jitorch, torch)


def _np(t):
    return np.asarray(t.detach().numpy())


def assert_sparse_same(j, t, values_atol=1e-6):
    """Layout, size, flag, the raw indices (torch's order) and values agree."""
    assert j.is_sparse and t.is_sparse and tuple(j.shape) == tuple(t.shape)
    assert j.is_coalesced() == t.is_coalesced()
    np.testing.assert_array_equal(_np(j._indices()), _np(t._indices()))
    assert tuple(j._values().shape) == tuple(t._values().shape)
    np.testing.assert_allclose(_np(j._values()), _np(t._values()), atol=values_atol, rtol=1e-6)


def _weight(L, dtype="float32"):
    return L.tensor(W.astype(dtype), requires_grad=True)


INDEX_CASES = {"2d": IDX, "empty": np.zeros((2, 0), np.int64), "int32": IDX.astype(np.int32),
               "repeated": np.array([1, 1])}
# (torch's backward fails for a 0-d index with a padding_idx: that pair is left out)
LOOKUP_CASES = [(name, pad) for name in INDEX_CASES for pad in (None, 1, -9)] + [("0d", None)]
INDEX_CASES["0d"] = np.array(3)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case,padding_idx", LOOKUP_CASES)
def test_embedding_grad_is_torch_s_sparse_tensor(dtype, case, padding_idx):
    idx = INDEX_CASES[case]
    g = RNG.standard_normal(idx.shape + (3,)).astype(dtype)
    grads = []
    for L in LIBS:
        w = _weight(L, dtype)
        L.nn.functional.embedding(L.tensor(idx), w, padding_idx=padding_idx, sparse=True).backward(L.tensor(g))
        assert w.grad.grad_fn is None and not w.grad.requires_grad
        grads.append(w.grad)
    assert grads[0].dtype.name == str(grads[1].dtype).split(".")[1]
    assert_sparse_same(*grads)


def test_embedding_module_and_functional_agree_and_name_the_node():
    for L in LIBS:
        emb = L.nn.Embedding.from_pretrained(L.tensor(W), freeze=False, sparse=True)
        out = emb(L.tensor(IDX))
        assert type(out.grad_fn).__name__ == "EmbeddingBackward0"
        out.backward(L.tensor(G))
        np.testing.assert_allclose(_np(emb.weight.grad.to_dense()), _dense_grad(L), atol=1e-6)


def _dense_grad(L):
    w = _weight(L)
    L.nn.functional.embedding(L.tensor(IDX), w).backward(L.tensor(G))
    return _np(w.grad)


BAG_IDX, BAG_OFF = np.array([1, 2, 4, 5, 4, 3, 2, 6]), np.array([0, 3, 3, 5])


@pytest.mark.parametrize("mode,per_sample,padding_idx", [("mean", False, None), ("sum", False, None),
                                                         ("sum", True, None), ("mean", False, 4), ("sum", True, 2)])
def test_embedding_bag_grad_spreads_each_bag_to_its_entries(mode, per_sample, padding_idx):
    g = RNG.standard_normal((4, 3)).astype(np.float32)
    psw = RNG.standard_normal(8).astype(np.float32)
    grads = []
    for L in LIBS:
        bag = L.nn.EmbeddingBag.from_pretrained(L.tensor(W), freeze=False, mode=mode, sparse=True,
                                                padding_idx=padding_idx)
        kw = {"per_sample_weights": L.tensor(psw)} if per_sample else {}
        bag(L.tensor(BAG_IDX), L.tensor(BAG_OFF), **kw).backward(L.tensor(g))
        grads.append(bag.weight.grad)
    assert_sparse_same(*grads)


def test_embedding_bag_of_a_2d_input():
    grads = []
    for L in LIBS:
        w = _weight(L)
        L.nn.functional.embedding_bag(L.tensor(IDX), w, mode="mean", sparse=True).backward(L.tensor(G[:, 0]))
        grads.append(w.grad)
    assert_sparse_same(*grads)


@pytest.mark.parametrize("bag", [False, True])
def test_scale_grad_by_freq_is_refused_at_backward_as_torch(bag):
    def run(L):
        w = _weight(L)
        F = L.nn.functional
        out = F.embedding_bag(L.tensor(IDX), w, mode="sum", scale_grad_by_freq=True, sparse=True) if bag else \
            F.embedding(L.tensor(IDX), w, scale_grad_by_freq=True, sparse=True)
        out.sum().backward()
    same_error(run)


def test_out_of_range_indices_raise_index_error():
    for L in LIBS:
        for bad in ([10], [-1]):
            with pytest.raises(IndexError, match="index out of range in self"):
                L.nn.functional.embedding(L.tensor(bad), _weight(L), sparse=True)


# -- accumulation -------------------------------------------------------------------------------------------------
LOOKUPS = [(IDX, G), (np.array([5, 3]), G[0, :2]), (np.array([3, 5, 1]), G[1]), (np.array([9]), G[0, :1])]


@pytest.mark.parametrize("contiguous", [True, False], ids=["grad_outputs", "sum"])
def test_backward_calls_accumulate_as_torch_s_merge(contiguous):
    results = []
    for L in LIBS:
        w = _weight(L)
        first = None
        for idx, g in LOOKUPS:
            out = L.nn.functional.embedding(L.tensor(idx), w, sparse=True)
            (out.backward(L.tensor(g)) if contiguous else (out * 2).sum().backward())
            first = w.grad if first is None else first
        assert w.grad is first  # accumulated into the same tensor
        results.append(w.grad)
    assert_sparse_same(*results)


@pytest.mark.parametrize("how", ["backward", "create_graph", "grad_create_graph"])
@pytest.mark.parametrize("contiguous", [True, False], ids=["weighted", "sum"])
def test_two_lookups_of_one_table_in_one_graph(contiguous, how):
    # Two sparse gradients meet in the engine: contiguous values merge, expanded ones (a sum's) are concatenated;
    # torch's input buffer puts the newer one first, the older one first while the backward records.
    results = []
    for L in LIBS:
        w = _weight(L)
        a = L.nn.functional.embedding(L.tensor([3, 1, 7]), w, sparse=True)
        b = L.nn.functional.embedding(L.tensor([1, 3, 0]), w, sparse=True)
        loss = (a * L.tensor(G[0])).sum() + (b * L.tensor(G[1])).sum() if contiguous else a.sum() + 2 * b.sum()
        if how == "grad_create_graph":
            results.append(L.autograd.grad(loss, w, create_graph=True)[0])
        else:
            loss.backward(create_graph=how == "create_graph")
            results.append(w.grad)
    assert_sparse_same(*results)


def _coalescing_hook(L, flat):
    def hook(g):
        c = g.coalesce()
        values = c._values().t().contiguous().t() if flat else c._values()  # a column-major copy when ``flat``
        return L.sparse_coo_tensor(c._indices(), values, c.shape, is_coalesced=True)
    return hook


@pytest.mark.parametrize("case", ["coalesced", "coalesced_create_graph", "strided_values", "one_entry",
                                  "one_entry_create_graph"])
def test_the_first_stored_grad_is_flagged_as_torch_s(case):
    # AccumulateGrad's shallow copy is coalesced only below two entries; its clone (create_graph, strided values)
    # keeps the flag.
    flags = []
    for L in LIBS:
        w = _weight(L)
        idx = [3] if case.startswith("one_entry") else [3, 1, 3]
        if not case.startswith("one_entry"):
            w.register_hook(_coalescing_hook(L, case == "strided_values"))
        (L.nn.functional.embedding(L.tensor(idx), w, sparse=True) ** 2).sum().backward(
            create_graph=case.endswith("create_graph"))
        flags.append(w.grad)
    assert_sparse_same(*flags)


@pytest.mark.parametrize("empty", ["left", "right"])
def test_a_sum_with_an_empty_operand_owns_its_memory(empty):
    results = []
    for L in LIBS:
        e = L.sparse_coo_tensor(L.zeros(1, 0, dtype=L.int64), L.zeros(0, 2), (4, 2))
        b = L.sparse_coo_tensor(L.tensor([[1, 2]]), L.ones(2, 2), (4, 2))
        c = e + b if empty == "left" else b + e
        c._values().mul_(5)
        c._indices().fill_(0)
        results.append(b)
    assert_sparse_same(*results)


def test_a_zeroed_sparse_grad_does_not_share_the_next_gradient():
    # zero_grad(set_to_none=False) leaves an empty .grad: the next gradient is added into it as a copy, so neither
    # the caller's upstream gradient nor an in-place unscale of .grad reaches the other.
    results = []
    for L in LIBS:
        emb = L.nn.Embedding.from_pretrained(L.tensor(W), freeze=False, sparse=True)
        emb(L.tensor([1, 2])).sum().backward()
        emb.zero_grad(set_to_none=False)
        upstream = L.ones(2, 3)
        emb(L.tensor([3, 4])).backward(upstream)
        emb.weight.grad._values().mul_(0.5)  # as GradScaler.unscale_
        upstream.mul_(100)
        results.append((emb.weight.grad, _np(upstream)))
    assert_sparse_same(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


@pytest.mark.parametrize("order", ["same_graph", "sparse_then_dense", "dense_then_sparse"])
def test_a_dense_gradient_and_a_sparse_one_sum_to_a_dense_grad(order):
    results = []
    for L in LIBS:
        w = _weight(L)

        def sparse_part():
            return (L.nn.functional.embedding(L.tensor(IDX), w, sparse=True) * L.tensor(G)).sum()

        def dense_part():
            return (w * w).sum()
        if order == "same_graph":
            (dense_part() + sparse_part()).backward()
        else:
            parts = [sparse_part, dense_part] if order == "sparse_then_dense" else [dense_part, sparse_part]
            for part in parts:
                part().backward()
        assert not w.grad.is_sparse
        results.append(_np(w.grad))
    np.testing.assert_allclose(*results, atol=1e-5)


@pytest.mark.parametrize("where", ["optimizer", "module"])
def test_zero_grad_empties_the_sparse_grad_or_drops_it(where):
    states = []
    for L in LIBS:
        emb = L.nn.Embedding.from_pretrained(L.tensor(W), freeze=False, sparse=True)
        opt = L.optim.SGD(emb.parameters(), lr=0.1)
        zero = opt.zero_grad if where == "optimizer" else emb.zero_grad
        emb(L.tensor(IDX)).backward(L.tensor(G))
        grad = emb.weight.grad
        zero(set_to_none=False)
        assert emb.weight.grad is grad and grad._nnz() == 0 and grad.is_coalesced()
        emb(L.tensor([2, 2])).backward(L.tensor(G[0, :2]))
        states.append(emb.weight.grad)
        zero()
        assert emb.weight.grad is None
    assert_sparse_same(*states)


def test_a_sparse_gradient_can_be_assigned_to_a_dense_parameter():
    for L in LIBS:
        p = L.nn.Parameter(L.zeros(6, 3))
        p.grad = L.sparse_coo_tensor(L.tensor([[1]]), L.ones(1, 3), (6, 3))
        assert p.grad.is_sparse
        with pytest.raises(RuntimeError):
            p.grad = L.sparse_coo_tensor(L.tensor([[1]]), L.ones(1, 2), (6, 2))


# -- autograd ----------------------------------------------------------------------------------------------------
def test_autograd_grad_is_sparse_and_differentiable():
    firsts, seconds, through = [], [], []
    for L in LIBS:
        w, g = _weight(L), L.tensor(G, requires_grad=True)
        (grad,) = L.autograd.grad(L.nn.functional.embedding(L.tensor(IDX), w, sparse=True), w, g, create_graph=True)
        assert grad.requires_grad
        firsts.append(grad)
        (L.sparse.sum(grad * 3)).backward()  # reaches the upstream gradient
        seconds.append(_np(g.grad))
        w2 = _weight(L)
        (grad2,) = L.autograd.grad((L.nn.functional.embedding(L.tensor(IDX), w2, sparse=True) ** 2).sum(), w2,
                                   create_graph=True)
        L.sparse.sum(grad2).backward()  # and the weight again, through a second sparse lookup gradient
        through.append(w2.grad)
    assert_sparse_same(*firsts)
    np.testing.assert_allclose(*seconds)
    assert_sparse_same(*through)


def test_hooks_on_the_weight_see_the_sparse_gradient():
    seen, replaced, errors = [], [], []
    for L in LIBS:
        w = _weight(L)
        calls = []
        w.register_hook(lambda gr: calls.append(gr))
        w.register_post_accumulate_grad_hook(lambda p: calls.append(p.grad.is_sparse))
        L.nn.functional.embedding(L.tensor(IDX), w, sparse=True).backward(L.tensor(G))
        seen.append(calls[0])
        assert calls[1] is True
        w = _weight(L)
        w.register_hook(lambda gr: gr * 2)
        L.nn.functional.embedding(L.tensor(IDX), w, sparse=True).backward(L.tensor(G))
        replaced.append(w.grad)
        w = _weight(L)
        w.register_hook(lambda gr: gr.to_dense())
        with pytest.raises(RuntimeError) as info:
            L.nn.functional.embedding(L.tensor(IDX), w, sparse=True).backward(L.tensor(G))
        errors.append(str(info.value))
    assert_sparse_same(*seen)
    assert_sparse_same(*replaced)
    assert errors[0] == errors[1]  # "hook '<lambda>' has changed the type of value (was torch.sparse.FloatTensor ..."


def test_a_computed_weight_passes_the_sparse_gradient_back():
    grads = []
    for L in LIBS:
        w = _weight(L)
        scaled = w * 2
        scaled.retain_grad()
        L.nn.functional.embedding(L.tensor(IDX), scaled, sparse=True).backward(L.tensor(G))
        grads.append((scaled.grad, w.grad))
    for j, t in zip(*grads):
        assert_sparse_same(j, t)


def test_module_conversion_converts_the_sparse_grad():
    grads = []
    for L in LIBS:
        emb = L.nn.Embedding.from_pretrained(L.tensor(W), freeze=False, sparse=True)
        emb(L.tensor(IDX)).backward(L.tensor(G))
        emb.double()
        grads.append(emb.weight.grad)
    assert grads[0].dtype is jitorch.float64
    assert_sparse_same(*grads)
