"""Strides compared with torch:

- ``*_like(x, memory_format=torch.preserve_format)`` of a dense tensor keeps ``x``'s strides exactly, those of its
  size-1 dims included: a channels-last ``(N, 1, H, W)`` tensor's ``(H*W, 1, W, 1)`` (NumPy's C-contiguous flag
  ignores size-1 dims, so such a tensor looked row-major);
- strides of empty tensors: torch keeps the strides a tensor of that shape would have had and views change them as
  for any tensor, where NumPy zeroes every stride of a new empty array (``stride()`` then answers the contiguous
  ones). Views and results of empty tensors that torch gives other strides are pinned below with strict xfails.

Not matched: ``zeros_like``/``ones_like``/``empty_like`` without ``memory_format`` (their quick path in
``_creation_filled._host_like``, another owner's file, tests NumPy's flag: it should ask
``_memory_format.exactly_row_major``), and empty tensors' strides beyond the contiguous ones (which would need new
empty arrays made with torch's strides and each view computing torch's).
"""
from __future__ import annotations

import itertools

import pytest
import torch

import jitorch

LIKE = {
    "zeros_like": lambda L, x, kw: L.zeros_like(x, **kw),
    "ones_like": lambda L, x, kw: L.ones_like(x, **kw),
    "empty_like": lambda L, x, kw: L.empty_like(x, **kw),
    "full_like": lambda L, x, kw: L.full_like(x, 2.0, **kw),
    "rand_like": lambda L, x, kw: L.rand_like(x, **kw),
    "randn_like": lambda L, x, kw: L.randn_like(x, **kw),
    "randint_like": lambda L, x, kw: L.randint_like(x, 5, **kw),
}
SHAPES_4D = list(itertools.product([1, 2], [1, 3], [1, 2], [1, 3]))
SHAPES_5D = list(itertools.product([1, 2], [1, 3], [1, 2], [1, 2], [1, 3]))


def _source(lib, shape, layout):
    x = lib.zeros(*shape)
    if layout == "channels_last":
        return x.to(memory_format=lib.channels_last)
    if layout == "channels_last_3d":
        return x.to(memory_format=lib.channels_last_3d)
    if layout == "permuted":
        return lib.zeros(*reversed(shape)).permute(*reversed(range(len(shape))))
    return lib.zeros(shape[0], 2 * shape[1], *shape[2:])[:, ::2]  # (not dense: dims in the same stride order)


def _strides(lib, fn, shape, layout, kw):
    x = _source(lib, shape, layout)
    y = LIKE[fn](lib, x, {k: getattr(lib, v) for k, v in kw.items()})
    return tuple(y.shape), y.stride(), y.is_contiguous(), y.is_contiguous(memory_format=lib.channels_last) \
        if y.dim() == 4 else None


@pytest.mark.parametrize("fn", sorted(LIKE))
@pytest.mark.parametrize("layout", ["channels_last", "channels_last_3d", "permuted", "strided"])
def test_like_preserve_format_keeps_strides(fn, layout):
    shapes = SHAPES_5D if layout in ("channels_last_3d", "permuted") else SHAPES_4D
    for shape in shapes:
        kw = {"memory_format": "preserve_format"}
        assert _strides(jitorch, fn, shape, layout, kw) == _strides(torch, fn, shape, layout, kw), shape


@pytest.mark.parametrize("fn", ["full_like", "rand_like", "randn_like", "randint_like"])
def test_like_default_format_keeps_strides(fn):
    for shape in SHAPES_4D:
        assert _strides(jitorch, fn, shape, "channels_last", {}) == _strides(torch, fn, shape, "channels_last", {})


@pytest.mark.parametrize("fn", ["zeros_like", "ones_like", "empty_like"])
def test_like_default_format_quick_path(fn):
    shape = (2, 1, 2, 3)
    assert _strides(jitorch, fn, shape, "channels_last", {}) == _strides(torch, fn, shape, "channels_last", {})


def test_like_explicit_formats_unchanged():
    for shape, fmt in itertools.product(SHAPES_4D, ["contiguous_format", "channels_last"]):
        for fn in LIKE:
            kw = {"memory_format": fmt}
            assert _strides(jitorch, fn, shape, "channels_last", kw) == \
                _strides(torch, fn, shape, "channels_last", kw), (fn, shape, fmt)


EMPTY_SHAPES = [(0,), (0, 3), (3, 0), (2, 0, 3), (0, 2, 3), (2, 3, 0), (0, 0), (1, 0), (0, 1, 3)]
# Views and results of empty tensors whose strides torch and jitorch agree on.
EMPTY_MATCHING = {
    "new": lambda x: x,
    "reshape": lambda x: x.reshape(x.shape),
    "flatten": lambda x: x.flatten(),
    "clone": lambda x: x.clone(),
    "contiguous": lambda x: x.contiguous(),
    "exp": lambda x: x.exp(),
    "cat": lambda x: torch_or_jitorch(x).cat([x, x]),
    "stack": lambda x: torch_or_jitorch(x).stack([x, x], 1),
    "sum0": lambda x: x.sum(0),
    "cumsum0": lambda x: x.cumsum(0),
    "sort": lambda x: x.sort(-1).values,
    "flip": lambda x: x.flip(0),
    "empty_like": lambda x: torch_or_jitorch(x).empty_like(x),
}


def torch_or_jitorch(x):
    return torch if isinstance(x, torch.Tensor) else jitorch


def _empty_layout(lib, shape, fn):
    y = fn(lib.zeros(*shape))
    return tuple(y.shape), y.stride(), y.is_contiguous()


@pytest.mark.parametrize("case", sorted(EMPTY_MATCHING))
def test_empty_tensor_strides(case):
    for shape in EMPTY_SHAPES:
        fn = EMPTY_MATCHING[case]
        assert _empty_layout(jitorch, shape, fn) == _empty_layout(torch, shape, fn), shape


# One failing shape each: NumPy zeroes the strides of new empty arrays and keeps (or zeroes) them through views,
# so jitorch answers the contiguous strides where torch's follow the view.
EMPTY_DIVERGING = {
    "permute": ((0, 2, 3), lambda x: x.permute(2, 1, 0)),
    "transpose": ((2, 3, 0), lambda x: x.transpose(0, -1)),
    "slice_last": ((0, 2, 3), lambda x: x[..., 1:]),
    "step": ((0, 2, 3), lambda x: x[::2]),
    "expand": ((1, 0), lambda x: x.unsqueeze(0).expand(2, 1, 0)),
    "unsqueeze": ((0, 0), lambda x: x.unsqueeze(1)),
    "narrow": ((2, 0, 3), lambda x: x.narrow(-1, 0, 0)),
    "select": ((2, 0, 3), lambda x: x.select(-1, 0)),
    "diagonal": ((0, 2, 3), lambda x: x.diagonal()),
    "transposed_contiguous": ((0, 2, 3), lambda x: x.transpose(0, -1).contiguous()),
    "transposed_plus_one": ((0, 2, 3), lambda x: x.transpose(0, -1) + 1),
    "plus_one_size_one_dim": ((0, 1, 3), lambda x: x + 1),
    "zeros_like_transposed": ((0, 2, 3), lambda x: torch_or_jitorch(x).zeros_like(x.transpose(0, -1))),
}


@pytest.mark.xfail(strict=True, reason="empty NumPy arrays lose their strides (see the module docstring)")
@pytest.mark.parametrize("case", sorted(EMPTY_DIVERGING))
def test_empty_tensor_strides_not_matched(case):
    shape, fn = EMPTY_DIVERGING[case]
    assert _empty_layout(jitorch, shape, fn) == _empty_layout(torch, shape, fn)
