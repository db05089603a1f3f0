"""Shared by the research-code sweeps (``test_sweep_*.py``): each sweep writes its script once against a ``lib``
argument, runs it with ``lib=torch`` and ``lib=jitorch`` from torch's initial weights and the same NumPy data, and
compares what comes out (outputs, losses, gradients, parameters): `assert_runs_match` with an absolute tolerance
scaled to each array's magnitude, `assert_close_tree` leaf by leaf with fixed tolerances and exact integers."""
from __future__ import annotations

import numpy as np
import torch

import jitorch

LIBS = (torch, jitorch)


def arr(t):
    """A tensor of either library (or a nested tuple/list/dict of them) as NumPy arrays."""
    if isinstance(t, (list, tuple)):
        return [arr(x) for x in t]
    if isinstance(t, dict):
        return {k: arr(v) for k, v in t.items()}
    if isinstance(t, (torch.Tensor, jitorch.Tensor)):
        t = t.detach()
        if t.is_complex():
            return np.asarray(t.resolve_conj().numpy())
        return np.asarray(t.numpy())
    return np.asarray(t)


def numpy_state(module):
    """A module's state dict as NumPy arrays (the weights both runs start from)."""
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


def load_numpy_state(lib, module, state):
    module.load_state_dict({k: lib.tensor(v) for k, v in state.items()})
    return module


def to_numpy(value):
    """Tensors anywhere in nested lists, tuples and dicts become NumPy arrays; other leaves stay as they are."""
    if isinstance(value, (list, tuple)):
        return [to_numpy(v) for v in value]
    if isinstance(value, dict):
        return {k: to_numpy(v) for k, v in value.items()}
    return arr(value) if isinstance(value, (torch.Tensor, jitorch.Tensor)) else value


def copy_weights(src, dst):
    """Load torch module ``src``'s state into module ``dst`` of either library (same architecture)."""
    lib = jitorch if isinstance(dst, jitorch.nn.Module) else torch
    dst.load_state_dict({k: lib.tensor(v.detach().numpy().copy()) for k, v in src.state_dict().items()})


def assert_runs_match(th, jt, rtol=1e-5, atol=1e-6, what="run"):
    """Two results (nested lists/dicts of arrays or tensors) agree key by key.

    Each array's absolute tolerance is at least ``rtol`` times its largest magnitude: sums in another order differ
    by rounding relative to the terms, not to a result that cancels to near zero.
    """
    th, jt = arr(th), arr(jt)
    if isinstance(th, dict):
        assert th.keys() == jt.keys(), what
        for k in th:
            assert_runs_match(th[k], jt[k], rtol, atol, f"{what}[{k!r}]")
    elif isinstance(th, list):
        assert len(th) == len(jt), what
        for i, (a, b) in enumerate(zip(th, jt)):
            assert_runs_match(a, b, rtol, atol, f"{what}[{i}]")
    else:
        assert th.shape == jt.shape, f"{what}: shapes {th.shape} vs {jt.shape}"
        assert th.dtype == jt.dtype, f"{what}: dtypes {th.dtype} vs {jt.dtype}"
        scale = float(np.abs(th).max()) if th.size and np.issubdtype(th.dtype, np.inexact) else 0.0
        np.testing.assert_allclose(jt, th, rtol=rtol, atol=max(atol, rtol * scale), err_msg=what)


def assert_close_tree(expected, actual, *, rtol=1e-5, atol=1e-6, path="out"):
    """torch's results (``expected``) against jitorch's, leaf by leaf, naming the first leaf that differs."""
    expected, actual = to_numpy(expected), to_numpy(actual)
    if isinstance(expected, dict):
        assert set(expected) == set(actual), f"{path}: keys differ: {set(expected) ^ set(actual)}"
        for k in expected:
            assert_close_tree(expected[k], actual[k], rtol=rtol, atol=atol, path=f"{path}.{k}")
    elif isinstance(expected, list):
        assert len(expected) == len(actual), f"{path}: {len(expected)} entries, jitorch has {len(actual)}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_close_tree(e, a, rtol=rtol, atol=atol, path=f"{path}[{i}]")
    elif isinstance(expected, np.ndarray) or isinstance(actual, np.ndarray):
        e, a = np.asarray(expected), np.asarray(actual)
        assert e.shape == a.shape, f"{path}: shape {e.shape}, jitorch {a.shape}"
        assert e.dtype == a.dtype, f"{path}: dtype {e.dtype}, jitorch {a.dtype}"
        if e.dtype.kind in "biu":
            np.testing.assert_array_equal(a, e, err_msg=path)
        else:
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=path)
    elif isinstance(expected, float):
        assert np.isclose(actual, expected, rtol=rtol, atol=atol), f"{path}: {expected} vs jitorch {actual}"
    else:
        assert expected == actual, f"{path}: {expected!r} vs jitorch {actual!r}"
