"""Layer norm and group norm on constant rows (padding, masked positions, expanded inputs) and on rows far from 0.

torch's Welford statistics give a constant row ``mean == x`` exactly, so its output is exactly the bias (0 without
one); ``sum(x) / n`` misses the constant by a rounding that ``rstd = 1 / sqrt(eps)`` amplified 316 times. The row
kernels sum the row shifted by its first element (jitorch/_compile/lower_rows.py, jitorch/ops/norm_moments.py), in
every path: eager row kernels, the array fallback, compiled groups, CPU graph replay (reduce-overhead).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as JF
import torch.nn.functional as TF

from helpers import assert_same, check_op, np_dtype

# Gradients use the first three: torch's weight gradient of a constant row is not its exact 0 but a rounding of
# ``x * rstd`` (0.7 at 1e4 in float32), where jitorch's is 0.
VALUES = (0.3, -2.7, 0.1, 1e4)
LENGTHS = (1, 7, 64, 1000, 4096)


def _rows_of_values(shape, dtype, values=VALUES[:3]):
    """An array whose rows along the last dim are constants (``values`` in turn)."""
    rows = int(np.prod(shape[:-1]))
    values = np.resize(np.array(values), rows).reshape(shape[:-1] + (1,))
    return np.broadcast_to(values, shape).astype(np_dtype(dtype))


def _both(fn, arrays, dtype, seed=0):
    """[(jitorch, torch) output, then each gradient] of ``fn(lib, *tensors)`` with one random upstream gradient."""
    pairs = []
    for lib in (jitorch, torch):
        leaves = [lib.tensor(a, requires_grad=True) for a in arrays]
        out = fn(lib, *leaves)
        up = np.random.default_rng(seed).standard_normal(tuple(out.shape)).astype(np_dtype(dtype))
        out.backward(lib.tensor(up))
        pairs.append([out] + [t.grad for t in leaves])
    return list(zip(*pairs))


def _params(n, dtype, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n).astype(np_dtype(dtype)) for _ in range(2)]


def _grad_tol(dtype):  # gradients of a constant row are ``rstd = 316`` times the upstream's spread
    return dict(atol=1e-3, rtol=1e-5) if dtype == "float32" else dict(atol=1e-10, rtol=1e-12)


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", LENGTHS)
def test_layer_norm_of_constant_rows_is_exactly_the_bias_with_torchs_gradients(n, dtype, affine):
    x = _rows_of_values((2, 4, n), dtype)
    arrays = [x] + (_params(n, dtype) if affine else [])
    results = _both(lambda lib, a, *p: lib.nn.functional.layer_norm(a, (n,), *p), arrays, dtype)
    assert_same(*results[0], atol=0, rtol=0)
    for i, what in enumerate(("x", "weight", "bias")[:len(arrays)]):
        assert_same(*results[1 + i], **_grad_tol(dtype), what=f"grad of {what}")
    if affine:  # g * xhat summed: xhat is exactly 0
        assert not results[2][0].numpy().any()
    x = _rows_of_values((2, 4, n), dtype, VALUES)  # far from 0 too: the statistics and output stay exact
    mean, rstd = jitorch.native_layer_norm(jitorch.tensor(x), (n,), None, None, 1e-5)[1:]
    want_mean, want_rstd = torch.native_layer_norm(torch.tensor(x), (n,), None, None, 1e-5)[1:]
    assert_same(JF.layer_norm(jitorch.tensor(x), (n,)), TF.layer_norm(torch.tensor(x), (n,)), atol=0, rtol=0)
    assert_same(mean, want_mean, atol=0, rtol=0, what="mean")
    assert_same(rstd, want_rstd, atol=0, rtol=1e-6, what="rstd")


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, groups", [((2, 4, 1), 2), ((2, 4, 7), 2), ((2, 4, 64), 2), ((2, 4, 1000), 2),
                                           ((2, 4, 4096), 2), ((3, 6, 3, 5), 3)])
def test_group_norm_of_constant_groups_is_exactly_the_bias_with_torchs_gradients(shape, groups, dtype, affine):
    n, c = shape[:2]
    x = _rows_of_values((n, groups, int(np.prod(shape[1:])) // groups), dtype).reshape(shape)
    arrays = [x] + (_params(c, dtype) if affine else [])
    results = _both(lambda lib, a, *p: lib.nn.functional.group_norm(a, groups, *p), arrays, dtype)
    # torch's affine pass is ``x * (rstd * w) + (b - mean * rstd * w)``: a rounding of ``x * rstd`` off the exact b
    assert_same(*results[0], **(_grad_tol(dtype) if affine else dict(atol=0, rtol=0)))
    if affine:
        assert (results[0][0].detach().numpy() == arrays[2][None, :, None, None].reshape(1, c, *(
            1,) * (len(shape) - 2))).all()
    assert_same(*results[1], **_grad_tol(dtype), what="grad of x")
    if affine:
        # The weight gradient is ATen's ``sum(g * x) - mean * sum(g)`` times rstd in both: a rounding of the sums
        # (about 1e-2 in float32 at 8192 elements), 316 times.
        assert_same(*results[2], atol=5e-2 if dtype == "float32" else 1e-10, rtol=0, what="grad of weight")
        assert_same(*results[3], **_grad_tol(dtype), what="grad of bias")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mixed_constant_and_random_rows(dtype):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 1000)).astype(np_dtype(dtype))
    x[1], x[4] = -2.7, 0.1
    w, b = _params(1000, dtype)
    tol = 1e-5 if dtype == "float32" else 1e-12
    check_op(lambda a, p, q: JF.layer_norm(a, (1000,), p, q), lambda a, p, q: TF.layer_norm(a, (1000,), p, q),
             [x, w, b], atol=tol, rtol=tol, grad_atol=100 * tol)
    out = JF.layer_norm(jitorch.tensor(x), (1000,), jitorch.tensor(w), jitorch.tensor(b)).numpy()
    assert (out[[1, 4]] == b).all()
    xg = x.reshape(2, 6, 500)  # groups of two rows: (sample 0, group 1) is rows 2-3, keep one group constant
    xg[0, 2:4] = 0.3
    check_op(lambda a, p, q: JF.group_norm(a, 3, p, q), lambda a, p, q: TF.group_norm(a, 3, p, q),
             [xg, *_params(6, dtype)], atol=tol, rtol=tol, grad_atol=100 * tol)


@pytest.mark.parametrize("n", [7, 1000, 4096])
def test_expanded_constant_rows_take_the_array_path_exactly(n):
    # A stride-0 input is not contiguous: the array fallback (norm_moments), not the row kernel, computes it.
    values = np.array(VALUES, np.float32)[:, None]  # one row per value, 1e4 included
    w, b = _params(n, "float32")
    got = JF.layer_norm(jitorch.tensor(values).expand(4, n), (n,), jitorch.tensor(w), jitorch.tensor(b))
    want = TF.layer_norm(torch.tensor(values).expand(4, n), (n,), torch.tensor(w), torch.tensor(b))
    assert_same(got, want, atol=0, rtol=0)
    got = JF.group_norm(jitorch.tensor(values).reshape(1, 4, 1).expand(2, 4, n), 4)
    want = TF.group_norm(torch.tensor(values).reshape(1, 4, 1).expand(2, 4, n), 4)
    assert_same(got, want, atol=0, rtol=0)


def _normalized_f64(x, k):
    x = x.astype(np.float64)
    axes = tuple(range(x.ndim - k, x.ndim))
    centered = x - x.mean(axes, keepdims=True)
    return centered / np.sqrt((centered * centered).mean(axes, keepdims=True) + 1e-5)


@pytest.mark.parametrize("n", [7, 1000, 4096])
def test_rows_far_from_zero_keep_the_digits_of_their_noise(n):
    # 1e4 + 0.01 * noise in float32: ``x - mean`` with a rounded mean lost up to 0.14 of each normalized value
    # (torch's error is about as large); the shifted sums keep the output within float32 rounding.
    x = (1e4 + 0.01 * np.random.default_rng(3).standard_normal((64, n))).astype(np.float32)
    want = _normalized_f64(x, 1)
    torch_err = np.abs(TF.layer_norm(torch.tensor(x), (n,)).numpy() - want).max()
    ways = {"eager": lambda v: JF.layer_norm(v, (n,)),
            "array path": lambda v: JF.layer_norm(v.t().contiguous().t(), (n,)),
            "compiled": jitorch.compile(lambda v: JF.layer_norm(v + 0.0, (n,)))}
    for name, fn in ways.items():
        err = np.abs(fn(jitorch.tensor(x)).numpy() - want).max()
        assert err < 1e-4 and err <= torch_err, f"{name}: {err} (torch {torch_err})"
    xg = x.reshape(8, 8, n)
    err = np.abs(JF.group_norm(jitorch.tensor(xg), 2).numpy() - _normalized_f64(xg.reshape(8, 2, -1), 1).reshape(
        xg.shape)).max()
    assert err < 1e-4


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("n", [7, 64, 1000])
def test_compiled_layer_norm_and_group_norm_of_constant_rows_match_torch(mode, n):
    x = _rows_of_values((4, n), "float32")
    w, b = _params(n, "float32")
    xg = _rows_of_values((2, 2, 2 * n), "float32").reshape(2, 4, n)

    def fn(lib, v, p, q, vg):  # the prologue ``v * 2`` fuses into the row kernel
        return lib.nn.functional.layer_norm(v * 2, (n,), p, q), lib.nn.functional.group_norm(vg * 2, 2)

    compiled = jitorch.compile(lambda *a: fn(jitorch, *a), mode=mode)
    ups = [np.random.default_rng(4).standard_normal(s).astype(np.float32) for s in (x.shape, xg.shape)]
    for _ in range(2):  # reduce-overhead captures on a later call: compare every call
        got = [jitorch.tensor(a, requires_grad=True) for a in (x, w, b, xg)]
        want = [torch.tensor(a, requires_grad=True) for a in (x, w, b, xg)]
        outs, touts = compiled(*got), fn(torch, *want)
        for o, t in zip(outs, touts):
            assert_same(o, t, atol=0, rtol=0)
        jitorch.autograd.backward(list(outs), [jitorch.tensor(u) for u in ups])
        torch.autograd.backward(list(touts), [torch.tensor(u) for u in ups])
        for j, t, what in zip(got, want, ("x", "weight", "bias", "group norm's x")):
            assert_same(j.grad, t.grad, atol=1e-3, rtol=1e-5, what=f"grad of {what}")
        assert not got[1].grad.numpy().any(), "g * xhat of constant rows is exactly 0"
