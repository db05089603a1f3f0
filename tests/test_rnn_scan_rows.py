"""The recurrent scan rows (``jitorch.ops.rnn_ops``): the rows against the recurrence in jitorch ops and against
PyTorch's layers, gradients with random upstream gradients, gradcheck and gradgradcheck in float64, the backward rows'
own backward, and the layer-level behaviours the rows must keep (zero-length input, output changed in place)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch._dispatch import apply
from jitorch.autograd import gradcheck, gradgradcheck
from jitorch.ops import rnn_native, rnn_ops
from nn_oracle import check_call, copy_weights
from nn_oracle import torch_single_thread  # noqa: F401 - an autouse fixture: one oracle thread

# mode, gates, projection size (0: none), GRU b_hh, relu
SPECS = {
    "lstm": ("LSTM", 4, 0, False, False), "lstm_proj": ("LSTM", 4, 2, False, False),
    "gru": ("GRU", 3, 0, True, False), "gru_nobias": ("GRU", 3, 0, False, False),
    "rnn_tanh": ("RNN", 1, 0, False, False), "rnn_relu": ("RNN", 1, 0, False, True),
}


def _args(spec, dtype, rng, steps=5, batch=3, hidden=4):
    """Leaves (gi, states, w_hh, b_hh, w_hr) of one scan, all requiring grad."""
    mode, gates, proj, bias, _ = SPECS[spec]
    out = proj or hidden

    def leaf(*shape):
        return jitorch.tensor(rng.uniform(-1, 1, shape).astype(dtype), requires_grad=True)
    states = (leaf(batch, out), leaf(batch, hidden)) if mode == "LSTM" else (leaf(batch, out),)
    return (leaf(steps, batch, gates * hidden), states, leaf(gates * hidden, out),
            leaf(gates * hidden) if bias else None, leaf(proj, hidden) if proj else None)


def _run(fn, spec, args, reverse):
    gi, states, w_hh, b_hh, w_hr = args
    return fn(SPECS[spec][0], gi, states, w_hh, b_hh=b_hh, w_hr=w_hr, relu=SPECS[spec][4], reverse=reverse)


def _leaves(args):
    gi, states, w_hh, b_hh, w_hr = args
    return [t for t in (gi, *states, w_hh, b_hh, w_hr) if t is not None]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("spec", list(SPECS))
# float32 CPU arrays take the native programs (`rnn_native`); with them off, the NumPy loop (float64 always takes it).
@pytest.mark.parametrize("dtype,tol,native", [("float32", 2e-6, True), ("float32", 2e-6, False),
                                              ("float64", 1e-12, False)])
def test_scan_matches_the_recurrence_in_jitorch_ops(spec, reverse, dtype, tol, native, monkeypatch):
    monkeypatch.setattr(rnn_native, "ENABLED", native)
    rng = np.random.default_rng(0)
    args = _args(spec, dtype, rng)
    got, want = _run(rnn_ops.scan, spec, args, reverse), _run(rnn_ops.reference, spec, args, reverse)
    assert len(got) == len(want)
    seeds = [jitorch.tensor(rng.standard_normal(tuple(o.shape)).astype(dtype)) for o in want]
    grads = []
    for outs in (got, want):
        grads.append(jitorch.autograd.grad(list(outs), _leaves(args), seeds))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=tol, rtol=tol)
    for k, (a, b) in enumerate(zip(*grads)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=10 * tol, rtol=10 * tol, err_msg=f"gradient {k}")


@pytest.mark.parametrize("spec", list(SPECS))
def test_gradcheck_and_gradgradcheck_float64(spec):
    rng = np.random.default_rng(1)
    args = _args(spec, "float64", rng, steps=3, batch=1, hidden=2)
    leaves = _leaves(args)
    gi, states, w_hh, b_hh, w_hr = args
    n_states = len(states)

    def fn(*xs):
        xs = list(xs)
        gi, states, w_hh = xs[0], tuple(xs[1:1 + n_states]), xs[1 + n_states]
        rest = xs[2 + n_states:]
        b = rest.pop(0) if b_hh is not None else None
        w = rest.pop(0) if w_hr is not None else None
        return rnn_ops.scan(SPECS[spec][0], gi, states, w_hh, b_hh=b, w_hr=w, relu=SPECS[spec][4], reverse=True)
    assert gradcheck(fn, leaves, eps=1e-6, atol=1e-6)
    # create_graph differentiates the recurrence in jitorch ops: second derivatives through the row.
    assert gradgradcheck(fn, leaves, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("spec", ["lstm_proj", "gru", "rnn_tanh"])
def test_backward_row_has_a_backward(spec):
    """The backward row differentiated by itself (what a traced joint graph records): its inputs are the output
    gradients and the forward's inputs; the workspace is recomputed from them here, so finite differences apply."""
    mode = SPECS[spec][0]
    rng = np.random.default_rng(2)
    gi, states, w_hh, b_hh, w_hr = _args(spec, "float64", rng, steps=3, batch=2, hidden=3)
    fwd_inputs = rnn_ops._inputs(mode, gi, states, w_hh, b_hh, w_hr)
    attrs = rnn_ops._attrs(mode, SPECS[spec][4], False)
    outs = apply(rnn_ops.ROWS[mode], *fwd_inputs, **attrs)
    grads = [jitorch.tensor(rng.standard_normal(tuple(o.shape)), requires_grad=True) for o in outs[:-1]]
    n = len(grads)
    present = [i for i, a in enumerate(fwd_inputs) if a is not None]

    def fn(*xs):
        inputs = list(fwd_inputs)
        for i, x in zip(present, xs[n:]):
            inputs[i] = x
        ws = apply(rnn_ops.ROWS[mode], *inputs, **attrs)[-1]
        got = apply(rnn_ops.BACKWARD_ROWS[mode], *xs[:n], *inputs, ws, **attrs)
        return tuple(g for g, a in zip(got, inputs) if a is not None)
    assert gradcheck(fn, grads + [fwd_inputs[i] for i in present], eps=1e-6, atol=1e-5)


def test_double_backward_takes_partial_derivatives():
    """``h0`` computed from the same leaf as the input gates: the row's graph-building backward must differentiate
    with respect to each input alone, or it counts the path through the other twice."""
    rng = np.random.default_rng(3)
    lstm = jitorch.nn.LSTM(2, 3, dtype=jitorch.float64)
    x = jitorch.tensor(rng.standard_normal((4, 2, 2)), requires_grad=True)

    def fn(x):
        h0 = x[0].matmul(jitorch.ones(2, 3, dtype=jitorch.float64)).unsqueeze(0).tanh()
        return lstm(x.sin(), (h0, h0 * 0.5))[0]
    assert gradcheck(fn, (x,), eps=1e-6, atol=1e-6)
    assert gradgradcheck(fn, (x,), eps=1e-6, atol=1e-5)


def _pair(name, *args, **kwargs):
    torch.manual_seed(0)
    th = getattr(torch.nn, name)(*args, **kwargs)
    jt = getattr(jitorch.nn, name)(*args, **kwargs)
    copy_weights(jt, th)
    return jt, th


@pytest.mark.parametrize("name,kwargs", [
    ("LSTM", {"num_layers": 2, "proj_size": 5, "bidirectional": True}),
    ("GRU", {"num_layers": 2, "batch_first": True}),
    ("RNN", {"nonlinearity": "relu", "bidirectional": True}),
])
def test_longer_sequences_match_torch(name, kwargs):
    """A few dozen steps at a hidden size of 24: errors would compound over the recurrence."""
    jt, th = _pair(name, 12, 24, **kwargs)
    rng = np.random.default_rng(4)
    shape = (6, 40, 12) if kwargs.get("batch_first") else (40, 6, 12)
    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    h0 = rng.uniform(-1, 1, (layers, 6, kwargs.get("proj_size", 24))).astype(np.float32)
    states = [h0, rng.uniform(-1, 1, (layers, 6, 24)).astype(np.float32)] if name == "LSTM" else [h0]
    check_call(jt, th, lambda m, x, *s: m(x, tuple(s) if len(s) == 2 else s[0]),
               [rng.uniform(-1, 1, shape).astype(np.float32), *states], atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_layers_match_torch(dtype):
    jt, th = _pair("LSTM", 3, 4)
    jt, th = jt.to(getattr(jitorch, dtype)), th.to(getattr(torch, dtype))
    x = np.random.default_rng(5).uniform(-1, 1, (6, 2, 3)).astype(np.float32)
    (y_jt, (h_jt, c_jt)), (y_th, (h_th, c_th)) = jt(jitorch.tensor(x).to(jt.weight_hh_l0.dtype)), \
        th(torch.tensor(x).to(th.weight_hh_l0.dtype))
    assert y_jt.dtype == c_jt.dtype == jt.weight_hh_l0.dtype
    for a, b in ((y_jt, y_th), (h_jt, h_th), (c_jt, c_th)):
        np.testing.assert_allclose(a.float().detach().numpy(), b.float().detach().numpy(), atol=2e-2)


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
def test_zero_length_sequence_raises_as_torch(name):
    for lib in (torch, jitorch):
        with pytest.raises(RuntimeError, match="Expected sequence length to be larger than 0 in RNN"):
            getattr(lib.nn, name)(3, 4)(lib.zeros(0, 2, 3))


def test_output_changed_in_place_keeps_the_gradient():
    """The states the backward reads live in the workspace, not in the returned output."""
    lstm = jitorch.nn.LSTM(3, 4)
    x = jitorch.randn(5, 2, 3)
    y, _ = lstm(x)
    (y * 2).sum().backward()
    want = lstm.weight_hh_l0.grad.clone()
    lstm.zero_grad()
    y, _ = lstm(x)
    y.mul_(2)
    y.sum().backward()
    np.testing.assert_allclose(lstm.weight_hh_l0.grad.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)


def test_one_node_per_layer_direction():
    y, _ = jitorch.nn.LSTM(3, 4)(jitorch.randn(7, 2, 3))
    assert type(y.grad_fn).__name__ == "LstmScanBackward0"
    assert rnn_ops.LSTM_SCAN.nondiff_outputs == (3,)
