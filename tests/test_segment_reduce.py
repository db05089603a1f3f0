"""``torch.segment_reduce`` / ``torch._segment_reduce`` (CSR pooling in graph code) against PyTorch: every reduce, with
and without ``initial``, lengths and offsets, empty segments, ties, ``axis`` with per-row lengths, ``unsafe`` and the
errors."""
import numpy as np
import pytest
import torch
from helpers import check_error, check_op

import jitorch

RNG = np.random.default_rng(0)
X = RNG.standard_normal((6, 3)).astype(np.float32)
TIES = np.round(X * 2) / 2
REDUCES = ["sum", "mean", "max", "min", "prod", "amax", "amin"]


def run(fn, *inputs, **kw):
    return check_op(lambda *a: fn(jitorch, *a), lambda *a: fn(torch, *a), inputs, **kw)


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("initial", [None, 0.5, -10.0])
def test_segment_reduce(reduce, initial):
    # torch's backward mishandles ties (split for a positive upstream gradient, not for a negative one): values only
    for x, grad in ((X, True), (TIES, False)):
        run(lambda L, t, n: L.segment_reduce(t, reduce, lengths=n, initial=initial), x, np.array([2, 0, 1, 3]),
            grad=grad)
        run(lambda L, t, o: L._segment_reduce(t, reduce, offsets=o, initial=initial), x, np.array([1, 3, 3, 5]),
            grad=grad)
        run(lambda L, t, n: L.segment_reduce(t, reduce, lengths=n, unsafe=True, initial=initial), x.astype(np.float64),
            np.array([2, 0, 1], np.int32), grad=grad)
    # per-row lengths along the last axis
    run(lambda L, t, n: L.segment_reduce(t, reduce, lengths=n, axis=1, initial=initial), X, np.array(
        [[2, 0, 4], [1, 1, 4], [6, 0, 0]]), layout=["transposed", "contiguous"])


def test_segment_reduce_errors():
    for lengths in (np.array([3, 2]), np.array([7, -1]), np.array([3.0, 3.0], np.float32)):
        check_error(lambda t, n: jitorch.segment_reduce(t, "sum", lengths=n),
                    lambda t, n: torch.segment_reduce(t, "sum", lengths=n), [X, lengths])
    for kw in ({}, {"lengths": np.array([3, 3]), "axis": 1}, {"lengths": np.array([3, 3]), "indices": np.array([0])}):
        check_error(lambda t: jitorch.segment_reduce(t, "sum", **{k: jitorch.tensor(v) if isinstance(v, np.ndarray)
                                                                  else v for k, v in kw.items()}),
                    lambda t: torch.segment_reduce(t, "sum", **{k: torch.tensor(v) if isinstance(v, np.ndarray)
                                                                else v for k, v in kw.items()}), [X])
    check_error(lambda t, n: jitorch.segment_reduce(t, "foo", lengths=n),
                lambda t, n: torch.segment_reduce(t, "foo", lengths=n), [X, np.array([3, 3])], match="got foo")
    check_error(lambda t, n: jitorch.segment_reduce(t, "sum", lengths=n),
                lambda t, n: torch.segment_reduce(t, "sum", lengths=n), [X.astype(np.int64), np.array([3, 3])],
                match="'Long'")


def test_coo_csr_index_conversions():
    rows = np.array([0, 0, 2, 2, 2, 4])
    for size, out_int32 in ((6, False), (3, False), (6, True)):
        run(lambda L, r: L._convert_indices_from_coo_to_csr(r, size, out_int32=out_int32), rows)
    run(lambda L, r: L._convert_indices_from_coo_to_csr(r, 6), rows.astype(np.int32))
    run(lambda L, r: L._convert_indices_from_coo_to_csr(r, 3), np.zeros((0,), np.int64))
    for bad in (rows.reshape(2, 3), rows.astype(np.float32)):
        check_error(lambda r: jitorch._convert_indices_from_coo_to_csr(r, 6),
                    lambda r: torch._convert_indices_from_coo_to_csr(r, 6), [bad])
    crow, col = np.array([0, 2, 2, 5]), np.array([1, 0, 2, 0, 1])
    for kw in ({}, {"out_int32": True, "transpose": True}):
        run(lambda L, c, k: L._convert_indices_from_csr_to_coo(c, k, **kw), crow, col)
