"""Every public function of jitorch/_movement.py (and the shape methods) against PyTorch: every dtype forward,
non-contiguous inputs, backward and gradcheck, views sharing memory, and the shape errors."""
import numpy as np
import pytest
import torch
from helpers import DTYPES, LAYOUTS, check_error, check_op, gradcheck_op, make_array, np_dtype, same_error

import jitorch

# (id, fn(T, *tensors) where T is the framework module, input shapes)
CASES = [
    ("reshape", lambda T, x: T.reshape(x, (3, -1)), [(2, 3)]),
    ("reshape_0d", lambda T, x: x.reshape(()), [(1, 1)]),
    ("reshape_empty", lambda T, x: x.reshape(0, 5), [(0, 3, 5)]),
    ("view", lambda T, x: x.view(-1, 2), [(2, 3)]),
    ("view_as", lambda T, x, y: x.view_as(y), [(6,), (2, 3)]),
    ("reshape_as", lambda T, x, y: x.reshape_as(y), [(6,), (3, 2)]),
    ("permute", lambda T, x: T.permute(x, (2, 0, 1)), [(2, 3, 4)]),
    ("permute_method", lambda T, x: x.permute(1, 0), [(2, 3)]),
    ("transpose", lambda T, x: T.transpose(x, 0, -1), [(2, 3, 4)]),
    ("swapaxes", lambda T, x: T.swapaxes(x, 0, 1), [(2, 3)]),
    ("swapdims", lambda T, x: x.swapdims(1, 0), [(2, 3)]),
    ("t", lambda T, x: T.t(x), [(2, 3)]),
    ("t_1d", lambda T, x: x.t(), [(3,)]),
    ("mT", lambda T, x: x.mT, [(2, 3, 4)]),
    ("adjoint", lambda T, x: T.adjoint(x), [(2, 3, 4)]),
    ("squeeze", lambda T, x: T.squeeze(x), [(1, 3, 1)]),
    ("squeeze_dim", lambda T, x: x.squeeze(1), [(1, 3)]),
    ("squeeze_dims", lambda T, x: x.squeeze((0, 2)), [(1, 3, 1)]),
    ("unsqueeze", lambda T, x: T.unsqueeze(x, -1), [(2, 3)]),
    ("unsqueeze_0d", lambda T, x: x.unsqueeze(0), [()]),
    ("flatten", lambda T, x: T.flatten(x, 1), [(2, 3, 4)]),
    ("flatten_0d", lambda T, x: x.flatten(), [()]),
    ("unflatten", lambda T, x: T.unflatten(x, 1, (2, -1)), [(3, 4)]),
    ("ravel", lambda T, x: T.ravel(x), [(2, 3)]),
    ("narrow", lambda T, x: T.narrow(x, 1, 1, 2), [(2, 4)]),
    ("narrow_negative", lambda T, x: x.narrow(0, -1, 1), [(3, 2)]),
    ("select", lambda T, x: T.select(x, 1, -1), [(2, 4)]),
    ("split", lambda T, x: T.split(x, 2), [(5, 2)]),
    ("split_sizes", lambda T, x: x.split([1, 3], 1), [(2, 4)]),
    ("chunk", lambda T, x: T.chunk(x, 3), [(5, 2)]),
    ("chunk_empty", lambda T, x: x.chunk(2), [(0, 2)]),
    ("unbind", lambda T, x: T.unbind(x, 1), [(2, 3)]),
    ("tensor_split", lambda T, x: T.tensor_split(x, 3), [(7,)]),
    ("tensor_split_indices", lambda T, x: x.tensor_split([1, 4], 1), [(2, 5)]),
    ("movedim", lambda T, x: T.movedim(x, 0, -1), [(2, 3, 4)]),
    ("moveaxis", lambda T, x: T.moveaxis(x, (0, 1), (2, 0)), [(2, 3, 4)]),
    ("flip", lambda T, x: T.flip(x, (0, 1)), [(2, 3)]),
    ("fliplr", lambda T, x: T.fliplr(x), [(2, 3)]),
    ("flipud", lambda T, x: T.flipud(x), [(2, 3)]),
    ("roll", lambda T, x: T.roll(x, 1), [(2, 3)]),
    ("roll_dims", lambda T, x: x.roll((1, -2), (0, 1)), [(2, 3)]),
    ("rot90", lambda T, x: T.rot90(x), [(2, 3)]),
    ("rot90_k", lambda T, x: x.rot90(-1, (1, 2)), [(2, 3, 4)]),
    ("cat", lambda T, x, y: T.cat([x, y]), [(2, 3), (1, 3)]),
    ("cat_neg_dim", lambda T, x, y: T.concat((x, y), -1), [(2, 3), (2, 1)]),
    ("cat_empty", lambda T, x, y: T.concatenate([x, y]), [(0, 3), (2, 3)]),
    ("cat_legacy_empty", lambda T, x, y: T.cat([x, y]), [(0,), (2, 3)]),
    ("stack", lambda T, x, y: T.stack([x, y], -1), [(2, 3), (2, 3)]),
    ("stack_0d", lambda T, x, y: T.stack([x, y]), [(), ()]),
    ("hstack", lambda T, x, y: T.hstack([x, y]), [(2, 3), (2, 1)]),
    ("hstack_1d", lambda T, x, y: T.hstack([x, y]), [(3,), (2,)]),
    ("vstack", lambda T, x, y: T.vstack([x, y]), [(3,), (3,)]),
    ("dstack", lambda T, x, y: T.dstack([x, y]), [(2, 3), (2, 3)]),
    ("column_stack", lambda T, x, y: T.column_stack([x, y]), [(3,), (3, 2)]),
    ("tile", lambda T, x: T.tile(x, (2, 1, 2)), [(2, 3)]),
    ("repeat", lambda T, x: x.repeat(2, 1, 3), [(2, 3)]),
    ("broadcast_to", lambda T, x: T.broadcast_to(x, (2, 3)), [(3,)]),
    ("expand", lambda T, x: x.expand(2, -1, 3), [(1, 3)]),
    ("expand_as", lambda T, x, y: x.expand_as(y), [(3, 1), (3, 4)]),
    ("broadcast_tensors", lambda T, x, y: T.broadcast_tensors(x, y), [(3, 1), (4,)]),
    ("as_strided", lambda T, x: T.as_strided(x, (2, 2), (1, 2)), [(6,)]),
    ("as_strided_offset", lambda T, x: x.as_strided((3,), (2,), 1), [(8,)]),
    ("diagonal", lambda T, x: T.diagonal(x, 1), [(3, 4)]),
    ("diagonal_dims", lambda T, x: x.diagonal(-1, 0, 2), [(3, 2, 4)]),
    ("diagonal_empty", lambda T, x: x.diagonal(5), [(3, 4)]),
    ("diag_1d", lambda T, x: T.diag(x, 1), [(3,)]),
    ("diag_2d", lambda T, x: T.diag(x, -1), [(3, 4)]),
    ("diag_embed", lambda T, x: T.diag_embed(x), [(2, 3)]),
    ("block_diag", lambda T, x, y: T.block_diag(x, y), [(2, 3), (1, 2)]),
    ("tril", lambda T, x: T.tril(x, -1), [(3, 4)]),
    ("triu", lambda T, x: x.triu(1), [(2, 3, 4)]),
    ("clone", lambda T, x: T.clone(x), [(2, 3)]),
    ("contiguous", lambda T, x: x.contiguous(), [(2, 3)]),
    ("atleast_1d", lambda T, x: T.atleast_1d(x), [()]),
    ("atleast_2d", lambda T, x, y: T.atleast_2d(x, y), [(), (2,)]),
    ("atleast_3d", lambda T, x: T.atleast_3d(x), [(2, 3)]),
    ("meshgrid_ij", lambda T, x, y: T.meshgrid(x, y, indexing="ij"), [(2,), (3,)]),
    ("meshgrid_xy", lambda T, x, y: T.meshgrid(x, y, indexing="xy"), [(2,), (3,)]),
    ("cartesian_prod", lambda T, x, y: T.cartesian_prod(x, y), [(2,), (3,)]),
]
NONDIFF_CASES = [
    ("nonzero", lambda T, x: T.nonzero(x), [(3, 4)]),
    ("nonzero_tuple", lambda T, x: x.nonzero(as_tuple=True), [(3, 4)]),
    ("argwhere", lambda T, x: T.argwhere(x), [(3,)]),
    ("nonzero_0d", lambda T, x: x.nonzero(), [()]),
    ("broadcast_shapes", lambda T, x: T.broadcast_shapes((3, 1), (4,), ()), [()]),
]
IDS = [c[0] for c in CASES]


def _run(fn, *arrays, **kw):
    return check_op(lambda *a: fn(jitorch, *a), lambda *a: fn(torch, *a), list(arrays), **kw)


def _inputs(shapes, dtype, rng):
    return [make_array(s, dtype, rng, -2, 3) for s in shapes]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES + NONDIFF_CASES, ids=IDS + [c[0] for c in NONDIFF_CASES])
def test_movement_forward_every_dtype(case, dtype, rng):
    _, fn, shapes = case
    _run(fn, *_inputs(shapes, dtype, rng), atol=0, rtol=0, grad=False)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_movement_backward_every_layout(case, rng):
    _, fn, shapes = case
    arrays = _inputs(shapes, "float32", rng)
    for layout in LAYOUTS:
        _run(fn, *arrays, atol=1e-6, rtol=1e-6, layout=layout)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_movement_gradcheck(case, rng):
    _, fn, shapes = case
    gradcheck_op(lambda *a: fn(jitorch, *a), _inputs(shapes, "float64", rng))


def test_views_share_memory_with_their_base(rng):
    """Writes through a view reach the base (and the reverse), as in PyTorch."""
    writes = [lambda v: v.t(), lambda v: v.narrow(1, 1, 2), lambda v: v.select(0, 1), lambda v: v.diagonal(),
              lambda v: v.view(12), lambda v: v.unsqueeze(0), lambda v: v.permute(1, 0), lambda v: v.split(2, 1)[1],
              lambda v: v.as_strided((2, 2), (1, 4), 1), lambda v: v.unbind(1)[2], lambda v: v.reshape(4, 3)]
    a = make_array((3, 4), "float32", rng)
    for view in writes:
        def write(x):
            base = x.clone()
            view(base).mul_(10)
            return base
        check_op(write, write, [a], grad=False)
    j = jitorch.tensor(a)
    v = j.t()
    j.fill_(3.0)
    assert v.tolist() == np.full((4, 3), 3.0).tolist()


def test_reshape_copies_only_when_needed(rng):
    a = make_array((2, 3), "float32", rng)
    for fn in (lambda x: x.reshape(6), lambda x: x.t().reshape(6), lambda x: x.t().contiguous().view(6)):
        j = fn(jitorch.tensor(a))
        t = fn(torch.tensor(a))
        assert j.is_contiguous() == t.is_contiguous() and j.stride() == t.stride()
    check_op(lambda x: x.t().flatten(), lambda x: x.t().flatten(), [a])


# -- bad inputs ---------------------------------------------------------------------------------------------------
def _err(fn, shapes, match=(), dtype="float32", rng=None):
    arrays = [make_array(s, dtype, rng) for s in shapes]
    return check_error(lambda *a: fn(jitorch, *a), lambda *a: fn(torch, *a), arrays, match=match)


def test_shape_errors(rng):
    _err(lambda T, x: x.t().view(6), [(2, 3)], ["view", "[6]"], rng=rng)
    _err(lambda T, x: x.view(4, 2), [(2, 3)], ["[4, 2]", "6"], rng=rng)
    _err(lambda T, x: x.reshape(-1, -1), [(2, 3)], rng=rng)
    _err(lambda T, x: x.reshape(5), [(2, 3)], ["[5]", "6"], rng=rng)
    _err(lambda T, x: x.permute(0), [(2, 3)], ["permute"], rng=rng)
    _err(lambda T, x: x.expand(3, 4), [(2, 3)], ["3", "2"], rng=rng)
    _err(lambda T, x: x.expand(3), [(2, 3)], rng=rng)
    _err(lambda T, x: x.t(), [(2, 3, 4)], ["t()", "3"], rng=rng)
    _err(lambda T, x: x.flatten(1, 0), [(2, 3)], ["flatten"], rng=rng)
    _err(lambda T, x: x.unflatten(1, (2, 2)), [(2, 3)], rng=rng)
    _err(lambda T, x: T.tril(x), [(3,)], ["tril"], rng=rng)
    _err(lambda T, x: x.diagonal(0, 1, 1), [(2, 3)], ["diagonal"], rng=rng)
    _err(lambda T, x: x.repeat(2), [(2, 3)], rng=rng)


def test_dim_and_index_errors(rng):
    for fn in (lambda T, x: x.squeeze(2), lambda T, x: x.unsqueeze(3), lambda T, x: x.transpose(0, 2),
               lambda T, x: x.flip(2), lambda T, x: x.select(2, 0), lambda T, x: x.movedim(0, 2),
               lambda T, x: T.cat([x, x], 2), lambda T, x: x.narrow(-3, 0, 1)):
        _err(fn, [(2, 3)], ["range"], rng=rng)
    _err(lambda T, x: x.select(1, 3), [(2, 3)], ["3"], rng=rng)
    _err(lambda T, x: x.narrow(1, 2, 2), [(2, 3)], ["narrow"], rng=rng)
    _err(lambda T, x: x.permute(0, 0), [(2, 3)], rng=rng)


def test_sequence_errors(rng):
    _err(lambda T, x, y: T.cat([x, y]), [(2, 3), (2, 4)], ["3", "4", "1"], rng=rng)
    _err(lambda T, x, y: T.cat([x, y]), [(2, 3), (3,)], ["2", "1"], rng=rng)
    _err(lambda T, x, y: T.stack([x, y]), [(2, 3), (3, 2)], ["[2, 3]", "[3, 2]"], rng=rng)
    same_error(lambda T: T.cat([]))
    check_error(lambda: jitorch.stack([]), lambda: torch.stack([]), [])
    # A tensor is not a sequence of tensors (it used to be unbound silently, so default_collate(tensor) "worked"),
    # and a NumPy entry is named as torch names it.
    for op in ("cat", "stack"):
        same_error(lambda T: getattr(T, op)(T.ones(2, 2)))
        same_error(lambda T: getattr(T, op)([T.ones(2), np.ones(2)]))
        same_error(lambda T: getattr(T, op)([T.ones(2), 3]))
    _err(lambda T, x: x.split([1, 1], 0), [(3,)], ["3"], rng=rng)
    _err(lambda T, x: x.chunk(0), [(3,)], ["chunk"], rng=rng)
    _err(lambda T, x: T.meshgrid(x, x, indexing="zz"), [(2,)], ["indexing"], rng=rng)
    _err(lambda T, x: x.as_strided((4,), (3,)), [(3,)], rng=rng)
    _err(lambda T, x, y: T.broadcast_tensors(x, y), [(2, 3), (4,)], ["3", "4"], rng=rng)
    _err(lambda T, x: T.block_diag(x), [(1, 2, 2)], ["Input 0 has 3 dimensions"], rng=rng)
    check_error(lambda: jitorch.block_diag(jitorch.ones(1), [1]), lambda: torch.block_diag(torch.ones(1), [1]), [],
                match="element 1")


def test_block_diag_of_nothing():
    out, want = jitorch.block_diag(), torch.block_diag()
    assert tuple(out.shape) == tuple(want.shape) == (1, 0) and str(out.dtype)[8:] == str(want.dtype)[6:]


def test_copy_fill_zero_and_in_place_geometry(rng):
    a, b = make_array((2, 3), "float32", rng), make_array((3,), "float64", rng)
    check_op(lambda x, y: (x * 1).copy_(y), lambda x, y: (x * 1).copy_(y), [a, b])
    check_op(lambda x: (x * 1).fill_(2.5), lambda x: (x * 1).fill_(2.5), [a])
    check_op(lambda x: (x * 1).zero_(), lambda x: (x * 1).zero_(), [a])
    for fn in (lambda x: x.clone().t_(), lambda x: x.clone().unsqueeze_(1), lambda x: x.clone().transpose_(0, 1),
               lambda x: x.clone().squeeze_(), lambda x: x.clone().tril_(), lambda x: x.clone().triu_(1)):
        check_op(fn, fn, [a.reshape(2, 3)], grad=False)
    check_error(lambda x: x.fill_(x), lambda x: x.fill_(x), [a], match="0-dimension")
    check_op(lambda x: (x * 1).copy_(1.5), lambda x: (x * 1).copy_(1.5), [a])
    check_error(lambda x: x.copy_("a"), lambda x: x.copy_("a"), [a])
    check_op(lambda x: x.clone().fill_(True), lambda x: x.clone().fill_(True), [a.astype(np_dtype("int8"))])
