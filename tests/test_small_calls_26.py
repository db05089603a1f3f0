"""The direct paths of small eager calls: top-k's native head with its two rows' results (`_sorting._quick_topk`),
the small variance over trailing dims (`ops.reduction._var_kernel`), ``chunk``'s pieces (`_movement_split._pieces`),
nll_loss's one-reduction range check and the row-offset take of matrices (`sorting_gather.take_checked`): values,
indices, node names, gradients and errors as torch's, and as the general paths give them."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops import sorting_gather

F, TF = jitorch.nn.functional, torch.nn.functional


def _pair(a, requires_grad=False):
    return (jitorch.tensor(a, requires_grad=requires_grad), torch.tensor(a, requires_grad=requires_grad))


def _same(got, want):
    g, w = got.detach().numpy(), want.detach().numpy()
    assert g.dtype == w.dtype and g.shape == w.shape
    assert g.tobytes() == w.tobytes()


@pytest.mark.parametrize("shape", [(32, 32), (5,), (3, 4, 7), (1, 1), (2, 17)])
@pytest.mark.parametrize("k", [0, 1, 3, 5])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_quick_path_matches_torch(shape, k, largest):
    if k > shape[-1]:
        return
    x, tx = _pair(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    got, want = x.topk(k, largest=largest), tx.topk(k, largest=largest)
    _same(got.values, want.values)
    _same(got.indices, want.indices)
    assert type(got).__name__ == "topk"


@pytest.mark.parametrize("largest", [True, False])
def test_topk_ties_nan_and_layouts_keep_torch_answer(largest):
    a = np.array([[1.0, 2.0, 2.0, 3.0, 3.0, np.nan], [0.0, -0.0, 1.0, 1.0, 5.0, 5.0]], np.float32)
    x, tx = _pair(a)
    for k in range(7):
        got, want = x.topk(k, largest=largest), tx.topk(k, largest=largest)
        _same(got.values, want.values)
        _same(got.indices, want.indices)
    b = np.random.default_rng(1).standard_normal((10, 12)).astype(np.float32)
    y, ty = _pair(b)
    for got, want in ((y.t().topk(3), ty.t().topk(3)), (y[2:5].topk(2), ty[2:5].topk(2)),
                      (y.topk(3, 0), ty.topk(3, 0)), (y.topk(3, sorted=False), ty.topk(3, sorted=False))):
        _same(got.values, want.values)
        _same(got.indices, want.indices)


def test_topk_quick_path_records_the_graph():
    a = np.random.default_rng(2).standard_normal((8, 10)).astype(np.float32)
    x, tx = _pair(a, requires_grad=True)
    got, want = x.topk(3), tx.topk(3)
    assert got.values.grad_fn.name() == want.values.grad_fn.name() == "TopkBackward0"
    assert got.indices.grad_fn is None and not got.indices.requires_grad
    (got.values * got.values).sum().backward()
    (want.values * want.values).sum().backward()
    _same(x.grad, tx.grad)
    with jitorch.no_grad():
        assert x.topk(3).values.grad_fn is None


def test_topk_quick_path_errors_as_torch():
    x, tx = _pair(np.zeros((3, 4), np.float32))
    for call in (lambda t: t.topk(5), lambda t: t.topk(-1), lambda t: t.topk(2, 2)):
        with pytest.raises(Exception) as theirs:
            call(tx)
        with pytest.raises(type(theirs.value)):
            call(x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,dim", [((32, 32), -1), ((3, 4, 7), (1, 2)), ((5,), 0), ((4, 6), 1), ((2, 3), 0)])
@pytest.mark.parametrize("correction", [0, 1, 0.5, 2])
def test_small_var_matches_torch(dtype, shape, dim, correction):
    rng = np.random.default_rng(3)
    for scale in (1.0, 1000.0):
        x, tx = _pair((rng.standard_normal(shape) * scale + scale).astype(dtype))
        for keepdim in (False, True):
            got = x.var(dim, correction=correction, keepdim=keepdim)
            want = tx.var(dim, correction=correction, keepdim=keepdim)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-6 if dtype == np.float32 else 1e-12)
            assert got.dtype == x.dtype and got.shape == want.shape


def test_small_var_edges_as_torch():
    x, tx = _pair(np.full((4, 8), 1000.1, np.float32))
    _same(x.var(-1), tx.var(-1))  # a constant row: exactly 0, never negative
    x, tx = _pair(np.array([[1.0, np.inf], [np.nan, 2.0], [1.0, 3.0]], np.float32))
    _same(x.var(-1), tx.var(-1))
    x, tx = _pair(np.arange(6, dtype=np.float32).reshape(2, 3))
    with pytest.warns(UserWarning):
        got = x.var(-1, correction=3)  # no degrees of freedom: inf or nan, as torch, with its warning
    want = tx.var(-1, correction=3)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    s, ts = _pair(np.float32(3.0))
    _same(s.var(correction=0), ts.var(correction=0))
    g, tg = _pair(np.random.default_rng(4).standard_normal((5, 6)).astype(np.float32), requires_grad=True)
    got, want = g.var(-1), tg.var(-1)
    assert got.grad_fn.name() == want.grad_fn.name()
    got.sum().backward()
    want.sum().backward()
    np.testing.assert_allclose(g.grad.numpy(), tg.grad.numpy(), rtol=1e-5)


@pytest.mark.parametrize("shape", [(32, 32), (5,), (3, 4, 7), (7, 2)])
@pytest.mark.parametrize("chunks", [1, 2, 3, 5])
def test_chunk_pieces_match_torch(shape, chunks):
    x, tx = _pair(np.arange(np.prod(shape), dtype=np.float32).reshape(shape))
    for dim in range(-len(shape), len(shape)):
        got, want = x.chunk(chunks, dim), tx.chunk(chunks, dim)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
            assert g.stride() == w.stride() and g._base is x


def test_chunk_pieces_share_one_node_and_refuse_inplace_writes():
    x, tx = _pair(np.arange(24, dtype=np.float32).reshape(6, 4), requires_grad=True)
    got, want = x.chunk(2), tx.chunk(2)
    assert got[0].grad_fn is got[1].grad_fn and got[0].grad_fn.name() == want[0].grad_fn.name()
    (got[0] * 2 + got[1].sum()).sum().backward()
    (want[0] * 2 + want[1].sum()).sum().backward()
    _same(x.grad, tx.grad)
    p = x.detach().clone().requires_grad_().chunk(2)[0]
    with pytest.raises(RuntimeError, match="Output 0 of Split is a view"):
        p.add_(1)
    with pytest.raises(RuntimeError):
        jitorch.zeros(4).chunk(0)
    with pytest.raises(IndexError):
        jitorch.zeros(4).chunk(2, 1)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_range_check_as_torch(reduction):
    rng = np.random.default_rng(5)
    x, tx = _pair(rng.standard_normal((7, 3)).astype(np.float32))
    for bad in (3, -1, -100):
        t = rng.integers(0, 3, 7)
        t[-1] = bad
        jt, tt = jitorch.tensor(t), torch.tensor(t)
        if bad == -100:  # the default ignore_index: ignored, not out of range
            np.testing.assert_allclose(F.cross_entropy(x, jt, reduction=reduction).numpy(),
                                       TF.cross_entropy(tx, tt, reduction=reduction).numpy(), rtol=1e-6)
            continue
        with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
            F.cross_entropy(x, jt, reduction=reduction)
        with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
            F.nll_loss(x, jt, reduction=reduction)
    jt = jitorch.tensor([0, 1, 2, 1], dtype=jitorch.uint8)
    _same(F.nll_loss(x[:4], jt), TF.nll_loss(tx[:4], torch.tensor([0, 1, 2, 1], dtype=torch.uint8)))
    _same(F.nll_loss(x, jitorch.tensor([0, 1, 2, 1, 0, 2, 1])), TF.nll_loss(tx, torch.tensor([0, 1, 2, 1, 0, 2, 1])))


def test_row_offset_take_of_a_matrix():
    a = np.random.default_rng(6).standard_normal((5, 9)).astype(np.float32)
    index = np.random.default_rng(7).integers(0, 9, (5, 3))
    np.testing.assert_array_equal(sorting_gather.take_checked(a, index, 1), np.take_along_axis(a, index, 1))
    x, tx = _pair(a)
    _same(x.gather(1, jitorch.tensor(index)), tx.gather(1, torch.tensor(index)))
    _same(x.gather(-1, jitorch.tensor(index)), tx.gather(-1, torch.tensor(index)))
    with pytest.raises(RuntimeError):
        x.gather(1, jitorch.tensor(index) + 9)
    with pytest.raises(TypeError, match="argument 'index' must be Tensor"):
        x.gather(1, [[0]])
