"""The attention row of ``jitorch/ops/nn_attention.py`` (``scaled_dot_product_attention`` and its backward row): values
and gradients against torch and against the composite it replaces, dropout, output layouts, gradcheck and
gradgradcheck in float64, and the one node it records."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as F
from jitorch import fx
from jitorch._dispatch import apply
from jitorch.autograd import gradcheck, gradgradcheck
from jitorch.ops.nn_attention import SDPA, SDPA_BACKWARD, attention_weights

TOL = {np.float32: 2e-5, np.float64: 1e-11}


def _arrays(*shapes, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def _masks(kind, length=5, source=7):
    """(jitorch mask, torch mask) of one kind; row 2 of the float and bool masks may attend to nothing."""
    rng = np.random.default_rng(3)
    if kind == "bool":
        keep = rng.random((2, 1, length, source)) > 0.4
        keep[:, :, 2] = False
        return jitorch.tensor(keep), torch.tensor(keep)
    if kind == "float":
        add = rng.standard_normal((length, source))
        add[rng.random((length, source)) > 0.7] = -np.inf
        add[2] = -np.inf
        return add, None
    return None, None


def _run(lib, arrays, grad, mask=None, **kw):
    q, k, v = (lib.tensor(a.copy(), requires_grad=True) for a in arrays)
    out = lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
    out.backward(lib.tensor(grad))
    return out.detach().numpy(), [t.grad.numpy() for t in (q, k, v)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["none", "causal", "bool", "float"])
def test_row_matches_torch_values_and_gradients(kind, dtype):
    arrays = _arrays((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6), dtype=dtype)
    grad = _arrays((2, 3, 5, 6), seed=9, dtype=dtype)[0]
    jm, tm = _masks(kind)
    if kind == "float":
        jm, tm = jitorch.tensor(jm.astype(dtype)), torch.tensor(jm.astype(dtype))
    kw = {"is_causal": kind == "causal", "scale": 0.7 if kind == "bool" else None}
    got, got_grads = _run(jitorch, arrays, grad, jm, **kw)
    want, want_grads = _run(torch, arrays, grad, tm, **kw)
    tol = TOL[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    if kind in ("bool", "float"):
        np.testing.assert_array_equal(got[:, :, 2], 0.0)  # the query with nothing to attend to
    for g, w in zip(got_grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=tol * 10, atol=tol * 10)


def _composite(q, k, v, mask, scale, is_causal):
    return attention_weights(q, k, mask, scale, is_causal).matmul(v)


@pytest.mark.parametrize("kind", ["none", "causal", "bool", "float"])
def test_row_equals_the_composite_forward_and_backward(kind):
    arrays = _arrays((3, 6, 4), (3, 6, 4), (3, 6, 5), seed=1)
    grad = jitorch.tensor(_arrays((3, 6, 5), seed=2)[0])
    jm = _masks(kind, 6, 6)[0]
    if kind == "float":
        jm = jitorch.tensor(jm)
    elif kind == "bool":
        jm = jm[0]
    results = []
    for fused in (True, False):
        q, k, v = (jitorch.tensor(a, requires_grad=True) for a in arrays)
        if fused:
            out = apply(SDPA, q, k, v, jm, None, scale=0.5, is_causal=kind == "causal")[0]
        else:
            out = _composite(q, k, v, jm, 0.5, kind == "causal")
        out.backward(grad)
        results.append([out.detach().numpy()] + [t.grad.numpy() for t in (q, k, v)])
    for f, c in zip(*results):
        np.testing.assert_allclose(f, c, rtol=1e-12, atol=1e-12)


def test_dropout_draws_the_composite_mask_and_scales_like_it():
    arrays = _arrays((2, 2, 6, 4), (2, 2, 6, 4), (2, 2, 6, 4), seed=4)
    grad = jitorch.tensor(_arrays((2, 2, 6, 4), seed=5)[0])
    results = []
    for fused in (True, False):
        q, k, v = (jitorch.tensor(a, requires_grad=True) for a in arrays)
        jitorch.manual_seed(7)
        if fused:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=True)
        else:
            out = F.dropout(attention_weights(q, k, None, 0.5, True), 0.3).matmul(v)
        out.backward(grad)
        results.append([out.detach().numpy()] + [t.grad.numpy() for t in (q, k, v)])
    for f, c in zip(*results):
        np.testing.assert_allclose(f, c, rtol=1e-12, atol=1e-12)
    # p = 1 drops everything, as F.dropout does.
    q, k, v = (jitorch.tensor(a) for a in arrays)
    np.testing.assert_array_equal(F.scaled_dot_product_attention(q, k, v, dropout_p=1.0).numpy(), 0.0)


def test_out_perm_gives_the_asked_layout_and_the_same_values():
    q, k, v = (jitorch.tensor(a) for a in _arrays((2, 3, 5, 4), (2, 3, 5, 4), (2, 3, 5, 4), seed=6))
    plain = apply(SDPA, q, k, v, None, None, scale=0.5, is_causal=True)[0]
    assert plain.is_contiguous()
    for perm in ((0, 2, 1, 3), (2, 0, 1, 3)):
        out = apply(SDPA, q, k, v, None, None, scale=0.5, is_causal=True, out_perm=perm)[0]
        assert out.permute(*perm).is_contiguous() and not out.is_contiguous()
        np.testing.assert_array_equal(out.numpy(), plain.numpy())


def test_one_node_and_one_primitive():
    q, k, v = (jitorch.tensor(a, requires_grad=True) for a in _arrays((2, 4, 3), (2, 5, 3), (2, 5, 3)))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=False)
    assert type(out.grad_fn).__name__ == "ScaledDotProductFlashAttentionForCpuBackward0"
    assert [type(fn).__name__ for fn, _ in out.grad_fn.next_functions[:3]] == ["AccumulateGrad"] * 3
    with jitorch.no_grad():
        gm = fx.make_fx(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True))(q, k, v)
    calls = [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"]
    assert calls.count("scaled_dot_product_attention") == 1 and "softmax" not in calls


def test_layouts_and_dtypes_the_row_does_not_take_use_the_composite():
    # Broadcast batch dims and a mask that needs a gradient: the composite, still equal to torch.
    (qa, ka, va), ma = _arrays((2, 3, 4), (1, 5, 4), (1, 5, 4), seed=8), _arrays((3, 5), seed=10)[0]
    q, k, v, m = (jitorch.tensor(a, requires_grad=True) for a in (qa, ka, va, ma))
    tq, tk, tv, tmask = (torch.tensor(a, requires_grad=True) for a in (qa, ka, va, ma))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tmask)
    assert type(out.grad_fn).__name__ != "ScaledDotProductFlashAttentionForCpuBackward0"
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    out.sum().backward()
    want.sum().backward()
    np.testing.assert_allclose(m.grad.numpy(), tmask.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["causal", "bool"])
def test_gradcheck_and_gradgradcheck(kind):
    q, k, v = (jitorch.tensor(a, requires_grad=True) for a in _arrays((2, 4, 3), (2, 5, 3), (2, 5, 2), seed=11))
    mask = jitorch.tensor(np.tril(np.ones((4, 5), bool), 1)) if kind == "bool" else None

    def fn(a, b, c):
        return F.scaled_dot_product_attention(a, b, c, attn_mask=mask, is_causal=kind == "causal")
    assert gradcheck(fn, (q, k, v))
    assert gradgradcheck(fn, (q, k, v))


def test_backward_row_gradcheck():
    g, q, k, v = (jitorch.tensor(a, requires_grad=True) for a in _arrays((2, 4, 2), (2, 4, 3), (2, 5, 3), (2, 5, 2),
                                                                          seed=12))
    attn = attention_weights(q.detach(), k.detach(), None, 0.6, True).requires_grad_()
    drop = jitorch.tensor(np.random.default_rng(13).integers(0, 2, (2, 4, 5)) * 2.0)
    for d in (None, drop):
        def fn(*t, d=d):
            return apply(SDPA_BACKWARD, *t, d, scale=0.6, needs=(True, True, True))
        assert gradcheck(fn, (g, q, k, v, attn))


def test_scale_default_is_one_over_sqrt_of_the_head_dim():
    q, k, v = (jitorch.tensor(a) for a in _arrays((1, 3, 9), (1, 3, 9), (1, 3, 9), seed=14))
    got = F.scaled_dot_product_attention(q, k, v).numpy()
    want = _composite(q, k, v, None, 1 / math.sqrt(9), False).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("wanted", [(True, False, False), (False, True, False), (False, False, True)])
def test_only_the_gradients_asked_for(wanted):
    arrays = _arrays((2, 2, 3, 4), (2, 2, 1, 4), (2, 2, 1, 3), seed=15)  # one key: every query attends to it alone
    grad = _arrays((2, 2, 3, 3), seed=16)[0]
    tensors = [(jitorch.tensor(a, requires_grad=w), torch.tensor(a, requires_grad=w)) for a, w in zip(arrays, wanted)]
    outs = [lib.nn.functional.scaled_dot_product_attention(*ts, is_causal=False)
            for lib, ts in ((jitorch, [t[0] for t in tensors]), (torch, [t[1] for t in tensors]))]
    outs[0].backward(jitorch.tensor(grad))
    outs[1].backward(torch.tensor(grad))
    np.testing.assert_allclose(outs[0].detach().numpy(), outs[1].detach().numpy(), rtol=1e-12)
    for (j, t), w in zip(tensors, wanted):
        assert (j.grad is None) == (not w)
        if w:
            np.testing.assert_allclose(j.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_five_dim_batches_and_a_single_query():
    arrays = _arrays((2, 2, 2, 1, 4), (2, 2, 2, 6, 4), (2, 2, 2, 6, 3), seed=17)
    grad = _arrays((2, 2, 2, 1, 3), seed=18)[0]
    got, got_grads = _run(jitorch, arrays, grad, is_causal=True)
    want, want_grads = _run(torch, arrays, grad, is_causal=True)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    for g, w in zip(got_grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", ["far-apart-queries", "nan-query", "inf-score"])
def test_far_apart_and_non_finite_scores_match_torch(case):
    """Queries whose scores sit far apart, a NaN query and an infinite score: torch's result, NaN for NaN."""
    q, k, v = _arrays((1, 2, 4, 3), (1, 2, 6, 3), (1, 2, 6, 2), seed=19, dtype=np.float32)
    if case == "far-apart-queries":
        q[..., 0, :] *= 300.0  # query 0's scores reach ~1e3; the others' stay near 1: e^-1000 would underflow
        k[..., 1:, :] = k[..., :1, :] - 0.5 * np.sign(q[..., 0:1, :])  # and query 0's own column spreads widely
    elif case == "nan-query":
        q[0, 1, 2, 0] = np.nan
    else:
        q[0, 0, 1, 0] = np.inf
    grad = _arrays((1, 2, 4, 2), seed=20, dtype=np.float32)[0]
    got, got_grads = _run(jitorch, (q, k, v), grad, is_causal=True)
    want, want_grads = _run(torch, (q, k, v), grad, is_causal=True)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(want), rtol=1e-5, atol=1e-5)
    if case == "far-apart-queries":
        for g, w in zip(got_grads, want_grads):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype,eps", [("bfloat16", 2.0 ** -8), ("float16", 2.0 ** -11)])
@pytest.mark.parametrize("causal", [False, True])
def test_reduced_precision_attention_accumulates_in_float32_as_torch(dtype, eps, causal):
    """float16/bfloat16 attention on the CPU: torch's flash kernel computes in float32 and rounds each result once
    (the composite in 2-byte floats rounded at every step: outputs up to 1.5 units of the last place from torch's)."""
    q, k, v, g = _arrays((2, 4, 33, 16), (2, 4, 33, 16), (2, 4, 33, 16), (2, 4, 33, 16), seed=7, dtype=np.float32)
    exact = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*exact, is_causal=causal)
    exact = [t.detach().numpy() for t in (out, *torch.autograd.grad(out, exact, torch.tensor(g, dtype=torch.float64)))]
    res = []
    for lib in (torch, jitorch):
        ts = [lib.tensor(a).to(getattr(lib, dtype)).requires_grad_() for a in (q, k, v)]
        out = lib.nn.functional.scaled_dot_product_attention(*ts, is_causal=causal)
        grads = lib.autograd.grad(out, ts, lib.tensor(g).to(getattr(lib, dtype)))
        assert out.dtype is getattr(lib, dtype) and all(gr.dtype is getattr(lib, dtype) for gr in grads)
        assert type(out.grad_fn).__name__ == "ScaledDotProductFlashAttentionForCpuBackward0"
        res.append([t.detach().double().numpy() for t in (out, *grads)])
    th, jt = res
    np.testing.assert_allclose(jt[0], th[0], rtol=0, atol=np.abs(th[0]).max() * eps)  # one rounding apart
    for a, b, ref in zip(jt, th, exact):
        assert np.abs(a - ref).mean() <= 1.1 * np.abs(b - ref).mean()
        np.testing.assert_allclose(a, b, rtol=0, atol=2 * np.abs(b).max() * eps)
