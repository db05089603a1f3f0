"""split/chunk/unbind share one autograd node (torch's SplitBackward0, SplitWithSizesBackward0, UnbindBackward0)
whose backward joins the outputs' gradients in one cat/stack: values, gradients, node identity and names, double
backward, the in-place refusals of multi-output views and the absence of full-size gradient sums, against torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import check_op, gradcheck_op, gradgradcheck_op, make_array, same_error
from training_helpers import zero

# (name, shape, function of (lib, x) returning the pieces)
PIECES = [
    ("split_int_dim0", (6, 4), lambda lib, x: x.split(2)),
    ("split_int_uneven_last", (3, 7), lambda lib, x: x.split(3, -1)),
    ("split_int_one_piece", (3, 5), lambda lib, x: lib.split(x, 9, 1)),
    ("split_sizes_with_empty", (2, 5, 3), lambda lib, x: x.split([1, 0, 4], dim=-2)),
    ("split_with_sizes", (4, 6), lambda lib, x: x.split_with_sizes([3, 1, 2], 1)),
    ("split_empty_dim", (0, 3), lambda lib, x: x.split(2)),
    ("chunk", (7, 2), lambda lib, x: x.chunk(3)),
    ("chunk_more_than_size", (2, 3), lambda lib, x: lib.chunk(x, 4, 0)),
    ("chunk_empty_dim", (3, 0), lambda lib, x: x.chunk(3, -1)),
    ("unbind_dim0", (4, 3), lambda lib, x: x.unbind(0)),
    ("unbind_neg", (2, 3, 4), lambda lib, x: lib.unbind(x, -2)),
    ("unbind_1d", (5,), lambda lib, x: x.unbind()),
    ("tensor_split_sections", (7, 3), lambda lib, x: x.tensor_split(3)),
    ("tensor_split_indices", (3, 8), lambda lib, x: lib.tensor_split(x, [2, 5, 5], dim=1)),
    ("hsplit", (2, 6), lambda lib, x: x.hsplit(3)),
    ("vsplit", (4, 3), lambda lib, x: lib.vsplit(x, [1])),
]
IDS = [p[0] for p in PIECES]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("name,shape,fn", PIECES, ids=IDS)
def test_values_and_gradients_match_torch(name, shape, fn, layout, dtype):
    x = make_array(shape, dtype, np.random.default_rng(len(name)))
    check_op(lambda t: fn(jitorch, t), lambda t: fn(torch, t), [x], layout=layout, seed=3)


@pytest.mark.parametrize("name,shape,fn", PIECES, ids=IDS)
def test_only_some_outputs_used(name, shape, fn):
    # The unused pieces get zeros (torch materializes them too); the used ones their random upstream gradients.
    x = make_array(shape, "float64", np.random.default_rng(1))
    check_op(lambda t: fn(jitorch, t)[::2], lambda t: fn(torch, t)[::2], [x], seed=5)
    check_op(lambda t: fn(jitorch, t)[-1:], lambda t: fn(torch, t)[-1:], [x], layout="transposed", seed=6)


@pytest.mark.parametrize("name,shape,fn", PIECES, ids=IDS)
def test_nodes_views_and_names_match_torch(name, shape, fn):
    arr = make_array(shape, "float32")
    described = []
    for lib in (torch, jitorch):
        leaf = lib.tensor(arr, requires_grad=True)
        base = leaf * 1
        pieces = fn(lib, base)
        nodes = [p.grad_fn for p in pieces]
        described.append(([n.name() for n in nodes], len({id(n) for n in nodes}), [p.output_nr for p in pieces],
                          [p._base is base for p in pieces],
                          [[type(f).__name__ for f, _ in n.next_functions] for n in nodes]))
        for p in pieces:  # views: a write into the base shows in every piece
            assert p._version == base._version
        if pieces and arr.size:
            with lib.no_grad():
                base.fill_(7.0)
                assert all(bool((p == 7.0).all()) for p in pieces)
    assert described[0] == described[1]


def test_chunk_and_split_names_of_torch():
    x = jitorch.zeros(6, 2, requires_grad=True)
    assert {p.grad_fn.name() for p in x.chunk(3)} == {"SplitBackward0"}
    assert {p.grad_fn.name() for p in x.split([2, 4])} == {"SplitWithSizesBackward0"}
    assert {p.grad_fn.name() for p in x.unbind(1)} == {"UnbindBackward0"}
    assert len({p.grad_fn for p in x.tensor_split(3)}) == 3  # torch's tensor_split: a slice node per piece


@pytest.mark.parametrize("fn", [lambda lib, x: x.split(1), lambda lib, x: x.chunk(2), lambda lib, x: x.unbind(),
                                lambda lib, x: lib.tensor_split(x, 2), lambda lib, x: x.unbind(-1)],
                         ids=["split", "chunk", "unbind", "tensor_split", "unbind_neg"])
def test_zero_dim_refusals_are_torch_s(fn):
    same_error(lambda lib: fn(lib, lib.tensor(1.5)))


def _qkv_product(lib, x):
    q, k, v = x.split(3, -1)
    return lib.cat([q * k, k * v.exp(), v * q], -1)


def _unbind_product(lib, x):
    a, b, c = x.unbind(1)
    return lib.stack([a * b, b * c.sin(), c * a], 1)


def _chunk_some(lib, x):
    _, b, c = x.chunk(3, 0)
    return b * c * b


@pytest.mark.parametrize("fn", [_qkv_product, _unbind_product, _chunk_some], ids=["split", "unbind", "chunk"])
def test_gradcheck_and_gradgradcheck(fn):
    x = make_array((3, 3, 9) if fn is _qkv_product else (6, 3, 2), "float64", np.random.default_rng(2))
    gradcheck_op(lambda t: fn(jitorch, t), [x])
    gradgradcheck_op(lambda t: fn(jitorch, t), [x])


@pytest.mark.parametrize("fn", [_qkv_product, _unbind_product], ids=["split", "unbind"])
def test_double_backward_matches_torch(fn):
    rng = np.random.default_rng(4)
    x = make_array((2, 3, 9) if fn is _qkv_product else (4, 3, 2), "float64", rng)
    g, gg = rng.standard_normal(x.shape), rng.standard_normal(x.shape)
    results = []
    for lib in (jitorch, torch):
        xt, gt = lib.tensor(x, requires_grad=True), lib.tensor(g, requires_grad=True)
        (dx,) = lib.autograd.grad(fn(lib, xt), xt, gt, create_graph=True)
        ddx, dg = lib.autograd.grad(dx, (xt, gt), lib.tensor(gg))
        results.append([t.detach().numpy() for t in (dx, ddx, dg)])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, atol=1e-12, rtol=1e-10)


def _pieces_feeding_each_other(lib, x):
    a, b, c = x.split(2)
    d = a * b + a.exp() * c
    e, f = d.unbind(0)
    return e * f + e, b


def test_pieces_feeding_each_other():
    check_op(lambda t: _pieces_feeding_each_other(jitorch, t), lambda t: _pieces_feeding_each_other(torch, t),
             [make_array((6, 3), "float32")], atol=1e-5)


def test_retain_grad_and_hooks_on_pieces():
    seen = {}
    for lib in (torch, jitorch):
        x = lib.tensor(make_array((3, 4), "float64"), requires_grad=True)
        a, b, c = x.unbind(0)
        a.retain_grad()
        c.retain_grad()
        hooked = []
        b.register_hook(lambda g: hooked.append(g.clone()) or g * 10)
        ((a * 2).sum() + (b * b).sum()).backward()
        seen[lib] = (a.grad.numpy(), c.grad, hooked[0].numpy(), x.grad.numpy())
    (ta, tc, th, tx), (ja, jc, jh, jx) = seen[torch], seen[jitorch]
    assert tc is None and jc is None  # a piece no gradient reached retains none
    for got, want in ((ja, ta), (jh, th), (jx, tx)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


# -- the in-place rules of multi-output views (torch's CreationMeta MULTI_OUTPUT_NODE) --------------------------------
def _write_into_piece(lib):
    a, _ = (lib.ones(4, requires_grad=True) * 1).split(2)
    a.add_(1)


def _write_into_unbound_row(lib):
    _, b = (lib.ones(2, 3, requires_grad=True) * 1).unbind(0)
    b.mul_(2)


def _use_piece_after_base_write(lib):
    base = lib.ones(6, requires_grad=True) * 1
    _, b, _ = base.chunk(3)
    base.mul_(2)
    return b * 2


@pytest.mark.parametrize("fn", [_write_into_piece, _write_into_unbound_row, _use_piece_after_base_write],
                         ids=["split", "unbind", "chunk_base_write"])
def test_inplace_refusals_match_torch(fn):
    same_error(fn)


def test_writes_under_no_grad_are_allowed():
    out = {}
    for lib in (torch, jitorch):
        leaf = lib.tensor(make_array((4, 2), "float32"), requires_grad=True)
        base = leaf * 1
        with lib.no_grad():
            a, _ = base.split(2)
            a.add_(1)
            rows = base.unbind(1)
            rows[1].mul_(3)
        (base * base).sum().backward()  # the writes are not recorded: the base keeps its history
        out[lib] = (base.detach().numpy().copy(), leaf.grad.numpy())
    for got, want in zip(out[jitorch], out[torch]):
        np.testing.assert_allclose(got, want, rtol=1e-6)


# -- the backward makes no full-size sums --------------------------------------------------------------------------
def _ops_of_backward(x, fn, g):
    with jitorch.profiler.profile(record_shapes=True) as prof:
        fn(x).backward(g)
    return [(e.name, [tuple(s) for s in e.input_shapes]) for e in prof.events()]


def test_qkv_split_backward_is_one_cat_without_full_size_adds():
    rng = np.random.default_rng(0)
    x = jitorch.tensor(rng.standard_normal((16, 64, 384)).astype(np.float32), requires_grad=True)
    g = jitorch.tensor(rng.standard_normal((16, 64, 128)).astype(np.float32))

    def attention_inputs(t):
        q, k, v = t.split(128, -1)
        return q * k * v

    ops = _ops_of_backward(x, attention_inputs, g)
    full = (16, 64, 384)
    assert not [op for op in ops if op[0] == "aten::add" and full in op[1]], ops
    assert not [op for op in ops if op[0] == "aten::copy_slices"], ops
    assert [op[0] for op in ops].count("aten::cat") == 1
    want = torch.from_numpy(x._data.copy()).requires_grad_()
    attention_inputs(want).backward(torch.from_numpy(g._data))
    np.testing.assert_allclose(x.grad._data, want.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_unbind_backward_is_one_stack_without_full_size_adds():
    x = jitorch.tensor(make_array((8, 4, 5), "float32"), requires_grad=True)

    def product_of_rows(t):
        rows = t.unbind(0)
        out = rows[0]
        for r in rows[1:]:
            out = out * r
        return out

    ops = _ops_of_backward(x, product_of_rows, jitorch.ones(4, 5))
    assert not [op for op in ops if op[0] == "aten::add" and (8, 4, 5) in op[1]], ops
    # (under a mode, stack records as the cat of unsqueezed gradients that it is)
    assert [op[0] for op in ops].count("aten::stack") + [op[0] for op in ops].count("aten::cat") == 1


def test_cpu_graph_replays_the_joined_gradient():
    from jitorch.cpu import CPUGraph, graph

    rng = np.random.default_rng(7)
    x = jitorch.tensor(rng.standard_normal((2, 3, 12)).astype(np.float32), requires_grad=True)
    g = jitorch.tensor(rng.standard_normal((2, 3, 4)).astype(np.float32))
    cg = CPUGraph()
    with graph(cg):
        q, k, v = x.split(4, -1)
        (dx,) = jitorch.autograd.grad(q * k * v.tanh(), x, g)
    assert "copy_slices" not in cg.debug_dump()
    for _ in range(2):
        new_x, new_g = rng.standard_normal(x.shape).astype(np.float32), rng.standard_normal(g.shape).astype(np.float32)
        with jitorch.no_grad():
            x.copy_(jitorch.tensor(new_x))
            g.copy_(jitorch.tensor(new_g))
        zero(dx)
        cg.replay()
        tx = torch.from_numpy(new_x).requires_grad_()
        tq, tk, tv = tx.split(4, -1)
        (want,) = torch.autograd.grad(tq * tk * tv.tanh(), tx, torch.from_numpy(new_g))
        np.testing.assert_allclose(dx._data, want.numpy(), rtol=1e-5, atol=1e-6)
