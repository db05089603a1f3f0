"""The LSTM's fast paths against PyTorch: the recurrent product on panel-packed weights (`llvm_gemm_packed`, taken
by the native programs once a gate row is wider than the row loop's 128 floats or a step's product reaches 64^3
multiply-adds) and ``nn.LSTMCell``'s one-row step (`rnn_ops.lstm_cell`). Outputs, final states and every gradient,
with random upstream gradients on every output."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch._dispatch import apply
from jitorch.autograd import gradcheck, gradgradcheck
from jitorch.codegen.llvm_gemm_packed import DEPTH, pack_panels, packed_matmul, panel, rows_max
from jitorch.nn.modules import rnn as jrnn
from jitorch.ops import rnn_native, rnn_ops
from nn_oracle import check_call, copy_weights
from nn_oracle import torch_single_thread  # noqa: F401 - an autouse fixture: one oracle thread


def _arr(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 0, 5), (20, 256, 1024), (13, 300, 130), (7, DEPTH + 1, 65),
                                   (25, 1000, 7), (2 * rows_max() + 1, 33, 2 * panel() - 1)])
def test_packed_product_matches_numpy(m, k, n):
    """Row tiles of every height, a last panel through the mask, sums over several passes of `DEPTH` terms, and no
    terms at all (zeros, as ``a @ b``)."""
    rng = np.random.default_rng(0)
    a, b = _arr(rng, m, k), _arr(rng, k, n)
    panels, width = pack_panels(b)
    assert width == n and panels.shape == (-(-n // panel()), k, panel())
    np.testing.assert_allclose(packed_matmul(a, panels, n), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5 * k)


def test_packing_a_transposed_weight():
    w = _arr(np.random.default_rng(1), 96, 40)
    panels, _ = pack_panels(w.T)
    np.testing.assert_array_equal(panels[0], w[:panel()].T)
    assert not panels[-1, :, 96 - panel() * (panels.shape[0] - 1):].any()  # the padding is zeros


def _pair(*args, **kwargs):
    torch.manual_seed(0)
    th = torch.nn.LSTM(*args, **kwargs)
    jt = jrnn.LSTM(*args, **kwargs)
    copy_weights(jt, th)
    return jt, th


# Hidden 40: 160 gates, past the row loop's width; batch 9 runs tiles of 5 and 4 rows; 37 steps: chunks 32 + 4 + 1.
@pytest.mark.parametrize("kwargs", [
    {}, {"num_layers": 2, "dropout": 0.0}, {"bidirectional": True, "batch_first": True},
    {"proj_size": 7, "num_layers": 2}, {"proj_size": 7, "bidirectional": True, "bias": False},
], ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_packed_recurrence_matches_torch(kwargs):
    assert rnn_native._packs(9, 160, 40)
    jt, th = _pair(10, 40, **kwargs)
    rng = np.random.default_rng(2)
    shape = (9, 37, 10) if kwargs.get("batch_first") else (37, 9, 10)
    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    states = [_arr(rng, layers, 9, kwargs.get("proj_size") or 40), _arr(rng, layers, 9, 40)]
    check_call(jt, th, lambda m, x, h, c: m(x, (h, c)), [_arr(rng, *shape), *states], atol=3e-5, rtol=3e-5)


def test_packed_language_model_sizes_match_torch():
    """The benchmark's sizes (embedding 128, hidden 256, batch 20): products of 20 x 256 by 256 x 1024."""
    jt, th = _pair(128, 256, num_layers=2)
    rng = np.random.default_rng(3)
    check_call(jt, th, lambda m, x, h, c: m(x, (h, c)),
               [_arr(rng, 12, 20, 128), _arr(rng, 2, 20, 256), _arr(rng, 2, 20, 256)], atol=5e-5, rtol=5e-5)


def _cells(**kwargs):
    torch.manual_seed(0)
    th = torch.nn.LSTMCell(6, 5, **kwargs)
    jt = jrnn.LSTMCell(6, 5, **kwargs)
    copy_weights(jt, th)
    return jt, th


@pytest.mark.parametrize("bias", [True, False])
def test_cell_is_one_row_and_matches_torch(bias):
    jt, th = _cells(bias=bias)
    rng = np.random.default_rng(4)
    check_call(jt, th, lambda m, x, h, c: m(x, (h, c)), [_arr(rng, 3, 6), _arr(rng, 3, 5), _arr(rng, 3, 5)])
    check_call(jt, th, lambda m, x, h, c: m(x, (h, c)), [_arr(rng, 6), _arr(rng, 5), _arr(rng, 5)])  # unbatched
    h, c = jt(jitorch.randn(3, 6, requires_grad=True))
    assert h.grad_fn.name() == c.grad_fn.name() == "LstmCellBackward0"


def test_cell_loop_matches_torch():
    """A Python loop over the cell (the use it is for): gradients flow through 8 steps of rows."""
    jt, th = _cells()
    rng = np.random.default_rng(5)

    def run(m, x, h, c):
        outs = []
        for t in range(x.shape[0]):
            h, c = m(x[t], (h, c))
            outs.append(h)
        return outs, c
    check_call(jt, th, run, [_arr(rng, 8, 3, 6), _arr(rng, 3, 5), _arr(rng, 3, 5)])


def test_cell_gradcheck_and_gradgradcheck_float64():
    rng = np.random.default_rng(6)
    args = [jitorch.tensor(rng.uniform(-1, 1, s), requires_grad=True)
            for s in ((2, 3), (2, 4), (2, 4), (16, 3), (16, 4), (16,), (16,))]

    def fn(*a):
        return rnn_ops.lstm_cell(*a)
    assert gradcheck(fn, args, eps=1e-6, atol=1e-6)
    assert gradgradcheck(fn, args, eps=1e-6, atol=1e-5)
    outs = apply(rnn_ops.LSTM_CELL, *args)
    grads = jitorch.autograd.grad(outs[:2], args, [jitorch.ones_like(outs[0]), jitorch.ones_like(outs[1])],
                                  create_graph=True)
    assert all(g.requires_grad for g in grads)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_cell_keeps_torchs_rounding(dtype):
    """A half-precision cell takes the composite path (a rounded linear), as PyTorch's cell computes."""
    jt, th = _cells()
    jt, th = jt.to(getattr(jitorch, dtype)), th.to(getattr(torch, dtype))
    x = _arr(np.random.default_rng(7), 3, 6)
    h_jt, c_jt = jt(jitorch.tensor(x).to(jt.weight_ih.dtype))
    h_th, c_th = th(torch.tensor(x).to(th.weight_ih.dtype))
    assert h_jt.dtype == jt.weight_ih.dtype
    for a, b in ((h_jt, h_th), (c_jt, c_th)):
        np.testing.assert_allclose(a.float().detach().numpy(), b.float().detach().numpy(), atol=1e-2)


def test_native_off_gives_the_same_results(monkeypatch):
    """The packed programs against the NumPy loop on the same inputs."""
    jt, _ = _pair(10, 40, bidirectional=True)
    x = jitorch.tensor(_arr(np.random.default_rng(8), 11, 9, 10))
    y_native, _ = jt(x)
    monkeypatch.setattr(rnn_native, "ENABLED", False)
    y_plain, _ = jt(x)
    np.testing.assert_allclose(y_native.detach().numpy(), y_plain.detach().numpy(), atol=2e-6)
