"""index_reduce / index_reduce_ (every reduce, include_self, repeated indices, ties, dtypes, backward), narrow_copy,
nonzero_static and 0-d nonzero(as_tuple=True) against PyTorch."""
import numpy as np
import pytest
import torch
from helpers import check_error, check_op

import jitorch

RNG = np.random.default_rng(0)
SELF = RNG.standard_normal((4, 5)).astype(np.float32)
SRC = RNG.standard_normal((3, 5)).astype(np.float32)
TIES = RNG.integers(0, 3, (4, 5)).astype(np.float32)
TIES_SRC = RNG.integers(0, 3, (4, 3)).astype(np.float32)
REPEATED = np.array([0, 2, 0])


def run(fn, *inputs, **kw):
    return check_op(lambda *a: fn(jitorch, *a), lambda *a: fn(torch, *a), inputs, **kw)


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(reduce, include_self):
    run(lambda lib, t, i, s: lib.index_reduce(t, 0, i, s, reduce, include_self=include_self), SELF, REPEATED, SRC)
    run(lambda lib, t, i, s: t.index_reduce(1, i, s, reduce, include_self=include_self), TIES, REPEATED, TIES_SRC)
    run(lambda lib, t, i, s: t.clone().index_reduce_(-2, i, s, reduce, include_self=include_self), SELF, REPEATED,
        SRC, layout=["transposed", "contiguous", "contiguous"])
    ints = RNG.integers(-4, 5, (4, 5))
    run(lambda lib, t, i, s: t.index_reduce(0, i, s, reduce, include_self=include_self), ints, REPEATED, ints[:3])


def test_index_reduce_errors():
    run(lambda lib, t, i, s: t.index_reduce(0, i, s, "sum"), SELF, REPEATED, SRC)
    run(lambda lib, t, i, s: t.index_reduce(0, i, s, "amax"), SELF, REPEATED.astype(np.float32), SRC)
    run(lambda lib, t, i, s: t.index_reduce(0, i, s, "amax"), SELF, REPEATED, SRC.astype(np.float64))
    err = check_error(lambda t, i, s: t.index_reduce(0, i, s, "amax"), lambda t, i, s: t.index_reduce(0, i, s, "amax"),
                      [SELF, REPEATED, SRC.astype(np.float64)])
    assert str(err) == "index_reduce_(): self (Float) and source (Double) must have the same scalar type"


def test_scatter_reduce_mean_refuses_bool():
    fn = lambda t, i, s: t.scatter_reduce(0, i, s, "mean")  # noqa: E731
    check_error(fn, fn, [SELF > 0, np.repeat(REPEATED[:, None], 5, 1), SRC > 0],
                match="\"scatter_gather_tensor_cpu_reduce_mean\" not implemented for 'Bool'")


def test_narrow_copy():
    run(lambda lib, t: lib.narrow_copy(t, 1, 1, 3), SELF, layout="transposed")
    run(lambda lib, t: t.narrow_copy(0, 2, 2).is_contiguous(), SELF, layout="transposed", grad=False)
    run(lambda lib, t: t.narrow_copy(-1, 4, 1), SELF)


def test_nonzero_static():
    mask = SELF > 0
    for size in (0, 3, int(mask.sum()), 20):
        run(lambda lib, t: lib.nonzero_static(t, size=size), mask)
        run(lambda lib, t: t.nonzero_static(size=size, fill_value=-7), SELF)
    run(lambda lib, t: lib.nonzero_static(t, size=2), np.array(3.0, np.float32))
    run(lambda lib, t: lib.nonzero_static(t, size=-1), mask)


def test_nonzero_as_tuple_of_zero_dim():
    run(lambda lib, t: lib.nonzero(t, as_tuple=True), np.array(2.0, np.float32))
    run(lambda lib, t: t.nonzero(as_tuple=True), np.array(0.0, np.float32))
