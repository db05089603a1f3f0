"""PyTorch's keyword names for size, shape and dim arguments, compared call by call with torch 2.13.

Each case is one call written for a library ``m`` (``torch`` or ``jitorch``) on the same input; results are compared by
shape, dtype and values (random draws: by shape and dtype). Keywords torch refuses must fail in jitorch too, with the
same exception type, so scripts that probe them behave alike.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


def _run(m, call):
    x = m.tensor(np.arange(12.0, dtype=np.float32).reshape(3, 4))
    return call(m, x)


def _flat(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


def _same(call, values=True):
    mine, theirs = _flat(_run(jitorch, call)), _flat(_run(torch, call))
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs):
        assert tuple(a.shape) == tuple(b.shape)
        assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1]
        if values:
            np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


SIZED = {  # every one of these was a TypeError, or for new_* silently a 0-d tensor
    "zeros": lambda m, x: m.zeros(size=(2, 3)),
    "ones": lambda m, x: m.ones(size=[2, 3], dtype=m.int64),
    "new_zeros": lambda m, x: x.new_zeros(size=(2,)),
    "new_ones": lambda m, x: x.new_ones(size=(2, 1), dtype=m.float64),
    "new_full": lambda m, x: x.new_full(size=(2,), fill_value=3.0),
    "new_full_positional": lambda m, x: x.new_full((2,), 3.0),
    "new_tensor": lambda m, x: x.new_tensor(data=[1, 2]),
    "permute_fn": lambda m, x: m.permute(x, dims=(1, 0)),
    "permute": lambda m, x: x.permute(dims=(1, 0)),
    "expand": lambda m, x: x[:1].expand(size=(3, 4)),
    "flip_fn": lambda m, x: m.flip(x, dims=[0]),
    "flip_input": lambda m, x: m.flip(input=x, dims=[0, 1]),
    "flip": lambda m, x: x.flip(dims=(0,)),
    "view": lambda m, x: x.view(size=(12,)),
    "view_dtype": lambda m, x: x.view(dtype=m.int32),
    "reshape": lambda m, x: x.reshape(shape=(6, -1)),
    "reshape_fn": lambda m, x: m.reshape(x, shape=(12,)),
    "repeat": lambda m, x: x.repeat(repeats=(1, 2)),
    "tile": lambda m, x: x.tile(dims=(2,)),
    "tile_varargs": lambda m, x: x.tile(2, 1),
    "split": lambda m, x: x.split(split_size=3, dim=1),
    "split_fn": lambda m, x: m.split(x, split_size_or_sections=[1, 3], dim=1),
    "swapaxes_fn": lambda m, x: m.swapaxes(x, axis0=0, axis1=1),
    "swapaxes": lambda m, x: x.swapaxes(axis0=0, axis1=1),
    "swapdims": lambda m, x: m.swapdims(x, dim0=0, dim1=1),
    "transpose": lambda m, x: x.transpose(dim0=1, dim1=0),
    "transpose_": lambda m, x: x.clone().transpose_(dim0=1, dim1=0),
    "swapaxes_": lambda m, x: x.clone().swapaxes_(axis0=1, axis1=0),
    "unsqueeze": lambda m, x: x.unsqueeze(dim=1),
    "squeeze": lambda m, x: m.squeeze(input=x[None], dim=0),
    "narrow": lambda m, x: m.narrow(input=x, dim=1, start=1, length=2),
    "roll": lambda m, x: x.roll(shifts=1, dims=0),
    "movedim": lambda m, x: x.movedim(source=0, destination=1),
    "tensor_split_sections": lambda m, x: m.tensor_split(x, sections=2, dim=1),
    "tensor_split_indices": lambda m, x: m.tensor_split(x, indices=[1], dim=1),
    "tensor_split_tensor": lambda m, x: m.tensor_split(x, m.tensor([1, 3]), dim=1),
    "resize_": lambda m, x: x.clone().resize_(size=(12,)),
}


@pytest.mark.parametrize("name", sorted(SIZED))
def test_keyword_matches_torch(name):
    _same(SIZED[name])


@pytest.mark.parametrize("call", [lambda m, x: m.empty(size=(2, 3)), lambda m, x: x.new_empty(size=(2,)),
                                  lambda m, x: m.rand(size=(2, 3)), lambda m, x: m.randn(size=(2, 3), dtype=m.float64)])
def test_uninitialised_and_random_sizes_by_keyword(call):
    _same(call, values=False)


@pytest.mark.parametrize("call", [
    lambda m, x: m.zeros(2, size=(3,)),
    lambda m, x: x.new_zeros(2, size=(2,)),
    lambda m, x: x.reshape(12, shape=(12,)),
    lambda m, x: x.permute(1, 0, dims=(1, 0)),
    lambda m, x: x.split(split_size_or_sections=2),  # the method's name is split_size
])
def test_sizes_twice_or_misnamed_is_a_type_error(call):
    with pytest.raises(TypeError) as theirs:
        _run(torch, call)
    with pytest.raises(TypeError) as mine:
        _run(jitorch, call)
    if "multiple values" in str(theirs.value):
        assert str(mine.value) == str(theirs.value)
