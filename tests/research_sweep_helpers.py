"""Shared pieces of the research-code sweeps (``test_sweep_gnn.py``, ``test_sweep_dpsgd.py``, ...): each sweep writes
its training script once against a ``lib`` argument, runs it with ``lib=torch`` and ``lib=jitorch`` from torch's
initial weights and the same NumPy data, and compares what comes out (outputs, losses, gradients, parameters)."""
from __future__ import annotations

import numpy as np


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
    if hasattr(value, "detach"):
        return value.detach().numpy().copy()
    return value


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
