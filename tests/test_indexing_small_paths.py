"""The quick paths of small indexing calls keep torch's results and errors: ``x[idx]``/``x[:, idx]``/``x[mask]``
parsed without the general parse, bounds left to NumPy's own check (negatives checked first where torch refuses
them), cached position grids of gather/scatter, small accumulating puts through ``add.at``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_same, check_error, check_op

RNG = np.random.default_rng(7)
X = RNG.standard_normal((10, 10)).astype(np.float32)
Z = RNG.standard_normal((32, 16)).astype(np.float32)
IDX = np.array([1, 3, 5, 7, 9, 3])
GIDX = RNG.integers(0, 10, (10, 4))


@pytest.mark.parametrize("key", [lambda i, m: i, lambda i, m: (slice(None), i), lambda i, m: m,
                                 lambda i, m: (i, slice(None)), lambda i, m: (slice(None), i[:2].int())])
def test_subscripts_of_small_tensors(key):
    mask = X > 0
    check_op(lambda x, i, m: x[key(i, m)], lambda x, i, m: x[key(i, m)], [X, IDX, mask], atol=0, rtol=0)


def test_setitem_and_index_put_of_small_tensors():
    values = RNG.standard_normal((6, 10)).astype(np.float32)

    def run(lib, x, i, v):
        a = x.clone()
        a[i] = v
        b = x.clone()
        b.index_put_((i,), v, accumulate=True)  # repeated index 3 accumulates
        c = x.clone()
        c[:, i[:3]] = -v[:3].T
        return a, b, c

    check_op(lambda *a: run(jitorch, *a), lambda *a: run(torch, *a), [X, IDX, values], atol=1e-6, grad=False)


@pytest.mark.parametrize("op", ["gather", "scatter", "scatter_add", "index_select", "index_add", "take_along_dim"])
def test_dim_ops_of_small_tensors(op):
    src = RNG.standard_normal((10, 4)).astype(np.float32)
    rows = RNG.standard_normal((6, 10)).astype(np.float32)
    fns = {
        "gather": (lambda lib, x, g, s, i, r: x.gather(1, g)),
        "scatter": (lambda lib, x, g, s, i, r: x.scatter(1, g, s)),
        "scatter_add": (lambda lib, x, g, s, i, r: x.scatter_add(0, g, s)),
        "index_select": (lambda lib, x, g, s, i, r: x.index_select(1, i)),
        "index_add": (lambda lib, x, g, s, i, r: x.index_add(0, i, r, alpha=2)),
        "take_along_dim": (lambda lib, x, g, s, i, r: lib.take_along_dim(x, g - 10, 1)),  # negatives wrap here
    }
    fn = fns[op]
    check_op(lambda *a: fn(jitorch, *a), lambda *a: fn(torch, *a), [X, GIDX, src, IDX, rows], atol=1e-6)


def test_out_of_bounds_and_negative_indices_keep_torchs_errors():
    bad = IDX.copy()
    bad[2] = 10
    neg = IDX.copy()
    neg[4] = -1
    check_error(lambda x, i: x[i], lambda x, i: x[i], [X, bad], match="index 10 is out of bounds for dimension 0")
    check_error(lambda x, i: x[:, i], lambda x, i: x[:, i], [X, bad], match="index 10 is out of bounds")
    check_error(lambda x, i, j: x[i, j], lambda x, i, j: x[i, j], [X, IDX, bad - 25],
                match="is out of bounds for dimension 1 with size 10")
    check_error(lambda x, i: x.index_select(0, i), lambda x, i: x.index_select(0, i), [X, neg],
                match="index out of range in self")
    g = GIDX.copy()
    g[3, 1] = -2
    check_error(lambda x, i: x.gather(1, i), lambda x, i: x.gather(1, i), [X, g],
                match="index -2 is out of bounds for dimension 1 with size 10")
    check_error(lambda x, i, s: x.scatter_add(1, i, s), lambda x, i, s: x.scatter_add(1, i, s),
                [X, g, RNG.standard_normal((10, 4)).astype(np.float32)], match="index -2 is out of bounds")
    check_error(lambda x, i, s: x.scatter(1, i + 9, s), lambda x, i, s: x.scatter(1, i + 9, s),
                [X, GIDX, RNG.standard_normal((10, 4)).astype(np.float32)], match="out of bounds for dimension 1")


def test_out_of_bounds_puts_leave_self_untouched():
    bad = IDX.copy()
    bad[2] = 12
    values = RNG.standard_normal((6, 10)).astype(np.float32)
    check_error(lambda x, i, v: x.index_put_((i,), v, accumulate=True),
                lambda x, i, v: x.index_put_((i,), v, accumulate=True), [X, bad, values],
                match="index 12 is out of bounds for dimension 0 with size 10")
    check_error(lambda x, i, v: x.__setitem__(i, v), lambda x, i, v: x.__setitem__(i, v), [X, bad, values],
                match="index 12 is out of bounds")
    check_error(lambda x, i, v: x.index_add_(0, i, v), lambda x, i, v: x.index_add_(0, i, v), [X, bad, values],
                match="index 12 is out of bounds for dimension 0 with size 10")
    x = jitorch.tensor(X)
    for write in (lambda: x.index_put_((jitorch.tensor(bad),), jitorch.tensor(values), accumulate=True),
                  lambda: x.__setitem__(jitorch.tensor(bad), jitorch.tensor(values))):
        with pytest.raises(IndexError):
            write()
        np.testing.assert_array_equal(x.numpy(), X)


def test_bounds_before_value_shape_and_mismatched_masks():
    bad = IDX.copy()
    bad[0] = 40
    check_error(lambda x, i, v: x.__setitem__(i, v), lambda x, i, v: x.__setitem__(i, v),
                [X, bad, np.ones((4, 10), np.float32)], match="shape mismatch: value tensor of shape [4, 10]")
    check_error(lambda x, i, v: x.__setitem__(i, v), lambda x, i, v: x.__setitem__(i, v),
                [X, IDX, np.ones((4, 10), np.float32)], match="shape mismatch")
    check_error(lambda x, m: x[m], lambda x, m: x[m], [X, np.ones((10, 9), bool)],
                match="The shape of the mask [10, 9] at index 1 does not match")


def test_masked_fill_and_select_of_small_tensors():
    mask = X > 0.3
    check_op(lambda x, m: x.masked_fill(m, -0.0), lambda x, m: x.masked_fill(m, -0.0), [X, mask], atol=0, rtol=0)
    out = jitorch.tensor(X).masked_fill(jitorch.tensor(mask), -0.0)
    assert np.signbit(out.numpy()[mask]).all()  # the value itself, as torch: -0.0, not +0.0
    check_op(lambda x, m: x.masked_select(m), lambda x, m: x.masked_select(m), [Z, Z > 0], atol=0, rtol=0)
    check_op(lambda x, m: x.masked_select(m), lambda x, m: x.masked_select(m), [Z, Z[0] > 0], atol=0, rtol=0)
    ints = np.arange(12).reshape(3, 4)
    assert_same(jitorch.tensor(ints).masked_fill(jitorch.tensor(ints % 3 == 0), 7),
                torch.tensor(ints).masked_fill(torch.tensor(ints % 3 == 0), 7))


def test_grids_are_not_shared_state():
    x = jitorch.tensor(X, requires_grad=True)
    index = GIDX[:8]  # smaller than x apart from dim 1: the INDEX row with its grids (not the quick take)
    y = x.gather(1, jitorch.tensor(index))
    saved = [t for t in y.grad_fn._saved_in[1:] if t is not None]
    grids = [t for t in saved if not t._data.flags.writeable]
    assert len(grids) == 1 and grids[0].tolist() == [[k] for k in range(8)]
    with pytest.raises(ValueError):  # a cached grid cannot be written through
        grids[0]._data[...] = 5
    z = x.gather(1, jitorch.tensor(index))
    g = RNG.standard_normal((8, 4)).astype(np.float32)
    (y * z).backward(jitorch.tensor(g))
    xt = torch.tensor(X, requires_grad=True)
    (xt.gather(1, torch.tensor(index)) ** 2).backward(torch.tensor(g))
    assert_same(x.grad, xt.grad, atol=1e-5, rtol=1e-5)


def test_setitem_after_full_slices_writes_self_as_torch():
    names = []
    for lib in (torch, jitorch):
        x = lib.ones(4, 5, requires_grad=True) * 1
        x[:, lib.tensor([0, 2])] = lib.zeros(4, 2)  # torch skips a full slice: index_put_ on x, no CopySlices
        names.append(x.grad_fn.name())
    assert names[1] == names[0] == "IndexPutBackward0"


@pytest.mark.parametrize("write", [
    lambda lib, x, i: x.scatter_add_(0, i, x), lambda lib, x, i: x.scatter_(0, i, x),
    lambda lib, x, i: x.index_add_(0, i[:, 0], x), lambda lib, x, i: x.index_copy_(0, i[:, 0], x),
    lambda lib, x, i: x.index_put_((i[:, 0],), x, accumulate=True),
    lambda lib, x, i: x[1:].index_add_(0, lib.tensor([0, 1]), x[:2]),  # partial overlap
    lambda lib, x, i: x[:1].index_add_(0, lib.tensor([0]), x[2:]),  # disjoint: runs in both
])
def test_in_place_index_writes_from_self_as_torch(write):
    outcomes = []
    for lib in (jitorch, torch):
        x = lib.arange(6.0).reshape(3, 2)
        before = x.clone()
        try:
            write(lib, x, lib.tensor([[2, 1], [0, 0], [1, 2]]))
            outcomes.append(("ran", x.tolist()))
        except RuntimeError as e:
            assert "refer to a single memory location" in str(e)
            outcomes.append(("raised", x.tolist() == before.tolist()))
    assert outcomes[0] == outcomes[1]
