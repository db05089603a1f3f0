"""Elementwise ops of two operands of one shape and two memory layouts give the first operand's layout, as torch's
TensorIterator does (NumPy alone gives row-major): values, strides and gradients against torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch


def _make(lib, kind):
    if kind == "t":
        return lib.arange(12.0).reshape(4, 3).t()
    if kind == "c":
        return lib.arange(12.0).reshape(3, 4) - 5
    if kind == "slice":
        return lib.arange(24.0).reshape(3, 8)[:, ::2]
    if kind == "tslice":
        return lib.arange(24.0).reshape(8, 3)[::2].t()
    x = lib.arange(2 * 3 * 4 * 5.0).reshape(2, 3, 4, 5) - 50
    return x.contiguous(memory_format=lib.channels_last) if kind == "channels_last" else x


PAIRS = [("t", "c"), ("c", "t"), ("t", "t"), ("slice", "t"), ("tslice", "c"), ("t", "slice"),
         ("channels_last", "nchw"), ("nchw", "channels_last")]
OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
       "div": lambda a, b: a / (b.abs() + 1), "gt": lambda a, b: a > b, "eq": lambda a, b: a == b,
       "torch.add alpha": lambda a, b: (a.__class__ is torch.Tensor and torch or jitorch).add(a, b, alpha=2)}


@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(p) for p in PAIRS])
@pytest.mark.parametrize("op", sorted(OPS))
def test_the_result_takes_the_first_operands_layout(pair, op):
    fn = OPS[op]
    want = fn(_make(torch, pair[0]), _make(torch, pair[1]))
    got = fn(_make(jitorch, pair[0]), _make(jitorch, pair[1]))
    assert got.stride() == want.stride() and got.is_contiguous() == want.is_contiguous()
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_gradients_are_unchanged_by_the_layout():
    rng = np.random.default_rng(0)
    a, b, g = (rng.standard_normal((2, 3, 4, 5)).astype(np.float32) for _ in range(3))
    grads = []
    for lib in (torch, jitorch):
        x = lib.tensor(a).contiguous(memory_format=lib.channels_last).requires_grad_()
        y = lib.tensor(b).requires_grad_()
        (x * y + x).backward(lib.tensor(g))
        grads.append((x.grad.numpy(), y.grad.numpy()))
    for w, h in zip(*grads):
        np.testing.assert_allclose(h, w, rtol=1e-6)
