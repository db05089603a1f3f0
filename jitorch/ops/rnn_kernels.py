"""Eager kernels of the recurrent scan rows (`rnn_ops`): a whole layer direction's recurrence and its backward.

Each kernel loops over time on whole arrays of the array module ``xp``: one ``h @ W_hh^T`` product and a handful of
in-place elementwise calls per step (written into preallocated per-step slices, so a step allocates almost nothing).
The backward runs the recurrence in reverse and leaves the weight gradient to one product over all steps at the end.

What the backward needs is kept in a *workspace*, a flat array of per-step sections (``(T, B, width)`` each):

- LSTM: ``acts`` (i, f, g, o after their nonlinearities), ``c``, ``tanh(c)``, ``h`` (the projected state if any);
- GRU: ``rz`` (r and z after the sigmoid), ``n``, ``hn`` (``h W_hn^T + b_hn``, which r multiplies), ``h``;
- RNN: ``h``.

The states live in the workspace, not in the returned output, so changing the output in place (as PyTorch's CPU
RNNs allow) does not change the gradient.

Half-precision inputs are computed in float32 and rounded once, as PyTorch's CPU kernels do; an Elman step, which
PyTorch runs as linear cells in the half type (as it does under autocast), rounds ``h W_hh^T``, the pre-activation and
``h`` to it at every step (a float32 ``h`` can set another relu mask than torch's, and the gradients differ).
"""
from __future__ import annotations

import numpy as np

from . import rnn_native
from .cascade_sum import sum_rows
from .host_matmul import matmul
from .half_cast import converted

_F32 = np.dtype(np.float32)

__all__ = ["lstm_forward", "lstm_backward", "lstm_cell_forward", "lstm_cell_backward", "gru_forward", "gru_backward",
           "rnn_forward", "rnn_backward", "workspace_widths"]


def workspace_widths(mode, hidden, out):
    """Section widths of the workspace, in order (``out``: the width of ``h``, the projection size for LSTM)."""
    if mode == "LSTM":
        return (4 * hidden, hidden, hidden, out)
    if mode == "GRU":
        return (2 * hidden, hidden, hidden, hidden)
    return (hidden,)


def _sections(ws, steps, batch, widths):
    out, start = [], 0
    for w in widths:
        size = steps * batch * w
        out.append(ws[start:start + size].reshape(steps, batch, w))
        start += size
    return out


def _workspace(xp, dtype, steps, batch, widths):
    ws = xp.empty(steps * batch * sum(widths), dtype=dtype)
    return ws, _sections(ws, steps, batch, widths)


def _order(steps, reverse):
    return range(steps - 1, -1, -1) if reverse else range(steps)


def _sigmoid_(xp, a):
    """``1 / (1 + exp(-a))`` in place (PyTorch's CPU formula); exp overflows to inf for a < -88, giving 0."""
    xp.negative(a, out=a)
    xp.exp(a, out=a)
    a += 1
    xp.reciprocal(a, out=a)


def _transposed(xp, w, steps, batch):
    """``w.T``, as a contiguous copy when the recurrence is long enough to repay it: OpenBLAS multiplies a few rows
    by a transposed view 2-3x slower than by a contiguous matrix (20 x 256 by 256 x 1024: 1.2 ms against 0.4), and
    each step makes that product; but the copy of a 1024 x 256 weight costs 0.43 ms, which a cell's single step (and
    any step of one row, where the view is as fast) never repays."""
    return xp.ascontiguousarray(w.T) if steps >= 4 and batch > 1 else w.T


def _low(*arrays):
    """float32 copies of half-precision arrays (None stays None), and the dtype to round the results to."""
    dtype = arrays[0].dtype
    if dtype.itemsize >= 4:
        return arrays, None
    return tuple(None if a is None else converted(a, _F32) for a in arrays), dtype


def _rounded(results, dtype):
    return results if dtype is None else tuple(r.astype(dtype) for r in results)


def _round_(a, dtype):
    """Round ``a`` in place to ``dtype`` (a half type; None: keep float32)."""
    if dtype is not None:
        a[...] = a.astype(dtype)
    return a


def _weight_grad(xp, d, hs, h0, reverse):
    """``sum_t d_t^T h_{t-1}``: the previous states are ``hs`` shifted by one step, ``h0`` at the first step."""
    steps, batch, width = d.shape
    first, rest = (steps - 1, slice(0, steps - 1)) if reverse else (0, slice(1, steps))
    prev = slice(1, steps) if reverse else slice(0, steps - 1)
    grad = matmul(xp, d[first].T, h0)
    if steps > 1:
        grad += matmul(xp, d[rest].reshape(-1, width).T, hs[prev].reshape(-1, hs.shape[-1]))
    return grad


# -- LSTM ----------------------------------------------------------------------------------------------------------
def lstm_forward(xp, gi, h0, c0, w_hh, w_hr, reverse):
    """``gi`` ``(T, B, 4H)``: the input projection plus both biases. Returns ``(y, h_n, c_n, workspace)``."""
    (gi, h0, c0, w_hh, w_hr), low = _low(gi, h0, c0, w_hh, w_hr)
    steps, batch, gates = gi.shape
    hid, out = gates // 4, h0.shape[-1]
    ws, sections = _workspace(xp, gi.dtype, steps, batch, workspace_widths("LSTM", hid, out))
    if rnn_native.applies(xp, steps, gi, h0, c0, w_hh, w_hr):
        return _rounded(rnn_native.lstm_forward(xp, gi, h0, c0, w_hh, w_hr, reverse, sections), low) + (ws,)
    acts, cs, tcs, hs = sections
    w_t = _transposed(xp, w_hh, steps, batch)
    w_hr_t = None if w_hr is None else _transposed(xp, w_hr, steps, batch)
    h, c = h0, c0
    with np.errstate(over="ignore"):
        for t in _order(steps, reverse):
            xp.matmul(h, w_t, out=acts[t])
            acts[t] += gi[t]
            h, c = _lstm_step(xp, acts[t], c, cs[t], tcs[t], hs[t], w_hr_t)
    last = 0 if reverse else steps - 1
    return _rounded((hs.copy(), hs[last].copy(), cs[last].copy()), low) + (ws,)


def _lstm_step(xp, a, c, c_out, tc, h_out, w_hr_t):
    """A step's elementwise part: the pre-activations ``a`` ``(B, 4H)`` become the activations; ``c_out``, ``tc``
    (``tanh(c_out)``) and ``h_out`` are written. Returns ``(h, c)``."""
    hid = c_out.shape[-1]
    g = a[:, 2 * hid:3 * hid]
    xp.tanh(g, out=tc)  # tc is free until tanh(c) below: it holds tanh(g) while the sigmoid overwrites g
    _sigmoid_(xp, a)
    g[...] = tc
    c = xp.multiply(a[:, hid:2 * hid], c, out=c_out)
    c += a[:, :hid] * g
    xp.tanh(c, out=tc)
    if w_hr_t is None:
        return xp.multiply(a[:, 3 * hid:], tc, out=h_out), c
    return xp.matmul(a[:, 3 * hid:] * tc, w_hr_t, out=h_out), c


def _lstm_backward_loop(xp, gy, ghn, gcn, c0, w_hh, w_hr, sections, reverse):
    """The reverse recurrence: ``(d_gates, dh0, dc0, dhs)``, ``dhs`` the projected states' gradients (or None)."""
    acts, cs, tcs, _ = sections
    steps, batch, out = gy.shape
    hid = w_hh.shape[0] // 4
    d_gates = xp.empty((steps, batch, 4 * hid), dtype=gy.dtype)
    dhs = None if w_hr is None else xp.empty((steps, batch, out), dtype=gy.dtype)
    dh = ghn.astype(gy.dtype, copy=True)
    dc = gcn.astype(gy.dtype, copy=True)
    tmp = xp.empty((batch, hid), dtype=gy.dtype)
    for t in _order(steps, not reverse):
        dh += gy[t]
        if dhs is not None:
            dhs[t] = dh
            dh = xp.matmul(dh, w_hr)
        a, tc, d = acts[t], tcs[t], d_gates[t]
        i, f, g, o = a[:, :hid], a[:, hid:2 * hid], a[:, 2 * hid:3 * hid], a[:, 3 * hid:]
        # dc += dh * o * (1 - tanh(c)^2)
        xp.multiply(tc, tc, out=tmp)
        xp.subtract(1, tmp, out=tmp)
        tmp *= o
        tmp *= dh
        dc += tmp
        prev_c = c0 if t == (steps - 1 if reverse else 0) else cs[t + 1 if reverse else t - 1]
        xp.multiply(dc, g, out=d[:, :hid])
        xp.multiply(dc, prev_c, out=d[:, hid:2 * hid])
        xp.multiply(dc, i, out=d[:, 2 * hid:3 * hid])
        xp.multiply(dh, tc, out=d[:, 3 * hid:])
        # The nonlinearities' derivatives: s (1 - s) for the sigmoid gates, 1 - g^2 for the tanh gate.
        deriv = xp.subtract(1, a)
        deriv *= a
        dg = deriv[:, 2 * hid:3 * hid]
        xp.multiply(g, g, out=dg)
        xp.subtract(1, dg, out=dg)
        d *= deriv
        dc *= f
        dh = xp.matmul(d, w_hh)
    return d_gates, dh, dc, dhs


def lstm_backward(xp, gy, ghn, gcn, h0, c0, w_hh, w_hr, ws, reverse):
    """Gradients ``(gi, h0, c0, w_hh, w_hr)`` (``w_hr``'s is empty without a projection)."""
    (gy, ghn, gcn, h0, c0, w_hh, w_hr), low = _low(gy, ghn, gcn, h0, c0, w_hh, w_hr)
    steps, batch, out = gy.shape
    hid = w_hh.shape[0] // 4
    sections = _sections(ws.astype(gy.dtype, copy=False), steps, batch, workspace_widths("LSTM", hid, out))
    native = rnn_native.applies(xp, steps, gy, ghn, gcn, c0, w_hh, w_hr)
    loop = rnn_native.lstm_backward if native else _lstm_backward_loop
    d_gates, dh, dc, dhs = loop(xp, gy, ghn, gcn, c0, w_hh, w_hr, sections, reverse)
    acts, _, tcs, hs = sections
    d_w_hh = _weight_grad(xp, d_gates, hs, h0, reverse)
    if dhs is None:
        d_w_hr = xp.zeros((0,), dtype=gy.dtype)
    else:
        raw = acts[:, :, 3 * hid:] * tcs
        d_w_hr = xp.matmul(dhs.reshape(-1, out).T, raw.reshape(-1, hid))
    return _rounded((d_gates, dh, dc, d_w_hh, d_w_hr), low)


def lstm_cell_forward(xp, x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """One step with its input projection (``nn.LSTMCell``): ``(h, c, workspace)``, the workspace laid out as
    `lstm_forward`'s for one step. float32/float64 arrays (a half type takes the layer's path, where the projection
    is a rounded linear as PyTorch's); the step's calls directly, a cell's whole cost being per-call overhead."""
    batch, hid = c0.shape
    ws, (acts, cs, tcs, hs) = _workspace(xp, x.dtype, 1, batch, workspace_widths("LSTM", hid, hid))
    a = acts[0]
    xp.matmul(x, w_ih.T, out=a)
    a += matmul(xp, h0, w_hh.T)
    if b_ih is not None:
        a += b_ih
        a += b_hh
    with np.errstate(over="ignore"):
        h, c = _lstm_step(xp, a, c0, cs[0], tcs[0], hs[0], None)
    return h.copy(), c.copy(), ws


def lstm_cell_backward(xp, gh, gc, x, h0, c0, w_ih, w_hh, b_ih, b_hh, ws):
    """Gradients ``(x, h0, c0, w_ih, w_hh, b_ih, b_hh)`` of `lstm_cell_forward` (the biases' empty without them)."""
    batch, hid = c0.shape
    sections = _sections(ws, 1, batch, workspace_widths("LSTM", hid, hid))
    d, dh, dc, _ = _lstm_backward_loop(xp, gh[None], xp.zeros_like(gh), gc, c0, w_hh, None, sections, False)
    d = d[0]
    d_b = sum_rows(xp, d) if b_ih is not None else xp.zeros((0,), dtype=d.dtype)
    return matmul(xp, d, w_ih), dh, dc, matmul(xp, d.T, x), matmul(xp, d.T, h0), d_b, d_b.copy()


# -- GRU -----------------------------------------------------------------------------------------------------------
def gru_forward(xp, gi, h0, w_hh, b_hh, reverse):
    """``gi`` ``(T, B, 3H)``: the input projection plus ``b_ih``; ``b_hh`` stays per step (``b_hn`` sits inside
    ``r * (...)``). Returns ``(y, h_n, workspace)``."""
    (gi, h0, w_hh, b_hh), low = _low(gi, h0, w_hh, b_hh)
    steps, batch, gates = gi.shape
    hid = gates // 3
    ws, sections = _workspace(xp, gi.dtype, steps, batch, workspace_widths("GRU", hid, hid))
    if rnn_native.applies(xp, steps, gi, h0, w_hh, b_hh):
        return _rounded(rnn_native.gru_forward(xp, gi, h0, w_hh, b_hh, reverse, sections), low) + (ws,)
    rzs, ns, hns, hs = sections
    w_t = _transposed(xp, w_hh, steps, batch)
    h = h0
    with np.errstate(over="ignore"):
        for t in _order(steps, reverse):
            gh = xp.matmul(h, w_t)
            if b_hh is not None:
                gh += b_hh
            x, rz, n = gi[t], rzs[t], ns[t]
            xp.add(x[:, :2 * hid], gh[:, :2 * hid], out=rz)
            _sigmoid_(xp, rz)
            hns[t] = gh[:, 2 * hid:]
            xp.multiply(rz[:, :hid], hns[t], out=n)
            n += x[:, 2 * hid:]
            xp.tanh(n, out=n)
            # h' = (1 - z) n + z h = n + z (h - n)
            new = xp.subtract(h, n, out=hs[t])
            new *= rz[:, hid:]
            new += n
            h = new
    last = 0 if reverse else steps - 1
    return _rounded((hs.copy(), hs[last].copy()), low) + (ws,)


def _gru_backward_loop(xp, gy, ghn, h0, w_hh, sections, reverse):
    """The reverse recurrence: ``(d_gi, d_gh, dh0)`` (``d_gh``: the gradients of ``h W_hh^T + b_hh``)."""
    rzs, ns, hns, hs = sections
    steps, batch, hid = gy.shape
    d_gi = xp.empty((steps, batch, 3 * hid), dtype=gy.dtype)
    d_gh = xp.empty((steps, batch, 3 * hid), dtype=gy.dtype)
    dh = ghn.astype(gy.dtype, copy=True)
    for t in _order(steps, not reverse):
        dh += gy[t]
        rz, n, d, dgh = rzs[t], ns[t], d_gi[t], d_gh[t]
        r, z = rz[:, :hid], rz[:, hid:]
        prev_h = h0 if t == (steps - 1 if reverse else 0) else hs[t + 1 if reverse else t - 1]
        dn = d[:, 2 * hid:]  # dn_pre = dh (1 - z) (1 - n^2)
        xp.multiply(n, n, out=dn)
        xp.subtract(1, dn, out=dn)
        dn *= dh
        dn -= dn * z
        xp.subtract(prev_h, n, out=d[:, hid:2 * hid])  # dz = dh (h - n)
        d[:, hid:2 * hid] *= dh
        xp.multiply(dn, hns[t], out=d[:, :hid])  # dr = dn_pre * hn
        deriv = xp.subtract(1, rz)
        deriv *= rz
        d[:, :2 * hid] *= deriv
        dgh[:, :2 * hid] = d[:, :2 * hid]
        xp.multiply(dn, r, out=dgh[:, 2 * hid:])
        dh = dh * z
        dh += xp.matmul(dgh, w_hh)
    return d_gi, d_gh, dh


def gru_backward(xp, gy, ghn, h0, w_hh, b_hh, ws, reverse):
    """Gradients ``(gi, h0, w_hh, b_hh)`` (``b_hh``'s is empty without biases)."""
    (gy, ghn, h0, w_hh), low = _low(gy, ghn, h0, w_hh)
    steps, batch, hid = gy.shape
    sections = _sections(ws.astype(gy.dtype, copy=False), steps, batch, workspace_widths("GRU", hid, hid))
    loop = rnn_native.gru_backward if rnn_native.applies(xp, steps, gy, ghn, h0, w_hh) else _gru_backward_loop
    d_gi, d_gh, dh = loop(xp, gy, ghn, h0, w_hh, sections, reverse)
    d_w_hh = _weight_grad(xp, d_gh, sections[3], h0, reverse)
    d_b_hh = sum_rows(xp, d_gh.reshape(-1, 3 * hid)) if b_hh is not None else xp.zeros((0,), dtype=gy.dtype)
    return _rounded((d_gi, dh, d_w_hh, d_b_hh), low)


# -- Elman RNN -----------------------------------------------------------------------------------------------------
def rnn_forward(xp, gi, h0, w_hh, relu, reverse):
    """``gi`` ``(T, B, H)``: the input projection plus both biases. Returns ``(y, h_n, workspace)``."""
    (gi, h0, w_hh), low = _low(gi, h0, w_hh)
    steps, batch, hid = gi.shape
    ws, (hs,) = _workspace(xp, gi.dtype, steps, batch, (hid,))
    w_t = _transposed(xp, w_hh, steps, batch)
    h = h0
    for t in _order(steps, reverse):
        h = _round_(xp.matmul(h, w_t, out=hs[t]), low)
        h += gi[t]
        _round_(h, low)
        if relu:
            xp.maximum(h, 0, out=h)
        else:
            xp.tanh(h, out=h)
        _round_(h, low)
    last = 0 if reverse else steps - 1
    return _rounded((hs.copy(), hs[last].copy()), low) + (ws,)


def rnn_backward(xp, gy, ghn, h0, w_hh, ws, relu, reverse):
    """Gradients ``(gi, h0, w_hh)``."""
    (gy, ghn, h0, w_hh), low = _low(gy, ghn, h0, w_hh)
    steps, batch, hid = gy.shape
    (hs,) = _sections(ws.astype(gy.dtype, copy=False), steps, batch, (hid,))
    d_gi = xp.empty((steps, batch, hid), dtype=gy.dtype)
    dh = ghn.astype(gy.dtype, copy=True)
    for t in _order(steps, not reverse):
        dh += gy[t]
        h, d = hs[t], d_gi[t]
        if relu:
            d[...] = xp.where(h > 0, dh, 0)  # where, not a product: an infinite gradient stays out where h <= 0
        else:
            xp.multiply(h, h, out=d)
            xp.subtract(1, d, out=d)
            d *= dh
        dh = xp.matmul(d, w_hh)
    return _rounded((d_gi, dh, _weight_grad(xp, d_gi, hs, h0, reverse)), low)
