"""Eager float32 add/sub/mul/div over broadcast operands run as generated kernels (`ops.native_broadcast`): the same
values as torch (IEEE operations: bit for bit), gradients through the broadcast, every operand pattern, split over
threads, and the cases the path hands back (small, strided, other dtypes) unchanged."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops.native_broadcast import MIN_SIZE, broadcast_binary
from jitorch.ops.table import OPS

_SHAPES = {  # (x, y): full with row, row with full, columns, outer, 3-d blocks
    "bias": ((96, 130), (130,)), "bias_first": ((130,), (96, 130)), "column": ((96, 130), (96, 1)),
    "column_first": ((96, 1), (96, 130)), "outer": ((96, 1), (130,)), "outer_first": ((130,), (96, 1)),
    "block": ((6, 40, 64), (40, 64)), "leading": ((6, 40, 64), (6, 1, 1)), "mid_ones": ((6, 40, 64), (1, 40, 64)),
}
_OPS = {"add": lambda lib, a, b: a + b, "sub": lambda lib, a, b: a - b, "mul": lambda lib, a, b: a * b,
        "div": lambda lib, a, b: a / b, "add_alpha": lambda lib, a, b: lib.add(a, b, alpha=2),
        "rsub": lambda lib, a, b: lib.sub(b, a)}


@pytest.mark.parametrize("case", sorted(_SHAPES))
@pytest.mark.parametrize("name", sorted(_OPS))
def test_broadcast_ops_match_torch_values_and_gradients(case, name):
    rng = np.random.default_rng(0)
    xs, ys = _SHAPES[case]
    x, y = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ys).astype(np.float32)
    x.flat[:3] = [np.nan, np.inf, -0.0]
    y.flat[-2:] = [0.0, -np.inf]
    grad = None
    results = []
    for lib in (torch, jitorch):
        a, b = lib.tensor(x, requires_grad=True), lib.tensor(y, requires_grad=True)
        out = _OPS[name](lib, a, b)
        if grad is None:
            grad = rng.standard_normal(tuple(out.shape)).astype(np.float32)
        out.backward(lib.tensor(grad))
        results.append([t.detach().numpy() for t in (out, a.grad, b.grad)])
    for got, want in zip(results[1], results[0]):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    np.testing.assert_array_equal(results[1][0], results[0][0])  # the forward is exact


@pytest.mark.parametrize("case", sorted(_SHAPES))
def test_the_generated_kernel_takes_these_cases_and_splits_over_threads(case):
    xs, ys = _SHAPES[case]
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ys).astype(np.float32)
    before = jitorch.get_num_threads()
    try:
        for threads in (1, 2):
            jitorch.set_num_threads(threads)
            for op, ufunc in (("add", np.add), ("div", np.divide)):
                out = broadcast_binary(OPS[op], x, y)
                assert out is not None and out.flags.c_contiguous
                np.testing.assert_array_equal(out, ufunc(x, y))
    finally:
        jitorch.set_num_threads(before)


def test_cases_it_hands_back():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 128)).astype(np.float32)
    row = rng.standard_normal(128).astype(np.float32)
    assert broadcast_binary(OPS["add"], x[:2], row) is None  # small: NumPy's loop
    assert 2 * 128 < MIN_SIZE
    assert broadcast_binary(OPS["add"], x, x) is None  # same shapes: the callers' own paths
    assert broadcast_binary(OPS["add"], x.T.copy().T, row) is None  # a transposed layout
    assert broadcast_binary(OPS["add"], x.astype(np.float64), row.astype(np.float64)) is None
    assert broadcast_binary(OPS["pow"], x, row) is None
    assert broadcast_binary(OPS["add"], x, rng.standard_normal(3).astype(np.float32)) is None  # not broadcastable
    with pytest.raises(RuntimeError, match="add"):
        jitorch.tensor(x) + jitorch.ones(3)
    # Strided and mixed-dtype operands still give torch's answers through the other paths.
    xt, rt = torch.tensor(x), torch.tensor(row)
    xj, rj = jitorch.tensor(x), jitorch.tensor(row)
    np.testing.assert_array_equal((xj.t().t()[:, ::2] + rj[::2]).numpy(), (xt.t().t()[:, ::2] + rt[::2]).numpy())
    np.testing.assert_array_equal((xj + rj.double()).numpy(), (xt + rt.double()).numpy())
