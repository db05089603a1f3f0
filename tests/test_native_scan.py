"""float32 ``cumsum`` through the native scan (``ops/native_scan.py``): bit-identical to torch's CPU kernel (a
float64 running sum from 0: ``-0.0`` gives ``0.0``, wide magnitudes round as torch's), along every dim, with
gradients; non-contiguous, small, empty and 0-d inputs keep NumPy's loop and agree as well."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops import native_scan
from helpers import check_op


def _data(shape, seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(shape) * rng.choice([1e-20, 1.0, 1e20], shape)).astype(np.float32)
    a.reshape(-1)[:7] = -0.0
    return a


def _bits(t):
    return t.detach().numpy().tobytes()


@pytest.mark.parametrize("shape", [(300, 40), (6, 70, 11), (3, 2, 900), (2100,), (5000, 1)])
def test_cumsum_is_bit_identical_to_torch(shape):
    a = _data(shape)
    assert native_scan.cumsum_float32(a, 0) is not None
    for dim in range(-len(shape), len(shape)):
        got, want = jitorch.from_numpy(a).cumsum(dim), torch.from_numpy(a).cumsum(dim)
        assert got.dtype == jitorch.float32 and tuple(got.stride()) == tuple(want.stride())
        assert _bits(got) == _bits(want), dim


def test_native_path_agrees_with_numpys_loop(monkeypatch):
    a = np.random.default_rng(1).standard_normal((40, 120)).astype(np.float32)
    native = [jitorch.from_numpy(a).cumsum(d).numpy() for d in (0, 1)]
    monkeypatch.setattr(native_scan, "MIN_SIZE", 1 << 60)
    for d, got in zip((0, 1), native):
        np.testing.assert_array_equal(got, jitorch.from_numpy(a).cumsum(d).numpy())


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_cumsum_gradients(layout):
    a = np.random.default_rng(2).standard_normal((60, 80)).astype(np.float32)
    for dim in (0, 1):
        check_op(lambda v, d=dim: v.cumsum(d), lambda v, d=dim: v.cumsum(d), [a], layout=layout, atol=1e-5)


def test_cumsum_with_dtype_and_other_dtypes():
    ints = np.arange(3000, dtype=np.int32).reshape(30, 100) - 1500
    assert _bits(jitorch.from_numpy(ints).cumsum(1, dtype=jitorch.float32)) == \
        _bits(torch.from_numpy(ints).cumsum(1, dtype=torch.float32))
    for dtype in (np.float64, np.float16):  # NumPy's loop, its -0.0 runs made 0.0 as torch's
        a = _data((50, 60)).astype(dtype)
        assert _bits(jitorch.from_numpy(a).cumsum(1)) == _bits(torch.from_numpy(a).cumsum(1))
    small = np.array([-0.0, -0.0, 1.0, -1.0, -0.0], np.float32)
    assert _bits(jitorch.from_numpy(small).cumsum(0)) == _bits(torch.from_numpy(small).cumsum(0))


@pytest.mark.parametrize("shape", [(), (0,), (0, 4000), (4000, 0)])
def test_empty_and_zero_d(shape):
    a = np.ones(shape, np.float32)
    check_op(lambda v: v.cumsum(0), lambda v: v.cumsum(0), [a])
