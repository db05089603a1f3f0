"""Interop and Python protocols: DLPack with NumPy and torch, zero-copy numpy()/from_numpy, formatting, conversions."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "uint8", "bool", "float16"])
def test_dlpack_round_trip_with_torch_shares_memory(dtype):
    src = jitorch.arange(6).to(getattr(jitorch, dtype)).reshape(2, 3)
    theirs = torch.from_dlpack(src)
    assert theirs.shape == (2, 3) and str(theirs.dtype) == f"torch.{dtype}"
    np.testing.assert_array_equal(theirs.numpy(), src.numpy())
    if dtype != "bool":
        theirs[0, 0] = 5
        assert src[0, 0].item() == 5  # the same memory, not a copy
    back = jitorch.from_dlpack(torch.arange(4, dtype=torch.float32) * 2)
    assert back.dtype is jitorch.float32 and back.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_dlpack_with_numpy_and_non_contiguous_views():
    base = jitorch.arange(12.0).reshape(3, 4)
    view = base.t()[1:]  # non-contiguous, with an offset
    arr = np.from_dlpack(view)
    np.testing.assert_array_equal(arr, base.numpy().T[1:])
    arr_src = np.arange(5.0)[::2]
    t = jitorch.from_dlpack(arr_src)
    assert t.tolist() == [0.0, 2.0, 4.0] and t.stride() == (2,)


def test_dlpack_refuses_tensors_that_require_grad():
    with pytest.raises(RuntimeError, match="require"):
        jitorch.ones(2, requires_grad=True).__dlpack__()


def test_numpy_and_from_numpy_are_zero_copy():
    arr = np.zeros(3, dtype=np.float32)
    t = jitorch.from_numpy(arr)
    t.add_(1)
    assert arr.tolist() == [1.0, 1.0, 1.0]
    t.numpy()[0] = 7
    assert t[0].item() == 7 and np.shares_memory(t.numpy(), arr)
    with pytest.raises(RuntimeError, match="requires grad"):
        jitorch.ones(2, requires_grad=True).numpy()
    memmap_like = np.arange(10, dtype=np.int64)[2:8]
    assert jitorch.from_numpy(memmap_like).tolist() == list(range(2, 8))


def test_array_protocol_and_numpy_on_the_left():
    t = jitorch.tensor([1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(t), [1.0, 2.0])
    out = np.array([1.0, 1.0]) + t  # NumPy defers to Tensor.__radd__
    assert isinstance(out, jitorch.Tensor) and out.tolist() == [2.0, 3.0]
    assert isinstance(np.float64(2.0) * t, jitorch.Tensor)


@pytest.mark.parametrize("spec,value", [(".4f", 3.14159), ("+.2f", 2.5), ("", 7.0), ("e", 1234.5)])
def test_format_of_zero_dim_tensors_matches_torch(spec, value):
    assert format(jitorch.tensor(value), spec) == format(torch.tensor(value), spec)
    assert "%d" % jitorch.tensor(3) == "%d" % torch.tensor(3)
    assert "%.3f" % jitorch.tensor(1.0) == "%.3f" % torch.tensor(1.0)


def test_python_conversions_and_index():
    assert int(jitorch.tensor(3.7)) == 3 and float(jitorch.tensor(2)) == 2.0 and bool(jitorch.tensor([1]))
    data = list(range(10))
    i = jitorch.tensor(2)
    assert data[i:i + 3] == [2, 3, 4] and np.arange(10)[i] == 2
    with pytest.raises(TypeError):
        data[jitorch.tensor(1.5)]
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(jitorch.ones(2))
    assert len(jitorch.zeros(4, 2)) == 4 and [r.shape for r in jitorch.zeros(2, 3)] == [(3,), (3,)]
    with pytest.raises(TypeError):
        len(jitorch.tensor(1.0))


def test_tolist_item_and_repr_match_torch():
    values = [[1.5, -2.0], [0.0, 3.25]]
    j, t = jitorch.tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)
    assert j.tolist() == t.tolist() and j[1, 1].item() == t[1, 1].item()
    assert repr(j * 2).replace("jitorch", "torch") == repr(t * 2)
    assert repr(jitorch.tensor([1, 2], dtype=jitorch.int32)).replace("jitorch", "torch") == \
        repr(torch.tensor([1, 2], dtype=torch.int32))
