"""Helpers of the view and in-place tests: run a computation in jitorch and torch and compare,
or expect the same error.
"""
import numpy as np
import pytest
import torch

import jitorch


def _plain(value):
    """Tensors, sizes and tuples as comparable Python values (tensors as float64 NumPy arrays)."""
    if isinstance(value, (jitorch.Tensor, torch.Tensor)):
        return np.asarray(value.detach().tolist(), dtype=np.float64)
    if isinstance(value, (jitorch.Size, torch.Size)):
        return tuple(value)
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v) for v in value)
    return value


def _assert_equal(got, want, path="result"):
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.shape == want.shape, f"{path}: {got!r} != {want!r}"
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=path)
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), f"{path}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_equal(g, w, f"{path}[{i}]")
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"


def _same(fn):
    """``fn(jitorch)`` and ``fn(torch)`` give equal results (float32 noise tolerated)."""
    _assert_equal(_plain(fn(jitorch)), _plain(fn(torch)))


def _raises_both(fn, match, exc=RuntimeError):
    for lib in (jitorch, torch):
        with pytest.raises(exc, match=match):
            fn(lib)
