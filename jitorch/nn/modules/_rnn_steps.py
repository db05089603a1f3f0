"""The recurrence math of ``RNN``/``LSTM``/``GRU`` and their cells, in differentiable jitorch ops.

A layer direction projects its whole input sequence with ONE matmul (``x W_ih^T + b_ih``), then loops over time with
one ``h W_hh^T`` matmul per step; gate order and formulas are PyTorch's (LSTM: i, f, g, o; GRU: r, z, n with
``b_hn`` inside ``r * (...)``).

>>> import jitorch
>>> from jitorch.nn.modules._rnn_steps import CELLS
>>> x, h = jitorch.zeros(2, 3), jitorch.zeros(2, 4)
>>> w_ih, w_hh, b = jitorch.ones(4, 3), jitorch.ones(4, 4), jitorch.ones(4)
>>> CELLS["RNN_RELU"](x, (h,), w_ih, w_hh, b, b)[0]
tensor([[2., 2., 2., 2.],
        [2., 2., 2., 2.]])
"""
from __future__ import annotations

from ..._movement import cat, stack

__all__ = ["CELLS", "run_stack"]


def _project(x, weight, bias):
    """``x W^T + b`` over the last dim, as one 2-D matmul whatever ``x``'s leading dims."""
    lead = tuple(x.shape[:-1])
    out = x.reshape(-1, x.shape[-1]).matmul(weight.t())
    if bias is not None:
        out = out + bias
    return out.reshape(lead + (weight.shape[0],))


def _rnn_step(relu):
    def step(gi, states, w_hh_t, b_hh, w_hr_t=None):
        pre = gi + states[0].matmul(w_hh_t)
        if b_hh is not None:
            pre = pre + b_hh
        return (pre.relu() if relu else pre.tanh(),)
    return step


def _lstm_step(gi, states, w_hh_t, b_hh, w_hr_t=None):
    h, c = states
    gates = gi + h.matmul(w_hh_t)
    if b_hh is not None:
        gates = gates + b_hh
    i, f, g, o = gates.chunk(4, 1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    if w_hr_t is not None:
        h = h.matmul(w_hr_t)
    return h, c


def _gru_step(gi, states, w_hh_t, b_hh, w_hr_t=None):
    (h,) = states
    gh = h.matmul(w_hh_t)
    if b_hh is not None:
        gh = gh + b_hh
    i_r, i_z, i_n = gi.chunk(3, 1)
    h_r, h_z, h_n = gh.chunk(3, 1)
    r = (i_r + h_r).sigmoid()
    z = (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()
    return (n + z * (h - n),)


_STEPS = {"RNN_TANH": _rnn_step(False), "RNN_RELU": _rnn_step(True), "LSTM": _lstm_step, "GRU": _gru_step}


def _cell(mode):
    step = _STEPS[mode]

    def cell(x, states, w_ih, w_hh, b_ih, b_hh):
        return step(_project(x, w_ih, b_ih), states, w_hh.t(), b_hh)
    return cell


CELLS = {mode: _cell(mode) for mode in _STEPS}


def _unpack(weights, has_bias, has_proj):
    w_ih, w_hh = weights[0], weights[1]
    b_ih, b_hh = (weights[2], weights[3]) if has_bias else (None, None)
    w_hr = weights[-1] if has_proj else None
    return w_ih, w_hh, b_ih, b_hh, w_hr


def _run_direction(mode, x, states, weights, has_bias, has_proj, reverse):
    """One layer, one direction over ``x`` ``(T, B, I)``; returns (outputs ``(T, B, H)``, final states)."""
    w_ih, w_hh, b_ih, b_hh, w_hr = _unpack(weights, has_bias, has_proj)
    gi_all = _project(x, w_ih, b_ih)
    if mode != "GRU" and b_hh is not None:  # both biases sit outside the nonlinearity: add b_hh once, not per step
        gi_all, b_hh = gi_all + b_hh, None
    step = _STEPS[mode]
    w_hh_t = w_hh.t()
    w_hr_t = w_hr.t() if w_hr is not None else None
    inputs = gi_all.unbind(0)
    outputs = [None] * len(inputs)
    for t in (reversed(range(len(inputs))) if reverse else range(len(inputs))):
        states = step(inputs[t], states, w_hh_t, b_hh, w_hr_t)
        outputs[t] = states[0]
    return stack(outputs), states


def run_stack(mode, x, states, flat_weights, num_layers, num_directions, has_bias, has_proj, dropout, training):
    """Run a multi-layer (bi)directional stack over sequence-first ``x``.

    ``states``: ``(h_0,)`` or ``(h_0, c_0)``, each ``(layers * directions, B, H)``. Returns ``(output, final states)``
    with the finals stacked the same way. Dropout (when ``training``) applies between layers, not after the last.
    """
    per_layer = len(flat_weights) // (num_layers * num_directions)
    finals = [[] for _ in states]
    layer_input = x
    for layer in range(num_layers):
        outs = []
        for direction in range(num_directions):
            index = layer * num_directions + direction
            weights = flat_weights[index * per_layer:(index + 1) * per_layer]
            out, last = _run_direction(mode, layer_input, tuple(s[index] for s in states), weights, has_bias,
                                       has_proj, reverse=direction == 1)
            outs.append(out)
            for k, s in enumerate(last):
                finals[k].append(s)
        layer_input = cat(outs, -1) if num_directions == 2 else outs[0]
        if dropout > 0 and training and layer < num_layers - 1:
            from .. import functional as F

            layer_input = F.dropout(layer_input, p=dropout, training=True)
    return layer_input, tuple(stack(f) for f in finals)
