"""Indexing (``x[key]``, ``x[key] = v``) and the gather/scatter family against PyTorch 2.13.

Subscripts holding tensors are written as ``key(lib)`` so each framework gets its own index tensors. ``check_op``
turns 0-d arrays into 1-element vectors (``np.ascontiguousarray`` in ``helpers._layout_of``), so 0-d operands are
passed as 1-element arrays and reshaped to ``()`` inside the function under test.
"""
import types
import warnings

import numpy as np
import pytest
import torch
from helpers import check_error, check_op, gradcheck_op, gradgradcheck_op

import jitorch
from jitorch.ops import indexing as I


def _lib(t):
    return torch if isinstance(t, torch.Tensor) else jitorch


def _arr(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


X = _arr((3, 4, 5))
MASK_34 = _arr((3, 4), 1) > 0
MASK_5 = np.array([True, False, True, True, False])

# -- reading -----------------------------------------------------------------------------------------------------------
BASIC_KEYS = {
    "int": lambda lib: 1, "neg_int": lambda lib: -1, "all": lambda lib: slice(None), "from": lambda lib: slice(1, None),
    "neg_bounds": lambda lib: slice(-3, -1), "step": lambda lib: (slice(None), slice(None, None, 2)),
    "start_stop_step": lambda lib: (slice(None), slice(None), slice(1, -1, 3)), "ints": lambda lib: (0, 1),
    "ellipsis_int": lambda lib: (Ellipsis, 0), "none": lambda lib: (None, 0),
    "mid_none": lambda lib: (slice(None), None, 1),
    "ellipsis_none": lambda lib: (Ellipsis, None), "empty_tuple": lambda lib: (),
    "mixed": lambda lib: (0, Ellipsis, None, slice(1, 3)), "tensor_0d": lambda lib: lib.tensor(1),
    "numpy_int": lambda lib: np.int64(-2), "tensor_bounds": lambda lib: slice(lib.tensor(1), lib.tensor(3)),
    "numpy_bounds": lambda lib: (slice(None), slice(np.int32(-2), None)), "empty_slice": lambda lib: slice(2, 1),
    "past_end": lambda lib: slice(1, 100),
}

ADVANCED_KEYS = {
    "dups": lambda lib: [0, 2, 0, 0], "neg": lambda lib: [-1], "tensor_2d": lambda lib: lib.tensor([[0, 1], [2, 2]]),
    "numpy": lambda lib: np.array([1, 0]), "after_slice": lambda lib: (slice(None), [1, 1, 0]),
    "pair": lambda lib: ([0, 1], [1, 2]), "separated": lambda lib: ([0, 1], slice(None), [1, 2]),
    "adjacent": lambda lib: (slice(None), [0, 1], [1, 2]), "int_slice_tensor": lambda lib: (0, slice(None), [0, 1]),
    "ellipsis": lambda lib: (Ellipsis, [0, 0]), "nones": lambda lib: (None, [0, 1], None),
    "broadcast": lambda lib: (lib.tensor([[0], [2]]), slice(1, 3), lib.tensor([1, 4, 0])),
    "mask": lambda lib: lib.tensor(MASK_34),
    "mask_after_slice": lambda lib: (slice(None), slice(None), lib.tensor(MASK_5)),
    "mask_and_index": lambda lib: (lib.tensor(MASK_34), [4, 0, 1, 2, 3, 1, 1, 0, 2, 2, 3, 4][:int(MASK_34.sum())]),
    "true": lambda lib: True, "false": lambda lib: False, "tensor_true": lambda lib: lib.tensor(True),
    "tensor_false": lambda lib: (0, lib.tensor(False)), "bool_list": lambda lib: [True, False, True],
    "empty_list": lambda lib: [], "empty_tensor": lambda lib: lib.tensor([], dtype=lib.long),
    "int32": lambda lib: lib.tensor([2, 0], dtype=lib.int32), "tuple_index": lambda lib: ((0, 2), 1),
    "list_with_slice": lambda lib: [0, slice(1, 3)], "two_ellipses": lambda lib: (Ellipsis, 0, Ellipsis),
    "list_of_tensors": lambda lib: [lib.tensor([0, 1]), lib.tensor([2])],
}


def _getitem(key):
    def fn(x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyTorch warns about lists read as tuples
            return x[key(_lib(x))]
    return fn


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("name", list(BASIC_KEYS) + list(ADVANCED_KEYS))
def test_getitem_values_and_grads(name, layout):
    key = {**BASIC_KEYS, **ADVANCED_KEYS}[name]
    check_op(_getitem(key), _getitem(key), [X], layout=layout)


@pytest.mark.parametrize("name", list(BASIC_KEYS) + list(ADVANCED_KEYS))
def test_getitem_is_a_view_exactly_when_torch_gives_one(name):
    key = {**BASIC_KEYS, **ADVANCED_KEYS}[name]
    jt, th = _getitem(key)(jitorch.tensor(X)), _getitem(key)(torch.tensor(X))
    assert (jt._base is not None) == (th._base is not None)


def test_getitem_expanded_input_and_duplicate_grads_sum():
    check_op(lambda x: x[[0, 0, 1, 0]], lambda x: x[[0, 0, 1, 0]], [X], layout="expanded")
    x = jitorch.ones(3, requires_grad=True)
    x[jitorch.tensor([1, 1, 1, 2])].sum().backward()
    assert x.grad.tolist() == [0.0, 3.0, 1.0]


def _scalar(fn):
    return lambda x, *rest: fn(x.reshape(()), *rest)


@pytest.mark.parametrize("key", [lambda lib: None, lambda lib: Ellipsis, lambda lib: (), lambda lib: True,
                                 lambda lib: lib.tensor(False), lambda lib: (None, Ellipsis, None),
                                 lambda lib: lib.tensor([True])])
def test_getitem_zero_dim(key):
    check_op(_scalar(_getitem(key)), _scalar(_getitem(key)), [np.array([2.5])])


def test_getitem_writes_through_basic_view():
    for lib in (jitorch, torch):
        x = lib.zeros(3, 4)
        x[1:, ::2][0].fill_(7.0)
        x[lib.tensor(2)][-1] = 3.0
        assert x.sum().item() == 17.0


@pytest.mark.parametrize("key, match, exc", [
    (lambda lib: 5, "index 5 is out of bounds for dimension 0 with size 3", IndexError),
    (lambda lib: (slice(None), -5), "index -5 is out of bounds for dimension 1 with size 4", IndexError),
    (lambda lib: (slice(None), [5]), "index 5 is out of bounds for dimension 0 with size 4", IndexError),
    (lambda lib: ([0], [5]), "index 5 is out of bounds for dimension 1 with size 4", IndexError),
    (lambda lib: lib.tensor([1.0]), "tensors used as indices must be long, int, byte or bool tensors", IndexError),
    (lambda lib: lib.tensor([1], dtype=lib.int16), "must be long, int, byte or bool", IndexError),
    (lambda lib: 1.5, "valid indices (got float)", IndexError),
    (lambda lib: (0, 0, 0, 0), "too many indices for tensor of dimension 3", IndexError),
    (lambda lib: lib.tensor([True, False]), "The shape of the mask [2] at index 0 does not match", IndexError),
    (lambda lib: slice(None, None, -1), "step must be greater than zero", ValueError),
    (lambda lib: ([0, 1], slice(None), [0, 1, 2]), "shape mismatch: indexing tensors could not", IndexError),
])
def test_getitem_errors(key, match, exc):
    err = check_error(_getitem(key), _getitem(key), [X], match=match)
    assert isinstance(err, exc)


def test_getitem_with_empty_result_does_not_check_bounds():
    key = lambda lib: (slice(0, 0), [7, -9])  # noqa: E731 - nothing is read, so PyTorch accepts any index
    check_op(_getitem(key), _getitem(key), [X])


def test_getitem_zero_dim_errors():
    check_error(_scalar(lambda x: x[0]), _scalar(lambda x: x[0]), [np.array([1.0])],
                match="invalid index of a 0-dim tensor")


# -- writing -----------------------------------------------------------------------------------------------------------
SET_CASES = {
    "int_scalar": (lambda lib: 0, 5.0), "slice_scalar": (lambda lib: slice(None, 2), -1),
    "slice_tensor": (lambda lib: (slice(None), slice(1, 3)), (2, 5)), "list": (lambda lib: [0, 2], (5,)),
    "dup_scalar": (lambda lib: [1, 1, 1], 2.0), "mask_scalar": (lambda lib: lib.tensor(MASK_34), -float("inf")),
    "mask_tensor": (lambda lib: (lib.tensor(MASK_34),), (int(MASK_34.sum()), 5)),
    "ellipsis_none": (lambda lib: (Ellipsis, None, 0), (3, 1, 4)), "int_and_list": (lambda lib: (0, [1, 2]), (5,)),
    "separated": (lambda lib: ([0, 1], slice(None), [1, 2]), (2, 4)), "leading_ones": (lambda lib: 0, (1, 1, 4, 5)),
    "tensor_0d": (lambda lib: lib.tensor(1), (5,)), "value_0d": (lambda lib: [2, 0], ()),
    "neg_step": (lambda lib: (slice(None), slice(-3, None, 2)), (1, 2, 5)), "empty": (lambda lib: [], (5,)),
}


def _setitem(key, value):
    def fn(x, *v):
        y = x * 1
        y[key(_lib(x))] = v[0] if v else value
        return y * 2
    return fn


@pytest.mark.parametrize("name", list(SET_CASES))
def test_setitem_values_and_grads(name):
    key, value = SET_CASES[name]
    inputs = [X] + ([_arr(value, 2)] if isinstance(value, tuple) else [])
    check_op(_setitem(key, value), _setitem(key, value), inputs)


def test_setitem_sampling_mask_idiom():
    def fn(logits):
        lib = _lib(logits)
        logits = logits * 1
        v, _ = lib.topk(logits, 2)
        logits[logits < v[:, [-1]]] = -float("inf")
        return lib.softmax(logits, dim=-1)
    check_op(fn, fn, [_arr((3, 6))])


@pytest.mark.parametrize("key", [lambda lib: [0, 1], lambda lib: lib.tensor(MASK_34[1:]), lambda lib: (0, 1)])
def test_setitem_through_view_reaches_base(key):
    def fn(x, v):
        base = x * 1
        view = base[1:]
        view[key(_lib(x))] = v.sum()
        # ``* 1``: jitorch's engine drops the gradients when one backward root (view) leads to another (base).
        return base * 1, view * 1
    check_op(fn, fn, [X, _arr((2,), 3)])


def test_setitem_dtype_casting_and_leaf_errors():
    def fn(x):
        lib = _lib(x)
        y = lib.zeros(4, dtype=lib.int64)
        y[[0, 1]] = 2.7
        y[2:] = lib.tensor([1.9, -1.9])
        y[lib.tensor([False, True, False, False])] = x.detach()[0, 0, :1].to(lib.int64)
        return y
    check_op(fn, fn, [X * 3])
    for lib in (jitorch, torch):
        x = lib.zeros(3, requires_grad=True)
        with pytest.raises(RuntimeError, match="leaf Variable"):
            x[[0]] = 1.0
        with pytest.raises(TypeError):
            x.detach()[0] = [1.0]


def test_setitem_into_plain_tensor_with_grad_value_makes_history():
    for lib in (jitorch, torch):
        v = lib.tensor([1.0, 2.0], requires_grad=True)
        y = lib.zeros(4)
        y[[3, 0]] = v * 3
        assert y.requires_grad and not y.is_leaf
        y.sum().backward()
        assert v.grad.tolist() == [3.0, 3.0]


def test_backward_of_index_survives_later_writes_to_its_input():
    def fn(x):
        y = x * 1
        z = y[[0, 2, 2]]
        y[0] = 0.0  # PyTorch saves only the indices: this write does not invalidate z's backward
        return z
    check_op(fn, fn, [X])


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
