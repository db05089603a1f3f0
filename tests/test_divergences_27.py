"""Small divergences from torch, each compared with torch bit for bit:

- elu / selu / celu / hardswish gradients at NaN (and inf, -inf, 0, -3, 3): ATen's backward kernels test the other
  way round in their vector loop (two 64-byte vectors a block) and their scalar tail (the block's remainder and
  strided operands), so NaN's gradient depends on its position;
- searchsorted / bucketize of mixed dtypes (bool values, int boundaries, bfloat16 with others, Python numbers):
  both operands go to their result type, as ATen's searchsorted_maybe_trim_input_tensors.

- which zero ``torch.unique`` (dim=None) keeps where the input holds both -0.0 and 0.0: ATen sorts with ``std::sort``
  (not stable beyond 16 elements) and keeps the first of each run of equal values (`ops/sorting_first_tie.py`).

Not matched (documented here): the inverse indices of NaNs (each its own value, numbered in that unstable order),
and NaN gradients of tensors large enough for ATen to split the loop over threads (its chunks then end in scalar
tails that depend on the thread count). The same choice for ``unique(dim=d)`` is matched now
(test_divergences_27_values.py).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as JF
from helpers import assert_same, np_dtype, tol_for

SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, -3.0, 3.0, 1.0, -1.0, -0.5, 2.5, -7.0]
# sizes below, at and beyond one block (2 vectors of 64 bytes: 32 float32, 16 float64, 64 half) and its remainders
SIZES = (1, 5, 8, 16, 17, 32, 33, 64, 72, 100, 131)

_GRAD_RTOL = {"float32": 1e-6, "float64": 1e-14}
ACTIVATIONS = {
    "elu": (lambda m: m.nn.functional.elu, ()),
    "elu_alpha": (lambda m: m.nn.functional.elu, (0.3,)),
    "selu": (lambda m: m.nn.functional.selu, ()),
    "celu": (lambda m: m.nn.functional.celu, (2.0,)),
    "hardswish": (lambda m: m.nn.functional.hardswish, ()),
}


def _special_array(n, dtype, seed):
    rng = np.random.default_rng(seed)
    values = np.array(SPECIAL * (n // len(SPECIAL) + 1), np.float32)[:n]
    rng.shuffle(values)
    return values.astype(np_dtype(dtype))


def _grads(name, array, layout, upstream):
    fn, args = ACTIVATIONS[name]
    out = []
    for mod in (torch, jitorch):
        base = (torch.from_numpy(array.astype(np.float32)).to(getattr(torch, str(array.dtype)))
                if mod is torch else jitorch.tensor(array))
        x = base.requires_grad_()
        view = x[::2] if layout == "strided" else x
        y = fn(mod)(view, *args)
        g = mod.tensor(upstream[: y.numel()]).to(y.dtype)
        out.append((y, mod.autograd.grad(y, x, g)[0]))
    return out


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_gradient_at_special_values(name, dtype, layout):
    for n in SIZES:
        array = _special_array(n * (2 if layout == "strided" else 1), dtype, n)
        upstream = np.random.default_rng(n).uniform(0.5, 2.0, array.size).astype(np.float32)
        (ty, tg), (jy, jg) = _grads(name, array, layout, upstream)
        # (the forward's values are not this test's: ATen's scalar tail computes exp(x) - 1, 1 ulp off)
        assert_same(jy, ty.detach(), atol=0, rtol=tol_for(dtype)[1], what=f"{name} {dtype} n={n} output")
        # NaN where torch's is (assert_same's NaN check), the values to an ulp or so (exp: Sleef's, glibc's or NumPy's)
        assert_same(jg, tg, atol=0, rtol=_GRAD_RTOL.get(dtype, tol_for(dtype)[1]), what=f"{name} {dtype} n={n} grad")


_VIEWS = {  # views whose ATen iteration order is not the C order, or has several inner runs
    "transposed": ((40, 40), lambda v: v.t()),
    "row_sliced": ((40, 40), lambda v: v[:, :33]),
    "permuted": ((6, 40, 5), lambda v: v.permute(2, 0, 1)),
    "offset_rows": ((8, 70), lambda v: v[:, 3:]),
    "transposed_sliced": ((20, 20), lambda v: v.t()[:, :17]),
    "unit_dims": ((1, 40, 1), lambda v: v.transpose(0, 2)),
}


@pytest.mark.parametrize("view", list(_VIEWS))
@pytest.mark.parametrize("name", ["elu", "selu", "hardswish", "hardtanh", "hardshrink"])
def test_activation_nan_gradient_in_aten_iteration_order(name, view):
    shape, make = _VIEWS[view]
    for dtype in ("float32", "float64"):
        a = np.random.default_rng(len(view)).choice(np.array([np.nan, 1, -1, -3, 3, 0.5], np.float32), shape)
        grads = []
        for mod in (torch, jitorch):
            x = mod.tensor(a).to(getattr(mod, dtype)).requires_grad_()
            grads.append(mod.autograd.grad(getattr(mod.nn.functional, name)(make(x)).sum(), x)[0])
        assert_same(grads[1], grads[0], atol=0, rtol=_GRAD_RTOL[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_elu_gradient_formula_and_grad_fn(dtype):
    # The backward is ATen's formula, g * input_scale * alpha * scale * exp(input_scale * x) below 0: equal to torch's
    # but where exp's last bit differs (float32: a fifth of these inputs, against 37% through the old composite)
    x = np.random.default_rng(3).standard_normal(1000).astype(dtype) * 4
    for args in ((), (0.5,)):
        t = torch.tensor(x, requires_grad=True)
        j = jitorch.tensor(x, requires_grad=True)
        ty, jy = torch.nn.functional.elu(t, *args), JF.elu(j, *args)
        assert type(jy.grad_fn).__name__ == type(ty.grad_fn).__name__ == "EluBackward0"
        (tg,) = torch.autograd.grad(ty.sum(), t, create_graph=True)
        (jg,) = jitorch.autograd.grad(jy.sum(), j, create_graph=True)
        assert_same(jg.detach(), tg.detach(), atol=0, rtol=_GRAD_RTOL[dtype])
        (tgg,) = torch.autograd.grad(tg.sum(), t)
        (jgg,) = jitorch.autograd.grad(jg.sum(), j)
        assert_same(jgg, tgg, atol=1e-12, rtol=4 * _GRAD_RTOL[dtype])


def test_elu_inplace_keeps_gradient():
    x = np.array([-1.0, float("nan"), 2.0, -0.0], np.float32)
    grads = []
    for mod in (torch, jitorch):
        leaf = mod.tensor(x, requires_grad=True)
        y = leaf * 1
        mod.nn.functional.elu_(y)
        grads.append(mod.autograd.grad(y.sum(), leaf)[0])
    # (ATen's in-place backward reads the result, g * (y + alpha): an ulp from exp(x); NaN's is g * scale in both)
    assert_same(grads[1], grads[0], atol=0, rtol=1e-6)


_SORT_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
                "complex64")


def _outcome(fn):
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 - the error is compared
        return type(e).__name__, str(e)
    return str(r.dtype).split(".")[-1], r.tolist()


@pytest.mark.parametrize("op", ["searchsorted", "bucketize"])
def test_searchsorted_mixed_dtypes(op):
    boundaries, values = [0, 1, 2, 3], [0, 1, 1, 3, 2]
    for bd, vd in itertools.product(_SORT_DTYPES, _SORT_DTYPES):
        for right in (False, True):
            results = []
            for mod in (torch, jitorch):
                b = mod.tensor(boundaries).to(getattr(mod, bd))
                v = mod.tensor(values).to(getattr(mod, vd))
                results.append(_outcome(lambda: mod.searchsorted(b, v, right=right) if op == "searchsorted"
                                        else mod.bucketize(v, b, right=right)))
            assert results[1] == results[0], (bd, vd, right)


@pytest.mark.parametrize("case", [
    ("int64", 1.5), ("int64", True), ("float32", 1), ("uint8", -1), ("int8", 300), ("float16", 70000.0),
    ("bool", True), ("int64", 1j), ("float16", 0.1), ("bfloat16", 2.0000001),
])
def test_searchsorted_python_number_promotes_as_a_wrapped_scalar(case):
    dtype, value = case
    results = [_outcome(lambda: mod.searchsorted(mod.tensor([0, 1, 2]).to(getattr(mod, dtype)), value, right=True))
               for mod in (torch, jitorch)]
    assert results[1] == results[0]


def test_searchsorted_zero_dim_tensor_promotes_as_in_arithmetic():
    # a 0-d float tensor against int64 boundaries: float32 (not float64); 16777217 rounds to the value itself
    for mod_values in ((16777216.0,), (1.5,)):
        results = []
        for mod in (torch, jitorch):
            b = mod.tensor([0, 16777217])
            results.append(_outcome(lambda: mod.searchsorted(b, mod.tensor(mod_values[0]), right=True)))
        assert results[1] == results[0]


def _signbits(t):
    return np.signbit(t.float().numpy())


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_unique_keeps_the_zero_of_atens_unstable_sort(dtype):
    rng = np.random.default_rng(7)
    # (no NaN: each is a value of its own, and their inverse indices follow the same unstable order, not matched)
    pool = np.array([0.0, -0.0, 1.0, -1.0, 2.0, 0.0, -0.0, 3.0], np.float32)
    for n in (17, 33, 100, 1000, 4096):
        for trial in range(4):
            x = rng.choice(pool[: 5 + trial], n)
            for kw in ({}, {"sorted": False}, {"return_inverse": True, "return_counts": True}):
                t = torch.unique(torch.tensor(x).to(getattr(torch, dtype)), **kw)
                j = jitorch.unique(jitorch.tensor(x).to(getattr(jitorch, dtype)), **kw)
                t, j = (t, j) if isinstance(t, tuple) else ((t,), (j,))
                for a, b in zip(j, t):
                    assert_same(a, b)
                assert np.array_equal(_signbits(j[0]), _signbits(t[0])), (n, trial, kw)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_unique_signed_zeros_small_inputs(dtype):
    # Up to 16 elements ATen's sort is stable: the zero kept is the first in the input, as jitorch's (see above).
    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 9, 16):
        for _ in range(5):
            x = rng.choice(np.array([0.0, -0.0, 1.0, -1.0], np.float32), n)
            for kw in ({}, {"sorted": False}, {"return_inverse": True, "return_counts": True}):
                t = torch.unique(torch.tensor(x).to(getattr(torch, dtype)), **kw)
                j = jitorch.unique(jitorch.tensor(x).to(getattr(jitorch, dtype)), **kw)
                for a, b in zip(j if isinstance(j, tuple) else (j,), t if isinstance(t, tuple) else (t,)):
                    assert_same(a, b)
                    if b.is_floating_point():
                        assert np.array_equal(np.signbit(a.float().numpy()), np.signbit(b.float().numpy()))
            tc = torch.unique_consecutive(torch.tensor(x).to(getattr(torch, dtype)))
            jc = jitorch.unique_consecutive(jitorch.tensor(x).to(getattr(jitorch, dtype)))
            assert np.array_equal(np.signbit(jc.float().numpy()), np.signbit(tc.float().numpy()))


def test_first_in_std_sort_follows_the_full_replay():
    from jitorch.ops.sorting_first_tie import first_in_std_sort
    from jitorch.ops.sorting_ties import _Std

    rng = np.random.default_rng(11)
    arrays = [rng.integers(0, rng.integers(1, 6), n) for n in list(range(1, 60, 3)) + [100, 257, 1000]]
    arrays += [np.arange(600) % 7, np.r_[np.arange(300), np.arange(300)[::-1]] % 9]  # organ pipes and saw teeth
    for keys in arrays:
        std = _Std([(int(v), i) for i, v in enumerate(keys)], lambda x, y: x < y)
        std.sort(0, keys.size)
        for key in np.unique(keys):
            assert first_in_std_sort(keys, key) == next(i for v, i in std.a if v == key)
