"""Indexing (``x[key]``, ``x[key] = v``) and the gather/scatter family against PyTorch 2.13.

Subscripts holding tensors are written as ``key(lib)`` so each framework gets its own index tensors. ``check_op``
turns 0-d arrays into 1-element vectors (``np.ascontiguousarray`` in ``helpers._layout_of``), so 0-d operands are
passed as 1-element arrays and reshaped to ``()`` inside the function under test.
"""
import warnings

import numpy as np
import pytest
import torch
from helpers import check_error, check_op

import jitorch

from indexing_helpers import MASK_34, _arr, _lib, _scalar


X = _arr((3, 4, 5))
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
