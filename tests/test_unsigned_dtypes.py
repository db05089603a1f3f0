"""torch's limited unsigned dtypes (uint16, uint32, uint64): NumPy arrays of them convert (16-bit images, uint16 token
files), creation, conversion, indexing, ``cat`` and reductions' dtypes match torch, and promotion with any other
dtype but a floating one is refused with torch's error."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch

NAMES = ["uint16", "uint32", "uint64"]


def _values(name):
    return np.array([0, 7, 300, np.iinfo(name).max], dtype=name)


@pytest.mark.parametrize("name", NAMES)
def test_numpy_conversion_and_creation_match_torch(name):
    a = _values(name)
    for lib in (jitorch, torch):
        dt = getattr(lib, name)
        t = lib.from_numpy(a)
        assert t.dtype == dt and t.tolist() == a.tolist() and t.numpy().dtype == a.dtype
        assert lib.tensor([1, 2], dtype=dt).dtype == dt and lib.zeros(3, dtype=dt).tolist() == [0, 0, 0]
        assert lib.as_tensor(a).dtype == dt
    assert not jitorch.uint16.is_signed and jitorch.iinfo(jitorch.uint32).max == torch.iinfo(torch.uint32).max
    assert jitorch.from_numpy(a).data_ptr() == a.ctypes.data  # shares memory, as torch's from_numpy


@pytest.mark.parametrize("name", NAMES)
def test_conversions_indexing_cat_and_sums(name):
    a = _values(name)
    results = []
    for lib in (jitorch, torch):
        t = lib.from_numpy(a)
        results.append([
            t.long().tolist(), t.double().tolist(), str(t.to(lib.float32).dtype).split(".")[1],
            t[1:3].tolist(), t[lib.tensor([3, 0])].tolist(), lib.cat([t, t[:1]]).tolist(),
            str(t.sum().dtype).split(".")[1], (t == 7).tolist(), lib.arange(3).to(getattr(lib, name)).tolist(),
            str((t[:3] * 0.5).dtype).split(".")[1], (t[:3] * 0.5).tolist(), t.clone().tolist(),
        ])
    assert results[0] == results[1]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("other", ["bool", "uint8", "int8", "int32", "int64", "complex64"])
def test_promotion_with_other_integers_is_refused_as_in_torch(name, other):
    messages = []
    for lib in (jitorch, torch):
        with pytest.raises(RuntimeError, match="Promotion for uint16, uint32, uint64 types is not supported") as err:
            lib.promote_types(getattr(lib, name), getattr(lib, other))
        messages.append(str(err.value))
        with pytest.raises(RuntimeError, match="not supported"):
            lib.ones(2, dtype=getattr(lib, name)) + lib.ones(2, dtype=getattr(lib, other))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("other", ["float16", "bfloat16", "float32", "float64"])
def test_floats_win_over_unsigned(name, other):
    for lib in (jitorch, torch):
        assert lib.promote_types(getattr(lib, name), getattr(lib, other)) == getattr(lib, other)


def test_unsigned_from_a_memmap_slice(tmp_path):
    path = tmp_path / "tokens.bin"
    np.arange(1000, dtype=np.uint16).tofile(path)
    data = np.memmap(path, dtype=np.uint16, mode="r")
    x = jitorch.from_numpy(data[10:14].astype(np.uint16))
    assert x.dtype is jitorch.uint16 and x.long().tolist() == [10, 11, 12, 13]
