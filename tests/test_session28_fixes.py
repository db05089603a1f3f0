"""Fixes found by this session's compile fuzzing, checked against torch: an in-place write into an empty expanded
tensor is allowed (nothing overlaps), and a skipped 1-D empty input of ``cat`` that requires grad still makes the
result require grad, with an empty gradient."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import assert_same

import jitorch


@pytest.mark.parametrize("op", ["add_", "mul_", "fill_", "zero_"])
def test_in_place_write_into_an_empty_expanded_tensor_as_torch(op):
    out = []
    for lib in (torch, jitorch):
        x = lib.zeros(0, 1, 1).expand(-1, 3, 3)
        getattr(x, op)(*(() if op == "zero_" else (2.0,)))
        out.append(x)
    assert tuple(out[1].shape) == tuple(out[0].shape) == (0, 3, 3)


def test_in_place_write_into_a_nonempty_expanded_tensor_still_refused():
    for lib in (torch, jitorch):
        with pytest.raises(RuntimeError, match="single memory location"):
            lib.zeros(1, 1).expand(3, 3).add_(lib.ones(3, 3))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_with_a_skipped_empty_that_requires_grad(dim):
    rng = np.random.default_rng(0)
    b = rng.standard_normal((2, 3)).astype(np.float32)
    up_shape = (2, 3)
    res = []
    for lib in (torch, jitorch):
        e = lib.zeros(0, requires_grad=True)
        bt = lib.tensor(b)
        r = lib.cat([e, bt, lib.zeros(0, dtype=lib.float64)], dim)
        up = lib.tensor(rng.standard_normal(up_shape) if lib is torch else res[0][2], dtype=lib.float64)
        g, = lib.autograd.grad(r, [e], up)
        res.append((r, g, up.numpy() if lib is torch else None))
    (tr, tg, _), (jr, jg, _) = res
    assert jr.requires_grad and tr.requires_grad
    assert_same(jr.detach(), tr.detach())
    assert_same(jg, tg)


@pytest.mark.parametrize("src", ["float32", "float64"])
@pytest.mark.parametrize("dst", ["long", "int"])
def test_compiled_float_to_int_of_nan_and_out_of_range_as_torch(src, dst):
    # LLVM's fptosi is poison there: a later int -> float folded into a trunc and gave NaN (fuzz seed 8005); x86
    # (NumPy, torch) gives the type's minimum.
    values = [float("nan"), 1.5, float("inf"), -float("inf"), 3e30, -2.0 ** 63, 2.0 ** 31, -2.0 ** 31, -7.9]

    def fn(x):
        return (getattr(x, dst)() + 1).to(x.dtype) * 0.5 + x.abs().clamp(max=1.0)

    want = fn(torch.tensor(values, dtype=getattr(torch, src)))
    compiled = jitorch.compile(fn)
    for _ in range(2):
        assert_same(compiled(jitorch.tensor(values, dtype=getattr(jitorch, src))), want)
    ints = jitorch.compile(lambda x: getattr(x, dst)() * 1)(jitorch.tensor(values, dtype=getattr(jitorch, src)))
    assert_same(ints, getattr(torch.tensor(values, dtype=getattr(torch, src)), dst)() * 1)
