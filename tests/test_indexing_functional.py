"""The functional indexing family (``gather``, ``scatter*``, ``index_*``, ``index_put``, masked ops, ``put``/``take``),
their errors and finite-difference gradients, and the array-module ``reduce_at`` helper, checked against PyTorch 2.13.
"""
import types
import warnings

import numpy as np
import pytest
import torch
from helpers import check_error, check_op, gradcheck_op, gradgradcheck_op

import jitorch
from jitorch.ops import indexing as I

from indexing_helpers import MASK_34, _arr, _lib, _scalar


# -- the functional family ---------------------------------------------------------------------------------------------
IDX = np.array([[2, 0, 1, 0, 2], [0, 0, 2, 1, 1]])
PERM = np.array([[2, 0, 1, 1, 2], [0, 1, 2, 0, 0]])  # distinct positions per column along dim 0 for (3, 5) targets


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_gather_and_take_along_dim(layout):
    x = _arr((3, 5))
    check_op(lambda a, i: a.gather(0, i), lambda a, i: a.gather(0, i), [x, IDX], layout=[layout, "contiguous"])
    check_op(lambda a, i: _lib(a).gather(a, -1, i), lambda a, i: torch.gather(a, -1, i), [x, IDX[:, :3] + 1])
    check_op(lambda a, i: a.gather(1, i), lambda a, i: a.gather(1, i), [x, np.zeros((0, 2), np.int64)])
    check_op(_scalar(lambda a, i: a.gather(0, i.reshape(()))), _scalar(lambda a, i: a.gather(0, i.reshape(()))),
             [np.array([1.5]), np.array([0])])
    check_op(lambda a, i: a.gather(0, i.reshape(())), lambda a, i: a.gather(0, i.reshape(())), [x[0], np.array([3])])
    check_op(lambda a, i: _lib(a).take_along_dim(a, i, 1), lambda a, i: torch.take_along_dim(a, i, 1),
             [x, np.array([[4, 0, -1]])])
    check_op(lambda a, i: _lib(a).take_along_dim(a, i), lambda a, i: torch.take_along_dim(a, i), [x, IDX])
    check_op(lambda a, i: a.take(i), lambda a, i: a.take(i), [x, np.array([[-1, 3], [14, 3]])],
             layout=[layout, "contiguous"])


def test_scatter_family():
    x, src = _arr((3, 5)), _arr((2, 6), 4)
    check_op(lambda a, i, s: a.scatter(0, i, s), lambda a, i, s: a.scatter(0, i, s), [x, PERM[:1], src[:1, :5]])
    # A src larger than index: PyTorch's own backward rejects its src gradient's shape, so compare values only.
    check_op(lambda a, i, s: a.scatter(0, i, s), lambda a, i, s: a.scatter(0, i, s), [x, PERM[:1], src], grad=False)
    check_op(lambda a, i: a.scatter(1, i, 2.5), lambda a, i: a.scatter(1, i, 2.5), [x, IDX[:, :2]])
    check_op(lambda a, i, s: a.scatter_add(0, i, s), lambda a, i, s: a.scatter_add(0, i, s), [x, IDX, src[:, :5]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch deprecates ``reduce=`` with a tensor src
        check_op(lambda a, i, s: a.scatter(0, i, s, reduce="add"), lambda a, i, s: a.scatter(0, i, s, reduce="add"),
                 [x, IDX, src], grad=False)

    def inplace(a, i, s):
        y = a * 1
        y.scatter_(0, i[:1], s[:1])
        return y.scatter_add_(1, i, s)
    check_op(inplace, inplace, [x, PERM, src[:, :5]])


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce(reduce, include_self):
    x = np.round(_arr((3, 5)), 0)  # small integers: ties for amax/amin, zeros for prod
    src = np.round(_arr((2, 5), 5), 0)
    x[0, 1], src[0, 1] = 0.0, 0.0

    def fn(a, i, s):
        return a.scatter_reduce(0, i, s, reduce, include_self=include_self)

    def inplace(a, i, s):
        return (a * 1).scatter_reduce_(1, i, s, reduce, include_self=include_self)
    check_op(fn, fn, [x, IDX, src])
    check_op(inplace, inplace, [x, IDX, src])
    ints = (np.arange(15).reshape(3, 5) - 7, IDX, np.arange(10).reshape(2, 5) * 3 - 13)
    check_op(fn, fn, list(ints))


def test_index_select_add_copy_fill():
    x, idx = _arr((4, 3)), np.array([3, 0, 3, 1])
    check_op(lambda a, i: a.index_select(0, i), lambda a, i: a.index_select(0, i), [x, idx], layout="transposed")
    select_0d = lambda a, i: _lib(a).index_select(a, 1, i.reshape(()))  # noqa: E731
    check_op(select_0d, select_0d, [x, np.array([2], np.int32)])
    check_op(_scalar(lambda a, i: a.index_select(0, i)), _scalar(lambda a, i: a.index_select(0, i)),
             [np.array([1.5]), np.array([0])])
    check_op(lambda a, i: a.index_select(0, i), lambda a, i: a.index_select(0, i), [x, np.zeros(0, np.int64)])
    check_op(lambda a, i, s: a.index_add(0, i, s, alpha=-2), lambda a, i, s: a.index_add(0, i, s, alpha=-2),
             [x, idx, _arr((4, 3), 6)])
    check_op(lambda a, i, s: (a * 1).index_add_(1, i, s), lambda a, i, s: (a * 1).index_add_(1, i, s),
             [x, np.array([2, 2]), _arr((4, 2), 6)])
    check_op(lambda a, i, s: a.index_copy(0, i, s), lambda a, i, s: a.index_copy(0, i, s),
             [x, np.array([3, 1]), _arr((2, 3), 6)])
    check_op(lambda a, i, s: (a * 1).index_copy_(-1, i, s), lambda a, i, s: (a * 1).index_copy_(-1, i, s),
             [x, np.array([0]), _arr((4, 1), 6)])
    check_op(lambda a, i: a.index_fill(1, i, -1.5), lambda a, i: a.index_fill(1, i, -1.5), [x, np.array([2, 0, -1])])
    check_op(lambda a, i, v: (a * 1).index_fill_(0, i, v.reshape(())),
             lambda a, i, v: (a * 1).index_fill_(0, i, v.reshape(())), [x, np.array([1, 1]), np.array([0.25])])
    check_op(lambda a, i, s: a.index_add(0, i, s, alpha=2), lambda a, i, s: a.index_add(0, i, s, alpha=2),
             [np.arange(6).reshape(3, 2), np.array([1, 1]), np.ones((2, 2), np.int64)])


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(accumulate):
    x = _arr((3, 4))

    def fn(a, i, j, v):
        return a.index_put((i, j), v, accumulate=accumulate)

    def by_mask(a, m, v):
        return (a * 1).index_put_((m,), v.reshape(()), accumulate=accumulate)
    check_op(fn, fn, [x, np.array([2, 0, 1]), np.array([3, 3, 0]), _arr((3,), 7)])
    check_op(fn, fn, [x, np.array([[2], [0]]), np.array([3, 1]), _arr((1, 2), 7)])
    check_op(by_mask, by_mask, [x, MASK_34, np.array([1.5])])
    if accumulate:
        check_op(fn, fn, [x, np.array([1, 1, 1]), np.array([2, 2, 2]), _arr((3,), 7)])


def test_index_put_value_shape_mismatch_names_both_shapes():
    x = _arr((5, 3))
    for put in (lambda a, i, v: a.index_put((i,), v, accumulate=True), lambda a, i, v: a.index_put((i,), v),
                lambda a, i, v: a.__setitem__(i, v)):
        check_error(put, put, [x, np.array([1, 2]), _arr((3, 3))],
                    match="value tensor of shape [3, 3] cannot be broadcast to indexing result of shape [2, 3]")
    setcol = lambda a, i, v: a.__setitem__((slice(None), i), v)  # noqa: E731
    check_error(setcol, setcol, [x, np.array([0, 1]), _arr((3, 3))], match="indexing result of shape [5, 2]")


def test_masked_ops():
    x, mask = _arr((3, 4)), MASK_34
    check_op(lambda a, m: a.masked_fill(m, -1e9), lambda a, m: a.masked_fill(m, -1e9), [x, mask], layout="transposed")
    check_op(lambda a, m, v: a.masked_fill(m, v.reshape(())), lambda a, m, v: a.masked_fill(m, v.reshape(())),
             [x, mask[0], np.array([0.5])])
    check_op(lambda a, m: a.masked_fill(m, 1.0), lambda a, m: a.masked_fill(m, 1.0), [x[0], mask])
    check_op(lambda a, m: a.masked_fill(m, 2.7), lambda a, m: a.masked_fill(m, 2.7),
             [np.arange(12).reshape(3, 4), mask])
    fill_ = lambda a, m, v: (a * 1).masked_fill_(m, v.reshape(()))  # noqa: E731
    check_op(fill_, fill_, [x, mask[:1], np.array([-0.5])])
    scalar_fill = _scalar(lambda a, m: (a * 1).masked_fill_(m.reshape(()), 3.0))
    check_op(scalar_fill, scalar_fill, [np.array([1.0]), np.array([True])])
    check_op(lambda a, m: a.masked_select(m), lambda a, m: a.masked_select(m), [x[0], mask])
    check_op(lambda a, m: _lib(a).masked_select(a, m), lambda a, m: torch.masked_select(a, m), [x, mask],
             layout="sliced")
    src = _arr((14,), 8)
    check_op(lambda a, m, s: a.masked_scatter(m, s), lambda a, m, s: a.masked_scatter(m, s), [x, mask, src])
    check_op(lambda a, m, s: a.masked_scatter(m, s), lambda a, m, s: a.masked_scatter(m, s), [x[:1], mask, src])
    check_op(lambda a, m, s: (a * 1).masked_scatter_(m, s), lambda a, m, s: (a * 1).masked_scatter_(m, s),
             [x, mask[2], src])


def test_put_and_take():
    x = _arr((3, 4))
    for accumulate in (False, True):
        idx = np.array([[0, -1], [5, 5]]) if accumulate else np.array([[0, -1], [5, 6]])
        check_op(lambda a, i, s: (a * 1).put_(i, s, accumulate=accumulate),
                 lambda a, i, s: (a * 1).put_(i, s, accumulate=accumulate), [x, idx, _arr((4,), 9)],
                 layout=["transposed", "contiguous", "contiguous"])
        check_op(lambda a, i, s: _lib(a).put(a, i, s, accumulate), lambda a, i, s: torch.put(a, i, s, accumulate),
                 [x, idx, _arr((2, 2), 9)])
    check_op(lambda a, i: a.take(i.reshape(())), lambda a, i: a.take(i.reshape(())), [x, np.array([7])],
             layout="sliced")


ERRORS = [
    (lambda a, lib: a.gather(0, lib.tensor([[5]])), "index 5 is out of bounds for dimension 0 with size 3"),
    (lambda a, lib: a.gather(0, lib.tensor([[1.0]])), "gather(): Expected dtype int32/int64 for index"),
    (lambda a, lib: a.gather(0, lib.tensor([1])), "same number of dimensions"),
    (lambda a, lib: a.gather(0, lib.zeros(1, 5, dtype=lib.long)), "Size does not match at dimension 1"),
    (lambda a, lib: a.index_select(0, lib.tensor([3])), "index out of range in self"),
    (lambda a, lib: a.index_select(0, lib.tensor([-1])), "index out of range in self"),
    (lambda a, lib: a.gather(1, lib.tensor([[-1]])), "index -1 is out of bounds for dimension 1 with size 4"),
    (lambda a, lib: a.scatter_add(0, lib.tensor([[-1]]), a), "index -1 is out of bounds for dimension 0 with size 3"),
    (lambda a, lib: a.scatter_reduce(0, lib.tensor([[-1]]), a, "amax"), "index -1 is out of bounds for dimension 0"),
    (lambda a, lib: a.index_copy(0, lib.tensor([-1]), a[:1]), "index_copy_(): index -1 is out of bounds"),
    (lambda a, lib: a.index_select(0, lib.tensor([[0]])), "Index is supposed to be a vector"),
    (lambda a, lib: a[0, 0].index_select(0, lib.tensor([0, 0])), "Index to scalar can have only 1 value"),
    (lambda a, lib: a.take(lib.tensor([12])), "out of range: tried to access index 12 on a tensor of 12 elements."),
    (lambda a, lib: a.scatter(1, lib.tensor([[4]]), 1.0), "index 4 is out of bounds for dimension 1 with size 4"),
    (lambda a, lib: a.scatter(1, lib.tensor([[0]]), a.double()), "Expected self.dtype to be equal to src.dtype"),
    (lambda a, lib: a.scatter_add_(1, lib.tensor([[0]]), a.double()), "scatter(): Expected self.dtype to be equal"),
    (lambda a, lib: a.scatter_add(1, lib.tensor([[0]]), lib.tensor(1.0)), "same number of dimensions as src tensor"),
    (lambda a, lib: a.scatter_add(1, lib.tensor([0]), a), "same number of dimensions as self tensor"),
    (lambda a, lib: a.scatter_reduce(0, lib.tensor([[0]]), a, "foo"), "reduce argument must be"),
    (lambda a, lib: a.index_put((lib.tensor([3]),), lib.tensor(1.0)), "index 3 is out of bounds"),
    (lambda a, lib: a.index_put((lib.tensor([1]),), lib.tensor(1.0, dtype=lib.float64)), "dtypes match"),
    (lambda a, lib: a.index_add(0, lib.tensor([0]), lib.ones(2, 4)), "Number of indices (1)"),
    (lambda a, lib: a.index_add(0, lib.tensor([7]), lib.ones(1, 4)), "index 7 is out of bounds for dimension 0"),
    (lambda a, lib: a[0].index_add(0, lib.tensor([7]), lib.ones(1)), "index out of range in self"),
    (lambda a, lib: a.index_copy(0, lib.tensor([5]), lib.ones(1, 4)), "index 5 is out of bounds for dimension 0"),
    (lambda a, lib: a.index_fill(0, lib.tensor([1.0]), 1.0), "Expected dtype int64 for index"),
    (lambda a, lib: a.masked_fill(lib.ones(3, 4, dtype=lib.long), 1.0), "with dtype long int"),
    (lambda a, lib: a.masked_fill_(lib.ones(3, 4, dtype=lib.uint8), 1.0), "with dtype unsigned char"),
    (lambda a, lib: a.masked_fill(lib.ones(4, dtype=lib.bool), lib.ones(2)), "0-dimensional value tensor"),
    (lambda a, lib: a.masked_fill(False, 1.0), "masked_fill"),  # a Python bool, as ``mask == 0`` on None gives
    (lambda a, lib: a.masked_select(True), "argument 'mask'"),
    (lambda a, lib: a.masked_fill_(lib.ones(2, 3, 4, dtype=lib.bool), 1.0), "doesn't match the broadcast shape"),
    (lambda a, lib: a.masked_select(lib.ones(4, dtype=lib.uint8)), "expected BoolTensor for mask"),
    (lambda a, lib: a.masked_scatter(lib.ones(4, dtype=lib.bool), lib.ones(3)), "Number of elements of source"),
    (lambda a, lib: a.put_(lib.tensor([0, 1]), lib.ones(3)), "same number of elements"),
    (lambda a, lib: a.put_(lib.tensor([-13]), lib.ones(1)), "tried to access index -13"),
    (lambda a, lib: lib.zeros(2, dtype=lib.long).masked_fill(lib.tensor([True, False]), -float("inf")), "overflow"),
]


@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_function_errors(case):
    fn, match = ERRORS[case]
    x = _arr((3, 4)).astype(np.float32)
    check_error(lambda a: fn(a, jitorch), lambda a: fn(a, torch), [x], match=match)


# -- finite differences ------------------------------------------------------------------------------------------------
def test_gradcheck():
    J = jitorch
    x, s = _arr((3, 4)), _arr((3, 4), 1)
    idx, mask = J.tensor([[2, 0, 1, 0], [0, 0, 2, 1]]), J.tensor(MASK_34)
    gradcheck_op(lambda a: a.gather(0, idx), [x])
    gradcheck_op(lambda a, b: a.scatter(1, J.tensor([[3, 0], [1, 2]]), b), [x, s])
    gradcheck_op(lambda a, b: a.scatter_add(0, idx, b), [x, s])
    gradcheck_op(lambda a, b: a.index_add(0, J.tensor([1, 1, 0]), b, alpha=0.5), [x, s])
    gradcheck_op(lambda a, v: a.masked_fill(mask, v), [x, np.array(0.3)])
    gradcheck_op(lambda a, b: a.masked_scatter(mask, b), [x, s])
    gradcheck_op(lambda a: a.masked_select(mask), [x])
    gradcheck_op(lambda a: a.reshape(3, 2, 2)[J.tensor([2, 2, 0]), 1:, [0, 1, 1]], [x])
    gradcheck_op(lambda a: a[:, None, J.tensor(MASK_34[0])], [x])

    def setitem(a, b):
        y = a * 1
        y[[0, 2], 1:3] = b
        return y
    gradcheck_op(setitem, [x, _arr((2,), 5)])
    gradcheck_op(lambda a, b: a.index_put((idx[0], idx[1]), b, accumulate=True), [x, _arr((4,), 5)])
    y, z = np.round(x * 2), np.round(s * 2) + 0.25  # distinct extremes keep the max/min differentiable
    for reduce in ("amax", "amin", "prod", "mean"):
        gradcheck_op(lambda a, b: a.scatter_reduce(0, idx, b, reduce, include_self=False), [y + 0.5, z])
    gradgradcheck_op(lambda a: a[J.tensor([1, 1, 0])] ** 2, [x])
    gradgradcheck_op(lambda a: (a.gather(1, idx.t()[:3]) ** 2), [x])


# -- array-module helpers ----------------------------------------------------------------------------------------------
def test_reduce_at_without_ufunc_at_matches_numpy():
    class NoUfuncAt(types.SimpleNamespace):
        """NumPy seen as an array module that is not NumPy: reduce_at must take its duplicate-free rounds path."""

        def __getattr__(self, name):
            return getattr(np, name)

    xp = NoUfuncAt()
    rng = np.random.default_rng(3)
    index = rng.integers(0, 4, (6, 3))
    key = (index, np.arange(3)[None, :])
    values = rng.standard_normal((6, 3))
    for reduce in ("prod", "amax", "amin"):
        got, want = np.ones((4, 3)), np.ones((4, 3))
        I.reduce_at(xp, reduce, got, key, values)
        I.reduce_at(np, reduce, want, key, values)
        np.testing.assert_allclose(got, want)
