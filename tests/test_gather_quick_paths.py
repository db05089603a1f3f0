"""The quick paths of small gathers and subscripts keep torch's results, gradients, errors and nodes: ``gather``
with an index of the input's sizes apart from ``dim`` (the ``take_along`` row), ``x[idx]``/``x[:, mask]`` through
NumPy's own indexing, a stack of row-major inputs as one concatenate."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import assert_same, check_error, check_op

RNG = np.random.default_rng(11)
X3 = RNG.standard_normal((4, 5, 6)).astype(np.float32)


@pytest.mark.parametrize("shape,dim,picked", [
    ((10, 10), 1, 4), ((10, 10), 0, 3), ((10, 10), -1, 12), ((4, 5, 6), 0, 2), ((4, 5, 6), 1, 7), ((4, 5, 6), 2, 3),
    ((7,), 0, 12),
])
def test_gather_of_full_sized_index(shape, dim, picked):
    x = RNG.standard_normal(shape).astype(np.float32)
    index_shape = list(shape)
    index_shape[dim] = picked
    index = RNG.integers(0, shape[dim], index_shape)  # repeats: the gradient accumulates
    check_op(lambda a, i: a.gather(dim, i), lambda a, i: a.gather(dim, i), [x, index], atol=0, rtol=0,
             grad_atol=1e-6, grad_rtol=1e-6)
    check_op(lambda a, i: jitorch.gather(a, dim, i), lambda a, i: torch.gather(a, dim, i), [x, index], atol=0,
             rtol=0, grad=False)


def test_gather_of_smaller_index_reads_the_corner():
    """torch reads ``input`` at the index's own positions along the other dims (the INDEX row, not the quick take)."""
    index = RNG.integers(0, 6, (3, 2, 6))
    check_op(lambda a, i: a.gather(2, i), lambda a, i: a.gather(2, i), [X3, index], atol=0, rtol=0)
    check_op(lambda a, i: a.gather(1, i), lambda a, i: a.gather(1, i), [X3, index[:, :, :4] % 5], atol=0, rtol=0)


@pytest.mark.parametrize("bad", [6, -1])
def test_gather_bounds_errors(bad):
    index = RNG.integers(0, 6, (4, 5, 3))
    index[2, 1, 1] = bad
    check_error(lambda a, i: a.gather(2, i), lambda a, i: a.gather(2, i), [X3, index],
                match=f"index {bad} is out of bounds for dimension 2 with size 6")


def test_gather_node_and_saved_input():
    x = jitorch.tensor(X3, requires_grad=True)
    index = jitorch.tensor(RNG.integers(0, 5, (4, 5, 6)))
    out = x.gather(1, index)
    assert out.grad_fn.name() == "GatherBackward0" and out.dtype is jitorch.float32
    with jitorch.no_grad():
        assert x.gather(1, index).grad_fn is None
    for lib in (torch, jitorch):  # torch saves the input: an in-place change of it fails the backward
        y = lib.tensor(X3, requires_grad=True) * 1
        z = y.gather(1, lib.tensor(index.numpy()))
        y.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.sum().backward()


def test_gather_of_other_layouts_and_dtypes():
    index = RNG.integers(0, 4, (4, 5, 6))
    check_op(lambda a, i: a.gather(0, i), lambda a, i: a.gather(0, i), [X3, index.astype(np.int32)], atol=0, rtol=0)
    check_op(lambda a, i: a.gather(0, i), lambda a, i: a.gather(0, i), [X3, index], atol=0, rtol=0,
             layout=["transposed", "contiguous"])
    ints = RNG.integers(-9, 9, (4, 5, 6))
    check_op(lambda a, i: a.gather(0, i), lambda a, i: a.gather(0, i), [ints, index], grad=False)
    check_op(lambda a, i: a.gather(1, i), lambda a, i: a.gather(1, i), [X3, index[:, :0]], atol=0, rtol=0)


@pytest.mark.parametrize("key", [
    lambda i, m: i, lambda i, m: -i - 1, lambda i, m: (slice(None), i % 5), lambda i, m: m,
    lambda i, m: (slice(None), m[0]), lambda i, m: i[:0], lambda i, m: i[2], lambda i, m: i.int(),
])
def test_subscripts_with_one_index(key):
    index, mask = RNG.integers(0, 4, 6), X3[..., 0] > 0
    check_op(lambda x, i, m: x[key(i, m)], lambda x, i, m: x[key(i, m)], [X3, index, mask], atol=0, rtol=0)


def test_subscript_bounds_errors():
    check_error(lambda x, i: x[i], lambda x, i: x[i], [X3, np.array([1, 4])],
                match="index 4 is out of bounds for dimension 0 with size 4")
    check_error(lambda x, i: x[i], lambda x, i: x[i], [X3, np.array([1, -5])],
                match="index -5 is out of bounds for dimension 0 with size 4")
    check_error(lambda x, i: x[:, :, i], lambda x, i: x[:, :, i], [X3, np.array([6])], match="out of bounds")
    check_error(lambda x, i: x.index_select(1, i), lambda x, i: x.index_select(1, i), [X3, np.array([0, -1])])
    check_error(lambda x, m: x[m], lambda x, m: x[m], [X3, np.ones((4, 4), bool)], match="The shape of the mask")


def test_stack_of_row_major_and_transposed_inputs():
    a, b = RNG.standard_normal((2, 6, 5)).astype(np.float32)
    for dim in (0, 1, 2, -1):
        for pair in ((a, b), (a, b.T.copy().T), (a.T, b.T)):
            got = jitorch.stack([jitorch.tensor(p) if p.flags.c_contiguous else jitorch.tensor(p.T).t()
                                 for p in pair], dim)
            want = torch.stack([torch.tensor(p) if p.flags.c_contiguous else torch.tensor(p.T).t() for p in pair],
                               dim)
            assert_same(got, want)
            assert got.stride() == want.stride()
