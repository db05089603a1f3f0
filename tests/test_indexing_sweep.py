"""Regression cases kept from a randomized sweep of ``x[key]`` / ``x[key] = v`` (and the scalar writes that share
their value conversion: ``fill_``, ``masked_fill_``, ``full``) against PyTorch 2.13.

Each case runs in both libraries; the outcome is either the result (dtype, shape, values) or the exception's type and
message, which must agree.
"""

import numpy as np
import pytest
import torch

import jitorch
from helpers import outcome


def _same(fn):
    t, j = outcome(lambda: fn(torch)), outcome(lambda: fn(jitorch))
    if isinstance(t[1], str) or isinstance(j[1], str):
        assert t == j, (t, j)
    else:
        assert t[0] == j[0] and tuple(t[1].shape) == tuple(j[1].shape), (t, j)
        np.testing.assert_array_equal(j[1].numpy(), t[1].numpy())


def _set(dtype, key, value, shape=(3,)):
    def run(L):
        x = L.zeros(shape, dtype=getattr(L, dtype))
        x[key(L)] = value(L) if callable(value) else value
        return x
    return run


# -- Python scalars are range-checked as c10's checked_convert, not wrapped ------------------------------------------
SCALARS = [-1, -128, 128, 255, 256, -300, 300, -2.5, 2.5, 1e10, float("inf"), float("nan"), 1 + 0j, 1 + 2j, True]
WRITES = {
    "setitem_index": lambda dt, v: _set(dt, lambda L: L.tensor([0, 1]), v),
    "setitem_slice": lambda dt, v: _set(dt, lambda L: slice(0, 1), v),
    "fill_": lambda dt, v: lambda L: L.zeros(3, dtype=getattr(L, dt)).fill_(v),
    "masked_fill_": lambda dt, v: lambda L: L.zeros(3, dtype=getattr(L, dt)).masked_fill_(L.tensor([1, 0, 0]) > 0, v),
    "full": lambda dt, v: lambda L: L.full((2,), v, dtype=getattr(L, dt)),
}


@pytest.mark.parametrize("write", sorted(WRITES))
@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int64", "float16", "bool", "float32", "complex64"])
def test_scalar_writes_check_overflow_like_torch(write, dtype):
    for v in SCALARS:
        _same(WRITES[write](dtype, v))


def test_setitem_checks_the_value_before_the_key():
    # torch converts the value first: an unconvertible value wins over a key that is out of range
    _same(_set("float32", lambda L: (L.tensor([-3, 0, 1], dtype=L.int32),), 1 + 2j, shape=()))
    _same(_set("uint8", lambda L: L.tensor([[1], [2]]), 300, shape=()))


# -- a 1-element value of another dtype is cast on torch's masked_fill path --------------------------------------------
MASK_CASES = [
    ("float32", (5,), lambda L: [False, False, False, True, False], lambda L: L.ones((1, 1), dtype=L.bool)),
    ("float16", (4, 3, 2), lambda L: (slice(1, None, 2), L.tensor([[False, False], [True, True], [True, False]])),
     lambda L: L.tensor(7, dtype=L.int32)),
    ("int64", (1, 5), lambda L: L.tensor([[False, False, True, True, False]]), lambda L: L.tensor(2.5 + 0j)),
    ("float64", (2,), lambda L: (None, L.tensor([True, False])), lambda L: L.full((1, 1, 1), 3.0)),
    ("float64", (4, 1), lambda L: (L.tensor([[False], [True], [False], [False]]),), lambda L: L.tensor(True)),
    ("float64", (4, 3), lambda L: (Ellipsis, L.tensor([True, False, True])), lambda L: L.tensor([2], dtype=L.int8)),
]


@pytest.mark.parametrize("case", range(len(MASK_CASES)))
def test_setitem_mask_with_one_element_value_casts(case):
    dtype, shape, key, value = MASK_CASES[case]
    _same(_set(dtype, key, value, shape))


@pytest.mark.parametrize("key", [
    lambda L: (L.tensor([0, 1]),),  # an index tensor: index_put_ insists on equal dtypes
    lambda L: (L.tensor([True, False, True]), L.tensor([0, 1])),  # a mask and an index
    lambda L: (True, L.tensor([True, False, True])),  # a bool literal is an index, not a mask
    lambda L: L.tensor([[True, False, True]] * 2),  # a mask over a 1-element value of many elements
])
def test_setitem_other_dtype_value_off_the_masked_fill_path_raises(key):
    _same(_set("float32", key, lambda L: L.tensor([1.0], dtype=L.float64), shape=(2, 3)))


def test_setitem_reports_unbroadcastable_indices_before_dtypes():
    _same(_set("int64", lambda L: ([-3, 1], [True, True, True, True]), lambda L: L.tensor(1.5, dtype=L.float16),
               shape=(3, 4, 2, 2)))
    _same(_set("float64", lambda L: (False, slice(None, -1, 3), None, L.tensor([1, -2, -3], dtype=L.int32)),
               lambda L: L.ones((1, 2), dtype=L.complex64), shape=(1, 5, 2)))
    _same(_set("int32", lambda L: (L.tensor(False), slice(-3, 1), L.tensor(np.eye(5, 2, dtype=bool))),
               lambda L: L.ones((1, 2), dtype=L.uint8), shape=(3, 5, 2, 2)))
