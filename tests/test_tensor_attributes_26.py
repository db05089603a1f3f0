"""Tensor attributes read in every forward (``x.device``, ``x.stride()``, ``x.size(d)``) agree with torch's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


def _pair(shape, make=lambda t: t):
    data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    return make(jitorch.tensor(data)), make(torch.tensor(data))


@pytest.mark.parametrize("shape, make", [
    ((3, 4), lambda t: t),
    ((3, 4), lambda t: t.t()),
    ((4, 6), lambda t: t[:, ::2]),
    ((0, 3), lambda t: t),
    ((2, 0, 3), lambda t: t),
    ((5,), lambda t: t.expand(2, 5)),
    ((), lambda t: t),
])
def test_stride_and_size_match_torch(shape, make):
    j, t = _pair(shape, make)
    assert j.stride() == t.stride()
    assert tuple(j.shape) == tuple(t.shape)
    for d in range(-j.dim(), j.dim()):
        assert j.stride(d) == t.stride(d) and j.size(d) == t.size(d)


@pytest.mark.parametrize("dim", [0, -1, 1])
@pytest.mark.parametrize("method", ["size", "stride"])
def test_zero_dim_size_and_stride_errors_match_torch(method, dim):
    with pytest.raises(IndexError) as expected:
        getattr(torch.tensor(1.0), method)(dim)
    with pytest.raises(IndexError) as got:
        getattr(jitorch.tensor(1.0), method)(dim)
    assert str(got.value) == str(expected.value)


def test_out_of_range_dim_names_the_method():
    expected = r"stride: Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"
    with pytest.raises(IndexError, match=expected):
        jitorch.zeros(2, 3).stride(2)


def test_strides_follow_the_itemsize_of_each_dtype():
    # The element-stride cache is keyed by itemsize too: the same byte strides mean different element strides.
    wide = jitorch.zeros(4, 4, dtype=jitorch.float64)
    narrow = jitorch.zeros(4, 8, dtype=jitorch.float32)[:, ::2]
    assert wide._data.strides == narrow._data.strides
    assert wide.stride() == (4, 1) and narrow.stride() == (8, 2)


def test_cpu_device_is_torchs_cpu_device():
    x = jitorch.zeros(2)
    assert x.device == jitorch.device("cpu") and x.device.type == "cpu" and x.device.index is None
    assert str(x.device) == "cpu" and x.device is jitorch.device("cpu")
    assert jitorch.zeros(2, device=x.device).device == x.device


def test_legacy_constructor_of_a_subclass_makes_the_subclass():
    results = {}
    for lib in (jitorch, torch):
        class Tagged(lib.Tensor):
            def __init__(self, *args, **kwargs):
                self.tag = "made"

        made = (Tagged([1.0, 2.0]), Tagged(3), Tagged(), Tagged(lib.ones(2, dtype=lib.float64)))
        results[lib] = [(type(t) is Tagged, t.tag, tuple(t.shape), str(t.dtype).split(".")[-1]) for t in made]
        assert type(lib.Tensor([1.0])) is lib.Tensor
    assert results[jitorch] == results[torch]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_full_of_negative_zero_keeps_the_sign(dtype):
    got = jitorch.full((3,), -0.0, dtype=getattr(jitorch, dtype)).float().numpy()
    expected = torch.full((3,), -0.0, dtype=getattr(torch, dtype)).float().numpy()
    np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))
    assert np.signbit(expected).all()
