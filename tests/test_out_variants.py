"""``out=`` on reductions, selections, scans and indexing functions against PyTorch.

Each case passes fresh ``out`` tensors (empty ones, so the result also resizes them) and compares both what the call
returns and what the ``out`` tensors hold afterwards; the result must be the ``out`` tensor itself.
"""
import numpy as np
import pytest
import torch
from helpers import check_error, check_op

import jitorch

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 5)).astype(np.float32)
TIES = RNG.integers(0, 4, (4, 5)).astype(np.float32)
IDX = np.array([[0, 2, 2], [1, 0, 3]])


def _outs(lib, kinds):
    return tuple(lib.empty(0, dtype=getattr(lib, k)) for k in kinds)


# name, call (lib, x, out) -> result, out dtypes (one name: a single tensor; several: a tuple)
CASES = [
    ("sort", lambda lib, x, o: lib.sort(x, dim=1, descending=True, out=o), ("float32", "int64")),
    ("msort", lambda lib, x, o: lib.msort(x, out=o), ("float32",)),
    ("topk", lambda lib, x, o: lib.topk(x, 2, out=o), ("float32", "int64")),
    ("kthvalue", lambda lib, x, o: lib.kthvalue(x, 2, 0, out=o), ("float32", "int64")),
    ("median", lambda lib, x, o: lib.median(x, 1, out=o), ("float32", "int64")),
    ("nanmedian", lambda lib, x, o: lib.nanmedian(x, 1, True, out=o), ("float32", "int64")),
    ("mode", lambda lib, x, o: lib.mode(x, 1, out=o), ("float32", "int64")),
    ("cummax", lambda lib, x, o: lib.cummax(x, 1, out=o), ("float32", "int64")),
    ("cummin", lambda lib, x, o: lib.cummin(x, 0, out=o), ("float32", "int64")),
    ("aminmax", lambda lib, x, o: lib.aminmax(x, dim=0, out=o), ("float32", "float32")),
    ("max", lambda lib, x, o: lib.max(x, 1, out=o), ("float32", "int64")),
    ("min", lambda lib, x, o: lib.min(x, 0, keepdim=True, out=o), ("float32", "int64")),
    ("searchsorted", lambda lib, x, o: lib.searchsorted(x.sort().values, x, out=o), ("int64",)),
    ("bucketize", lambda lib, x, o: lib.bucketize(x, lib.tensor([0.0, 1.0]), out=o), ("int64",)),
    ("histc", lambda lib, x, o: lib.histc(x, 4, out=o), ("float32",)),
    ("logcumsumexp", lambda lib, x, o: lib.logcumsumexp(x, 1, out=o), ("float32",)),
    ("sum", lambda lib, x, o: lib.sum(x, 0, out=o), ("float32",)),
    ("nansum", lambda lib, x, o: lib.nansum(x, 1, out=o), ("float32",)),
    ("mean", lambda lib, x, o: lib.mean(x, (0, 1), out=o), ("float32",)),
    ("nanmean", lambda lib, x, o: lib.nanmean(x, 1, out=o), ("float64",)),
    ("prod", lambda lib, x, o: lib.prod(x, 1, out=o), ("float32",)),
    ("amax", lambda lib, x, o: lib.amax(x, 1, out=o), ("float32",)),
    ("amin", lambda lib, x, o: lib.amin(x, out=o), ("float32",)),
    ("argmax", lambda lib, x, o: lib.argmax(x, 1, out=o), ("int64",)),
    ("argmin", lambda lib, x, o: lib.argmin(x, out=o), ("int64",)),
    ("all", lambda lib, x, o: lib.all(x > 0, 1, out=o), ("bool",)),
    ("any", lambda lib, x, o: lib.any(x > 0, out=o), ("bool",)),
    ("var", lambda lib, x, o: lib.var(x, 1, out=o), ("float32",)),
    ("std", lambda lib, x, o: lib.std(x, 0, correction=0, out=o), ("float32",)),
    ("logsumexp", lambda lib, x, o: lib.logsumexp(x, 1, out=o), ("float32",)),
    ("quantile", lambda lib, x, o: lib.quantile(x, 0.3, dim=1, out=o), ("float32",)),
    ("nanquantile", lambda lib, x, o: lib.nanquantile(x, 0.3, out=o), ("float32",)),
    ("diff", lambda lib, x, o: lib.diff(x, out=o), ("float32",)),
    ("take", lambda lib, x, o: lib.take(x, lib.tensor([0, 7, 7]), out=o), ("float32",)),
    ("take_along_dim", lambda lib, x, o: lib.take_along_dim(x, lib.tensor([[0], [4], [1], [1]]), 1, out=o),
     ("float32",)),
    ("gather", lambda lib, x, o: lib.gather(x, 1, lib.tensor([[0, 0], [3, 1]]), out=o), ("float32",)),
    ("index_add", lambda lib, x, o: lib.index_add(x, 0, lib.tensor([0, 0]), x[:2], out=o), ("float32",)),
    ("index_copy", lambda lib, x, o: lib.index_copy(x, 0, lib.tensor([3, 0]), x[:2], out=o), ("float32",)),
    ("scatter", lambda lib, x, o: lib.scatter(x, 0, lib.tensor([[1, 0]]), x, out=o), ("float32",)),
    ("scatter_add", lambda lib, x, o: lib.scatter_add(x, 0, lib.tensor([[1, 1]]), x, out=o), ("float32",)),
    ("scatter_reduce", lambda lib, x, o: lib.scatter_reduce(x, 0, lib.tensor([[1, 1]]), x, "amax", out=o),
     ("float32",)),
    ("slice_scatter", lambda lib, x, o: lib.slice_scatter(x, x[:, :2], 1, 0, 4, 2, out=o), ("float32",)),
    ("masked_select", lambda lib, x, o: lib.masked_select(x, x > 0, out=o), ("float32",)),
    ("nonzero", lambda lib, x, o: lib.nonzero(x > 0, out=o), ("int64",)),
    ("index_select", lambda lib, x, o: lib.index_select(x, 1, lib.tensor([3, 0, 3]), out=o), ("float32",)),
    ("isin", lambda lib, x, o: lib.isin(x, x[0], out=o), ("bool",)),
]


@pytest.mark.parametrize("name,call,kinds", CASES, ids=[c[0] for c in CASES])
def test_out_is_filled_and_returned(name, call, kinds):
    def run(lib, x):
        outs = _outs(lib, kinds)
        o = outs[0] if len(outs) == 1 else outs
        result = call(lib, x, o)
        same = all(a is b for a, b in zip(result if len(outs) > 1 else (result,), outs))
        return result, outs, same
    check_op(lambda x: run(jitorch, x), lambda x: run(torch, x), [TIES if name == "mode" else X], grad=False)


def test_out_returns_the_named_tuple():
    v, i = jitorch.empty(0), jitorch.empty(0, dtype=jitorch.long)
    res = jitorch.sort(jitorch.tensor([2.0, 1.0]), out=(v, i))
    assert res.values is v and res.indices is i and type(res).__name__ == "sort"


def test_out_of_a_recorded_result_raises():
    check_error(lambda x: jitorch.sum(x.requires_grad_(), 0, out=jitorch.empty(5)),
                lambda x: torch.sum(x.requires_grad_(), 0, out=torch.empty(5)), [X], match="sum")
    # not differentiable: torch takes out= even when the input requires grad
    run = lambda lib, x: lib.argmax(x.requires_grad_(), 1, out=lib.empty(0, dtype=lib.long))  # noqa: E731
    check_op(lambda x: run(jitorch, x), lambda x: run(torch, x), [X], grad=False)


def test_out_dtype_of_indices_must_match():
    check_error(lambda x: jitorch.argmax(x, out=jitorch.empty(0)), lambda x: torch.argmax(x, out=torch.empty(0)),
                [X], match="argmax")
    check_error(lambda x: jitorch.sort(x, out=(jitorch.empty(0), jitorch.empty(0))),
                lambda x: torch.sort(x, out=(torch.empty(0), torch.empty(0))), [X], match="sort")
    check_error(lambda x: jitorch.isin(x, x, out=jitorch.empty(0)), lambda x: torch.isin(x, x, out=torch.empty(0)),
                [X], match="out tensor to have dtype")


@pytest.mark.parametrize("call", [
    lambda m, out: m.zeros(2, 3, out=out), lambda m, out: m.ones(4, out=out), lambda m, out: m.full((2,), 7, out=out),
    lambda m, out: m.arange(1, 9, 2, out=out), lambda m, out: m.linspace(0, 1, 5, out=out),
    lambda m, out: m.logspace(0, 2, 3, out=out), lambda m, out: m.eye(3, 2, out=out),
])
@pytest.mark.parametrize("dtype", ["float64", "int32"])
def test_factories_write_their_out_tensor_in_its_dtype(call, dtype):
    results = []
    for m in (torch, jitorch):
        out = m.full((7,), -1, dtype=getattr(m, dtype))
        got = call(m, out)
        assert got is out
        results.append(out)
    assert str(results[1].dtype).split(".")[-1] == dtype and tuple(results[1].shape) == tuple(results[0].shape)
    np.testing.assert_allclose(results[1].numpy(), results[0].numpy(), rtol=1e-12)


def test_random_factories_fill_out_and_factories_check_dtype_and_grad():
    out = jitorch.full((3,), -5.0)
    assert jitorch.rand(2, 2, out=out) is out and out.shape == (2, 2) and bool(((out >= 0) & (out < 1)).all())
    assert jitorch.randn(4, out=out) is out and out.shape == (4,)
    ints = jitorch.full((1,), -1, dtype=jitorch.int64)
    assert jitorch.randperm(5, out=ints) is ints and sorted(ints.tolist()) == [0, 1, 2, 3, 4]
    assert jitorch.randint(0, 3, (6,), out=ints) is ints and ints.shape == (6,)
    for m in (torch, jitorch):
        with pytest.raises(RuntimeError, match="does not match dtype of out parameter"):
            m.zeros(2, dtype=m.float32, out=m.empty(0, dtype=m.float64))
        with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
            m.zeros(2, out=m.empty(2, requires_grad=True))


@pytest.mark.parametrize("name,args,n_out", [
    ("linalg.svd", (), 3), ("linalg.qr", (), 2), ("linalg.slogdet", (), 2), ("linalg.eigh", (), 2),
    ("linalg.inv_ex", (), 2), ("linalg.cholesky_ex", (), 2), ("linalg.lu_factor", (), 2), ("qr", (), 2),
    ("svd", (), 3), ("row_stack", None, 1),
])
def test_decompositions_write_their_out_tensors(name, args, n_out):
    a = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
    results = []
    for m in (torch, jitorch):
        fn = m
        for part in name.split("."):
            fn = getattr(fn, part)
        outs = tuple(m.empty(0, dtype=m.int32 if name == "linalg.lu_factor" and i == 1 else
                             m.int32 if i == 1 and name.endswith("_ex") else m.float64) for i in range(n_out))
        call_args = ([m.tensor(a), m.tensor(a)],) if args is None else (m.tensor(a),)
        got = fn(*call_args, out=outs if n_out > 1 else outs[0])
        results.append(outs)
        assert (got[0] if n_out > 1 else got) is outs[0]
    for t, j in zip(*results):
        assert tuple(j.shape) == tuple(t.shape)
        if name not in ("linalg.svd", "svd", "linalg.qr", "qr", "linalg.eigh") or t.dim() == 1:
            np.testing.assert_allclose(j.numpy(), t.numpy(), rtol=1e-10, atol=1e-12)
