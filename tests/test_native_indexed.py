"""Gathers and accumulating scatters at sizes that take the generated kernels of `codegen.llvm_indexed` (through
`jitorch.ops.native_indexed`) against PyTorch: ``gather``, ``scatter_add``, ``index_add_``, ``index_put_`` with
accumulation, ``x[idx]`` and embeddings with their gradients; non-contiguous and broadcast operands, int32 indices,
every element type the kernels take, bounds errors that leave ``self`` untouched; and the kernels themselves against
NumPy (both variants, negative strides)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import check_error, check_op
from jitorch.codegen.llvm_indexed import IndexedAlongDim, IndexedOutOfBounds
from jitorch.ops import native_indexed

RNG = np.random.default_rng(0)


def _floats(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def _ints(high, *shape, dtype="int64"):
    return RNG.integers(0, high, shape).astype(dtype)


def _taken(monkeypatch):
    """Count the native kernel calls, so each test knows it exercised them (and not the NumPy fallback)."""
    calls = []
    run = native_indexed._run
    monkeypatch.setattr(native_indexed, "_run", lambda *a: calls.append(a[0]) or run(*a))
    return calls


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_gather_and_its_gradient_match_torch(monkeypatch, dim, index_dtype):
    calls = _taken(monkeypatch)
    x = _floats(12, 30, 20)
    shape = [10, 28, 18]
    shape[dim] = 25
    index = _ints(x.shape[dim], *shape, dtype=index_dtype)  # smaller than x apart from dim, as torch allows
    check_op(lambda a, i: a.gather(dim, i), lambda a, i: a.gather(dim, i.long() if i.dtype == torch.int32 else i),
             [x, index], atol=0, rtol=0, grad_atol=1e-5, grad_rtol=1e-5)
    assert calls.count("gather") >= 1 and calls.count("scatter_add") >= 1  # forward and gradient


@pytest.mark.parametrize("layout", ["transposed", "sliced"])
def test_gather_and_scatter_add_on_non_contiguous_operands(monkeypatch, layout):
    calls = _taken(monkeypatch)
    x = _floats(64, 64)
    index = _ints(64, 64, 64)
    check_op(lambda a, i: a.gather(1, i), lambda a, i: a.gather(1, i), [x, index], layout=[layout, "contiguous"],
             atol=0, rtol=0, grad_atol=1e-5)
    base = _floats(64, 64)
    check_op(lambda b, i, s: b.scatter_add(0, i, s), lambda b, i, s: b.scatter_add(0, i, s), [base, index, x],
             layout=[layout, "contiguous", layout], atol=1e-5, rtol=1e-5)
    assert "gather" in calls and "scatter_add" in calls


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool", "complex64", "float16"])
def test_gather_of_every_element_width(dtype):
    x = (_floats(50, 60) * 10).astype(dtype) if dtype != "complex64" else \
        (_floats(50, 60) + 1j * _floats(50, 60)).astype(dtype)
    index = _ints(60, 50, 70)
    out = jitorch.tensor(x).gather(1, jitorch.tensor(index))
    ref = torch.from_numpy(x).gather(1, torch.from_numpy(index))
    assert out.dtype.name == str(ref.dtype).split(".")[1]
    np.testing.assert_array_equal(out.numpy(), ref.numpy())


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_scatter_add_with_repeats_and_an_expanded_index(monkeypatch, dtype):
    calls = _taken(monkeypatch)
    base = (_floats(40, 100) * 10).astype(dtype)
    src = (_floats(3000, 100) * 10).astype(dtype)
    index = _ints(40, 3000)
    # index.view(-1, 1).expand(-1, n): constant along dim 1 (stride 0), the rows form of the kernel
    out = jitorch.tensor(base).scatter_add(0, jitorch.tensor(index).view(-1, 1).expand(-1, 100), jitorch.tensor(src))
    ref = torch.from_numpy(base).scatter_add(0, torch.from_numpy(index).view(-1, 1).expand(-1, 100),
                                             torch.from_numpy(src))
    tol = 1e-4 if dtype.startswith("float") else 0
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=tol, atol=tol)
    assert calls == ["scatter_add"]


def test_index_add_index_put_and_embedding_gradients(monkeypatch):
    calls = _taken(monkeypatch)
    weight = _floats(500, 32)
    ids = _ints(500, 16, 40)
    check_op(lambda w, i: jitorch.nn.functional.embedding(i, w), lambda w, i: torch.nn.functional.embedding(i, w),
             [weight, ids], atol=0, rtol=0, grad_atol=1e-5, grad_rtol=1e-5)
    values = _floats(3, 700, 9)
    rows = _ints(20, 700)
    check_op(lambda b, v, i: b.index_add(1, i, v), lambda b, v, i: b.index_add(1, i, v), [_floats(3, 20, 9), values,
             rows], atol=1e-5, rtol=1e-5)
    check_op(lambda b, v, i: b.index_put((i,), v, accumulate=True),
             lambda b, v, i: b.index_put((i,), v, accumulate=True), [_floats(30, 8), _floats(700, 8), _ints(30, 700)],
             atol=1e-5, rtol=1e-5)
    # a scalar value broadcast to every picked row (a stride-0 source)
    out = jitorch.zeros(30, 80).index_put_((jitorch.tensor(rows[:100] % 30),), jitorch.tensor(1.5), accumulate=True)
    ref = torch.zeros(30, 80).index_put_((torch.from_numpy(rows[:100] % 30),), torch.tensor(1.5), accumulate=True)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    assert calls.count("scatter_add") >= 4


def test_negative_indices_wrap_for_indexing_and_fail_for_gather(monkeypatch):
    calls = _taken(monkeypatch)
    x = _floats(100, 40)
    index = RNG.integers(-100, 100, 300)
    check_op(lambda a, i: a[i], lambda a, i: a[i], [x, index], atol=0, rtol=0, grad_atol=1e-5)
    assert "scatter_add" in calls  # the gradient of a[i]
    neg = _ints(40, 100, 40)
    neg[7, 3] = -1
    check_error(lambda a, i: a.gather(1, i), lambda a, i: a.gather(1, i), [x, neg],
                match="index -1 is out of bounds for dimension 1 with size 40")


def test_out_of_bounds_scatter_leaves_self_untouched():
    base = _floats(50, 60)
    index = _ints(50, 50, 60)
    index[30, 5] = 50
    t = jitorch.tensor(base)
    check_error(lambda b, i, s: b.scatter_add_(0, i, s), lambda b, i, s: b.scatter_add_(0, i, s),
                [base, index, _floats(50, 60)], match="index 50 is out of bounds for dimension 0 with size 50")
    with pytest.raises(RuntimeError, match="out of bounds"):
        t.scatter_add_(0, jitorch.tensor(index), jitorch.tensor(_floats(50, 60)))
    np.testing.assert_array_equal(t.numpy(), base)  # the updates made before the bad index were not kept
    rows = index[:, 0] * 10
    check_error(lambda b, i, v: b.index_put_((i,), v, accumulate=True),
                lambda b, i, v: b.index_put_((i,), v, accumulate=True), [base, rows, _floats(50, 60)],
                match="out of bounds for dimension 0 with size 50")
    with pytest.raises(IndexError):
        t.index_put_((jitorch.tensor(rows),), jitorch.tensor(_floats(50, 60)), accumulate=True)
    np.testing.assert_array_equal(t.numpy(), base)


def test_small_and_empty_keys_keep_the_numpy_path(monkeypatch):
    calls = _taken(monkeypatch)
    x = jitorch.tensor(_floats(4, 5))
    assert x.gather(1, jitorch.tensor(_ints(5, 4, 3))).shape == (4, 3)
    assert x.gather(1, jitorch.zeros(4, 0, dtype=jitorch.long)).shape == (4, 0)
    assert calls == []


@pytest.mark.parametrize("variant", ["points", "rows", "scalar"])
def test_kernels_against_numpy(variant):
    inner = 1 if variant == "scalar" else 33
    src = _floats(7, 90, inner)[:, ::-1]  # a negative stride along the indexed dim
    idx = _ints(90, 7, 50, 1 if variant != "points" else inner)
    idx3 = np.broadcast_to(idx, (7, 50, inner))
    got = IndexedAlongDim("gather", "b4", "i64", variant, wrap=False)(src, idx3)
    np.testing.assert_array_equal(got, np.take_along_axis(src, idx3, 1))
    out = np.zeros((7, 90, inner), np.float64)
    ref = out.copy()
    vals = _floats(7, 50, inner, dtype="float64")
    IndexedAlongDim("scatter_add", "f64", "i64", variant, wrap=False)(vals, idx3, out)
    np.add.at(ref, (np.arange(7)[:, None, None], idx3, np.arange(inner)), vals)
    np.testing.assert_array_equal(out, ref)  # the same additions in the same order
    bad = idx.copy()
    bad[2, 10, 0] = 90
    with pytest.raises(IndexedOutOfBounds) as err:
        IndexedAlongDim("gather", "b4", "i64", variant, wrap=False)(src, np.broadcast_to(bad, (7, 50, inner)))
    # the bad index's own position; the scalar variant (no early exit in a row) names its row's first one
    assert err.value.position == (2 * 50 + (0 if variant == "scalar" else 10)) * inner


def test_arrays_with_strides_of_partial_elements():
    """A structured array's field has strides that are not whole elements: torch's from_numpy refuses it, and the
    kernels decline such an array."""
    rec = np.zeros(3000, dtype=[("a", "<f4"), ("b", "u1")])
    rec["a"] = np.arange(3000)
    with pytest.raises(ValueError, match="strides not a multiple of the element byte size"):
        jitorch.from_numpy(rec["a"])
    with pytest.raises(ValueError, match="strides not a multiple of the element byte size"):
        torch.from_numpy(rec["a"])
    geometry = ((1, 100, 3), (0, 15, 5))  # the operands' 3-D shape and byte strides, as `_views` gives them
    assert not native_indexed._run("gather", "b4", *((a, geometry) for a in (
        rec["a"], np.zeros(400, np.int64), np.zeros(300, np.float32))), False)


def test_index_into_an_empty_dim_raises_as_torch():
    with pytest.raises(IndexError):
        torch.zeros(0, 0)[:, torch.tensor([0, 1])]
    with pytest.raises(IndexError):
        jitorch.zeros(0, 0)[:, jitorch.tensor([0, 1])]
    assert jitorch.zeros(0, 3)[:, jitorch.tensor([2])].shape == torch.zeros(0, 3)[:, torch.tensor([2])].shape
