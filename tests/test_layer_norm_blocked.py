"""Layer norm's backward over blocks of rows (`native_rows._backward_blocked`: the parameter gradients summed a block at
a time while the block's ``g * xhat`` is in cache) against PyTorch: a last block shorter than the others, float32 and
float64, with and without the affine parameters, a lone weight, normalized shapes of two dims, a non-contiguous
upstream gradient, and blocks split over two threads."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import check_op, make_array
from jitorch.ops import native_rows

JF, TF = jitorch.nn.functional, torch.nn.functional


def _blocked_calls(monkeypatch):
    calls = []
    run = native_rows._backward_blocked
    monkeypatch.setattr(native_rows, "_backward_blocked", lambda *a: calls.append(a[6]) or run(*a))
    return calls


@pytest.mark.parametrize("shape,k,dtype", [((1030, 300), 1, "float32"), ((700, 12, 25), 2, "float64")], ids=str)
@pytest.mark.parametrize("params", ["affine", "none", "weight"])
@pytest.mark.parametrize("threads", [1, 2])
def test_blocked_layer_norm_backward_matches_torch(monkeypatch, shape, k, dtype, params, threads):
    calls = _blocked_calls(monkeypatch)
    rng = np.random.default_rng(3)
    x = make_array(shape, dtype, rng, -4.0, 4.0) + 2.0
    w = make_array(shape[-k:], dtype, rng) if params != "none" else None
    b = make_array(shape[-k:], dtype, rng) if params == "affine" else None
    tol = 1e-5 if dtype == "float32" else 1e-11
    before = jitorch.get_num_threads()
    jitorch.set_num_threads(threads)
    try:
        check_op(lambda a, w, b: JF.layer_norm(a, shape[-k:], w, b, eps=1e-5),
                 lambda a, w, b: TF.layer_norm(a, shape[-k:], w, b, eps=1e-5), [x, w, b], atol=tol, rtol=tol,
                 grad_atol=20 * tol, grad_rtol=20 * tol)  # column sums of 1000 rows in another order than ATen's
    finally:
        jitorch.set_num_threads(before)
    assert calls == [int(np.prod(shape[:-k]))]  # the rows


def test_blocked_backward_of_a_transposed_upstream_gradient(monkeypatch):
    calls = _blocked_calls(monkeypatch)
    rng = np.random.default_rng(4)
    x, w, b = (make_array(shape, "float32", rng) for shape in ((600, 512), (512,), (512,)))
    g = make_array((512, 600), "float32", rng)
    outs = []
    for lib in (jitorch, torch):
        leaves = [lib.tensor(a, requires_grad=True) for a in (x, w, b)]
        lib.nn.functional.layer_norm(leaves[0], (512,), leaves[1], leaves[2]).backward(lib.tensor(g).t())
        outs.append([t.grad.numpy() for t in leaves])
    for mine, theirs in zip(*outs):
        np.testing.assert_allclose(mine, theirs, atol=5e-5, rtol=1e-5)
    assert calls == [600]
