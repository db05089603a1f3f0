"""Accumulating scatters at sizes that take `jitorch.runtime.host_scatter`'s whole-array forms (``index_add_``,
``scatter_add_``, ``index_put_(accumulate=True)``, the embedding gradient) against PyTorch, and the forms themselves
against ``np.add.at``: floating sums within the running sum's rounding, integers exact, -0.0 kept, deterministic."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import check_op
from jitorch.runtime import host_scatter


def _arr(shape, seed=0, dtype="float32"):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-50, 50, shape).astype(dtype)
    return rng.uniform(-1, 1, shape).astype(dtype)


def _index(n, size, seed=1):
    return np.random.default_rng(seed).integers(0, size, n)


# (out rows, updates): dense (a few rows hit thousands of times: bincount) and sparse (a large table: sorted rows).
SIZES = [(40, 5000), (20000, 300)]


@pytest.mark.parametrize("rows,updates", SIZES)
@pytest.mark.parametrize("dim", [0, 1])
def test_index_add_matches_torch(rows, updates, dim):
    shape, src_shape = [rows, 12], [updates, 12]
    if dim == 1:
        shape, src_shape = shape[::-1], src_shape[::-1]
    check_op(lambda a, i, s: a.index_add(dim, i, s, alpha=0.5), lambda a, i, s: a.index_add(dim, i, s, alpha=0.5),
             [_arr(shape), _index(updates, rows), _arr(src_shape, 2)], atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["int64", "int32"])
@pytest.mark.parametrize("rows,updates", SIZES)
def test_integer_index_add_is_exact(dtype, rows, updates):
    x, src = _arr((rows, 12), dtype=dtype), _arr((updates, 12), 2, dtype=dtype)
    out = jitorch.tensor(x).index_add_(0, jitorch.tensor(_index(updates, rows)), jitorch.tensor(src))
    want = torch.tensor(x).index_add_(0, torch.tensor(_index(updates, rows)), torch.tensor(src))
    np.testing.assert_array_equal(out.numpy(), want.numpy())


@pytest.mark.parametrize("expanded", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_add_matches_torch(expanded, dim):
    """An index expanded along the other dim (the row form) and a per-element index (flat positions)."""
    n, size, width = 4000, 30, 9
    if expanded:
        line = _index(n, size)
        index = np.broadcast_to(line[:, None] if dim == 0 else line[None, :], (n, width) if dim == 0 else (width, n))
        index = np.ascontiguousarray(index)
    else:
        index = np.random.default_rng(3).integers(0, size, (n, width) if dim == 0 else (width, n))
    shape = (size, width) if dim == 0 else (width, size)

    def expand(lib):
        return lambda a, i, s: a.scatter_add(dim, i if not expanded else (
            i[:, :1].expand(-1, width) if dim == 0 else i[:1].expand(width, -1)), s)
    check_op(expand(jitorch), expand(torch), [_arr(shape), index, _arr(index.shape, 4)], atol=2e-5, rtol=1e-5)


def test_index_put_accumulate_matches_torch():
    x = _arr((30, 8, 5))
    i, j = _index(3000, 30), np.random.default_rng(5).integers(-8, 8, 3000)  # negative positions wrap

    def put(a, i, j, v):
        return (a * 1).index_put_((i, j), v, accumulate=True)

    def put_grid(a, j, v):  # a broadcast pair of index arrays: every row, repeated columns
        return (a * 1).index_put_((_lib(a).arange(30)[:, None], j[None, :]), v, accumulate=True)
    check_op(put, put, [x, i, j, _arr((3000, 5), 6)], atol=2e-5, rtol=1e-5)
    check_op(put_grid, put_grid, [x, j, _arr((30, 3000, 5), 7)], atol=2e-5, rtol=1e-5)


def _lib(t):
    return jitorch if isinstance(t, jitorch.Tensor) else torch


def test_embedding_gradient_matches_torch():
    """A large table and a batch of tokens: the sparse rows form of the gradient's accumulating put."""
    tokens = np.random.default_rng(8).integers(0, 5000, (35, 20))
    check_op(lambda w, t: jitorch.nn.functional.embedding(t, w), lambda w, t: torch.nn.functional.embedding(t, w),
             [_arr((5000, 64)), tokens], atol=1e-6, rtol=1e-5)


def test_untouched_negative_zero_stays_and_runs_are_deterministic():
    out = np.full((50, 4), -0.0, np.float32)
    out[:10] = 1.0
    index = np.random.default_rng(9).integers(0, 10, 6000)
    values = _arr((6000, 4), 10)
    results = []
    for _ in range(2):
        got = jitorch.tensor(out).index_add_(0, jitorch.tensor(index), jitorch.tensor(values)).numpy()
        results.append(got)
    assert np.signbit(results[0][10:]).all()
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("seed", range(6))
def test_forms_match_add_at(seed):
    """Random keys (an index at some dim between full slices, broadcast index arrays, a scatter's open grid) in
    float32, float64 and integers: integer results equal ``np.add.at``'s, floating ones are no further from the exact
    sum than ``np.add.at``'s own float running sum allows."""
    rng = np.random.default_rng(seed)
    for dtype in ("float32", "float64", "int64", "int32"):
        for form in range(3):
            shape = tuple(int(s) for s in rng.integers(2, 30, 3))
            n = int(rng.integers(500, 4000))
            if form == 0:
                d = int(rng.integers(0, 3))
                key = (slice(None),) * d + (rng.integers(-shape[d], shape[d], n),)
                vshape = shape[:d] + (n,) + shape[d + 1:]
            elif form == 1:
                key = (rng.integers(0, shape[0], (n, 1)), rng.integers(0, shape[1], (1, 4)),
                       rng.integers(0, shape[2], (n, 1)))
                vshape = (n, 4)
            else:
                sizes = (n, int(rng.integers(1, shape[1] + 1)), int(rng.integers(1, shape[2] + 1)))
                key = (np.broadcast_to(rng.integers(0, shape[0], (n, 1, 1)), sizes),
                       np.arange(sizes[1]).reshape(1, -1, 1), np.arange(sizes[2]).reshape(1, 1, -1))
                vshape = sizes
            out, values = _arr(shape, seed, dtype), _arr(vshape, seed + 1, dtype)
            want, got = out.copy(), out.copy()
            np.add.at(want, key, values)
            host_scatter.add_at(got, key, values)
            if np.dtype(dtype).kind in "iu":
                np.testing.assert_array_equal(got, want)
                continue
            exact = out.astype(np.longdouble)
            np.add.at(exact, key, values.astype(np.longdouble))
            scale = np.abs(out).astype(np.float64)
            np.add.at(scale, key, np.abs(values).astype(np.float64))
            bound = 2 * np.abs(want - exact) + 4 * np.finfo(dtype).eps * (scale + 1)
            assert (np.abs(got - exact) <= bound).all(), (dtype, form)


@pytest.mark.parametrize("dtype,rows,form", [("float32", 40, "dense"), ("float64", 20000, "rows"),
                                             ("int64", 40, "rows"), ("float16", 40, None), ("int64", 40, None)])
def test_which_form_runs(dtype, rows, form, monkeypatch):
    """Dense floats go through bincount, sparse or integer rows through the sort; float16 (whose running sum torch
    rounds at every step) and integer single elements keep np.add.at."""
    ran = []
    for name in ("_dense", "_rows"):
        real = getattr(host_scatter, name)
        monkeypatch.setattr(host_scatter, name, lambda *a, real=real, name=name: ran.append(name) or real(*a))
    inner = 1 if form is None and dtype == "int64" else 12
    out, values = _arr((rows, inner), dtype=dtype), _arr((3000, inner), 1, dtype=dtype)
    assert host_scatter._fast(out, (_index(3000, rows),), values) is (form is not None)
    assert ran == ([] if form is None else ["_" + form])
