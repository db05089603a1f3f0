"""The layer loop of ``RNN``/``LSTM``/``GRU`` and their cells.

A layer direction projects its whole input sequence with ONE product (``x W_ih^T + b_ih``, plus ``b_hh`` where it
sits outside the nonlinearity), then runs the recurrence as one scan row (`jitorch.ops.rnn_ops`): one node forward
and backward, whatever the length. A cell is a scan of one step; ``nn.LSTMCell``'s step, input projection included,
is one row of its own (`lstm_cell_step`). Gate order and formulas are PyTorch's (LSTM: i, f, g, o; GRU: r, z, n
with ``b_hn`` inside ``r * (...)``).

Under autocast the dtypes are those of PyTorch's per-step cells (its CPU path for GRU and for packed or projected
LSTMs): ``h W_hh^T + b_hh`` and the projection are linear ops, on the lower-precision list, so the recurrent weights
(and an Elman or LSTM ``h``, which enters only through them) go to the autocast dtype, while LSTM's ``c`` and GRU's
``h``, which enter elementwise, keep theirs: a float32 state gives float32 results, as torch's mixed dtypes.

>>> import jitorch
>>> from jitorch.nn.modules._rnn_steps import CELLS
>>> x, h = jitorch.zeros(2, 3), jitorch.zeros(2, 4)
>>> w_ih, w_hh, b = jitorch.ones(4, 3), jitorch.ones(4, 4), jitorch.ones(4)
>>> CELLS["RNN_RELU"](x, (h,), w_ih, w_hh, b, b)[0]
tensor([[2., 2., 2., 2.],
        [2., 2., 2., 2.]])
"""
from __future__ import annotations

from ..._dispatch import MODES
from ..._movement import cat, stack
from ...ops.nn_fused import FUSED_DTYPES
from ...ops.nn_linear import LINEAR
from ...ops.rnn_ops import lstm_cell, scan

__all__ = ["CELLS", "check_cell_shapes", "lstm_cell_step", "run_stack"]

_FAMILY = {"LSTM": "LSTM", "GRU": "GRU", "RNN_TANH": "RNN", "RNN_RELU": "RNN"}


def _like(bias, t):
    # Under autocast the product is in the autocast dtype and a float32 bias would promote the gates back to float32;
    # PyTorch's cells add it inside linear, in the autocast dtype.
    return bias if bias.dtype is t.dtype else bias.to(t.dtype)


def _project(x, weight, bias):
    """``x W^T + b`` over the last dim, as one 2-D product whatever ``x``'s leading dims."""
    if x._data.dtype in FUSED_DTYPES:
        from ..._dispatch import apply

        return apply(LINEAR, x, weight, bias)
    lead = tuple(x.shape[:-1])
    out = x.reshape(-1, x.shape[-1]).matmul(weight.t())
    if bias is not None:
        out = out + _like(bias, out)
    return out.reshape(lead + (weight.shape[0],))


def _input_gates(mode, x, w_ih, b_ih, b_hh):
    """The input projection; LSTM's and Elman's ``b_hh`` sit outside the nonlinearity, so it joins ``b_ih`` here
    (GRU's ``b_hn`` is multiplied by r: it stays in the step)."""
    if mode != "GRU" and b_hh is not None:
        b_ih = b_hh if b_ih is None else b_ih + b_hh
    return _project(x, w_ih, b_ih)


def _autocast_mode(x):
    """The enabled autocast mode of ``x``'s device and its dtype, or ``(None, None)``."""
    if not MODES:
        return None, None
    from ...amp._cast_mode import _region_mode
    from ...amp.autocast_mode import get_autocast_dtype

    mode = _region_mode((x,), {})
    return (None, None) if mode is None else (mode, get_autocast_dtype(mode.device_type))


def _scan(mode, gi, states, w_hh, b_hh, w_hr, reverse):
    b_hh = b_hh if mode == "GRU" else None
    region, lower = _autocast_mode(gi)
    if region is not None:
        # PyTorch's cells: the recurrent product (with b_hh) and the projection are linear, on the lower list.
        w_hh, b_hh, w_hr = (region._cast(w, lower) for w in (w_hh, b_hh, w_hr))
        if mode != "GRU":  # h enters only through linear; LSTM's c and GRU's h enter elementwise
            states = (region._cast(states[0], lower),) + tuple(states[1:])
    outs = scan(_FAMILY[mode], gi, states, w_hh, b_hh, w_hr, relu=mode == "RNN_RELU", reverse=reverse)
    if region is not None and w_hr is not None:  # a projected h is linear's output, whatever c's dtype
        outs = (region._cast(outs[0], lower), region._cast(outs[1], lower)) + tuple(outs[2:])
    return outs


def _cell(mode):
    def cell(x, states, w_ih, w_hh, b_ih, b_hh):
        gi = _input_gates(mode, x, w_ih, b_ih, b_hh).unsqueeze(0)
        return tuple(_scan(mode, gi, tuple(states), w_hh, b_hh, None, False)[1:])
    return cell


CELLS = {mode: _cell(mode) for mode in _FAMILY}


def check_cell_shapes(name, x, states, input_size, hidden_size):
    """ATen's checks of a cell's batched input ``x`` and ``states`` (otherwise a NumPy product or broadcast fails)."""
    batch, features = x._data.shape  # the arrays' shapes: a Size per call costs a step a microsecond
    if features != input_size:
        raise RuntimeError(f"{name}: input has inconsistent input_size: got {features} expected {input_size}")
    for i, state in enumerate(states):
        rows, size = state._data.shape
        if rows != batch:
            raise RuntimeError(f"{name}: Input batch size {batch} doesn't match hidden{i} batch size {rows}")
        if size != hidden_size:
            raise RuntimeError(f"{name}: hidden{i} has inconsistent hidden_size: got {size}, expected {hidden_size}")


def lstm_cell_step(x, states, w_ih, w_hh, b_ih, b_hh):
    """``nn.LSTMCell``'s step: one row (`rnn_ops.lstm_cell`) where every operand shares one float32/float64 dtype
    outside autocast; otherwise the cell above, whose linear rounds a half-precision projection as PyTorch's."""
    h, c = states
    operands = (x, h, c, w_ih, w_hh) + ((b_ih, b_hh) if b_ih is not None else ())
    dtype = x.dtype
    if (_autocast_mode(x)[0] is None and x._data.dtype.itemsize >= 4 and x._data.dtype.kind == "f"
            and all(t.dtype is dtype for t in operands)):
        return lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh)
    return CELLS["LSTM"](x, states, w_ih, w_hh, b_ih, b_hh)


def _unpack(weights, has_bias, has_proj):
    w_ih, w_hh = weights[0], weights[1]
    b_ih, b_hh = (weights[2], weights[3]) if has_bias else (None, None)
    w_hr = weights[-1] if has_proj else None
    return w_ih, w_hh, b_ih, b_hh, w_hr


def _run_direction(mode, x, states, weights, has_bias, has_proj, reverse):
    """One layer, one direction over ``x`` ``(T, B, I)``: one product for every step's input gates, then one scan
    row. Returns (outputs ``(T, B, H)``, final states)."""
    w_ih, w_hh, b_ih, b_hh, w_hr = _unpack(weights, has_bias, has_proj)
    gi = _input_gates(mode, x, w_ih, b_ih, b_hh)
    outs = _scan(mode, gi, states, w_hh, b_hh, w_hr, reverse)
    return outs[0], outs[1:]


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
