"""The recurrence of one RNN/LSTM/GRU layer direction as one row, with one backward row (cuDNN's and ATen's
``_thnn_fused_*`` idea, a whole sequence at a time).

As a composite, an LSTM step cost about 23 dispatches and autograd nodes forward and backward (``chunk``'s backward
alone filled four zero tensors a step): ``nn.LSTM(16, 32)`` took 46 ms over 50 steps where torch takes 1.5. As rows,
a layer direction is one node: its kernel (`rnn_kernels`) loops over time on arrays, and its backward row runs the
reverse recurrence the same way, with one product for the weight gradient.

Rows (``gi`` is the input projection of every step, ``(T, B, gates * H)``, computed before with one product):

- ``lstm_scan(gi, h0, c0, w_hh, w_hr)`` -> ``(y, h_n, c_n, workspace)``; ``gi`` holds both biases;
- ``gru_scan(gi, h0, w_hh, b_hh)`` -> ``(y, h_n, workspace)``; ``b_hh`` stays inside (``b_hn`` is multiplied by r);
- ``rnn_scan(gi, h0, w_hh, relu)`` -> ``(y, h_n, workspace)``;

each with ``reverse`` (the backward direction of a bidirectional layer). The workspace (gate activations and states)
is a non-differentiable output the backward reads. ``lstm_cell(x, h0, c0, w_ih, w_hh, b_ih, b_hh)`` ->
``(h, c, workspace)`` is ``nn.LSTMCell``'s step, its input projection included (a Python loop over a cell pays
per node, so the step is one node forward and one backward).

Double backward: with ``create_graph`` the backward differentiates `reference` (the same recurrence in jitorch ops)
instead of calling the backward row, so the gradients have a graph of their own; the backward rows' own backward
does the same from their inputs.

>>> import jitorch
>>> gi = jitorch.zeros(3, 2, 4)  # 3 steps, batch 2, hidden 1: four gates
>>> y, h, c = scan("LSTM", gi, (jitorch.zeros(2, 1), jitorch.ones(2, 1)), jitorch.zeros(4, 1))
>>> y.shape, c.flatten()
(jitorch.Size([3, 2, 1]), tensor([0.1250, 0.1250]))
"""
from __future__ import annotations

from dataclasses import dataclass

from ..autograd.grad_mode import GradState
from . import rnn_kernels as kernels
from .table import Opaque, defop

__all__ = ["scan", "reference", "lstm_cell", "LSTM_SCAN", "GRU_SCAN", "RNN_SCAN", "LSTM_CELL", "LSTM_SCAN_BACKWARD",
           "GRU_SCAN_BACKWARD", "RNN_SCAN_BACKWARD", "LSTM_CELL_BACKWARD"]


def _apply(op, *args, **attrs):
    from .._dispatch import apply

    return apply(op, *args, **attrs)


# -- the recurrence in jitorch ops (PyTorch's formulas; the graph-building backward differentiates it) ---------------
def _order(steps, reverse):
    return range(steps - 1, -1, -1) if reverse else range(steps)


def _lstm_reference(gi, h0, c0, w_hh, w_hr, reverse):
    h, c, outs = h0, c0, [None] * gi.shape[0]
    w_hh_t = w_hh.t()
    for t in _order(gi.shape[0], reverse):
        i, f, g, o = (gi[t] + h.matmul(w_hh_t)).chunk(4, 1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h = o.sigmoid() * c.tanh()
        if w_hr is not None:
            h = h.matmul(w_hr.t())
        outs[t] = h
    return _stacked(outs), h, c


def _lstm_cell_reference(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    gates = x.matmul(w_ih.t()) + h0.matmul(w_hh.t())
    if b_ih is not None:
        gates = gates + b_ih + b_hh
    i, f, g, o = gates.chunk(4, 1)
    c = f.sigmoid() * c0 + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


def _gru_reference(gi, h0, w_hh, b_hh, reverse):
    h, outs = h0, [None] * gi.shape[0]
    w_hh_t = w_hh.t()
    for t in _order(gi.shape[0], reverse):
        gh = h.matmul(w_hh_t)
        if b_hh is not None:
            gh = gh + b_hh
        i_r, i_z, i_n = gi[t].chunk(3, 1)
        h_r, h_z, h_n = gh.chunk(3, 1)
        r, z = (i_r + h_r).sigmoid(), (i_z + h_z).sigmoid()
        n = (i_n + r * h_n).tanh()
        h = n + z * (h - n)
        outs[t] = h
    return _stacked(outs), h


def _rnn_reference(gi, h0, w_hh, relu, reverse):
    h, outs = h0, [None] * gi.shape[0]
    w_hh_t = w_hh.t()
    for t in _order(gi.shape[0], reverse):
        pre = gi[t] + h.matmul(w_hh_t)
        h = pre.relu() if relu else pre.tanh()
        outs[t] = h
    return _stacked(outs), h


def _stacked(outs):
    from .._movement import stack

    return stack(outs)


# -- families: inputs, outputs, kernels and the reference of each row -----------------------------------------------
@dataclass(frozen=True)
class _Family:
    mode: str
    ngrads: int  # differentiable outputs: (y, h_n[, c_n])
    forward: object  # (xp, *inputs, **attrs) -> outputs + (workspace,)
    backward: object  # (xp, *grads, *inputs without gi, workspace, **attrs) -> a gradient per input
    reference: object  # (*inputs, **attrs) -> differentiable outputs, in jitorch ops


FAMILIES = {
    "LSTM": _Family("LSTM", 3, kernels.lstm_forward, kernels.lstm_backward, _lstm_reference),
    "GRU": _Family("GRU", 2, kernels.gru_forward, kernels.gru_backward, _gru_reference),
    "RNN": _Family("RNN", 2, kernels.rnn_forward, kernels.rnn_backward, _rnn_reference),
    "LSTM_CELL": _Family("LSTM_CELL", 2, kernels.lstm_cell_forward, kernels.lstm_cell_backward, _lstm_cell_reference),
}


def _aliases(inputs, needs):
    """A fresh view of each input that needs a gradient: differentiating with respect to it gives the partial
    derivative through this recurrence only, even when one input is computed from another (``h0`` from an encoder
    whose outputs also feed ``gi``)."""
    return [a.view_as(a) if need and a is not None else a for a, need in zip(inputs, needs)]


def reference_grads(family, inputs, grads, attrs, needs, create_graph):
    """The gradients of `reference`'s outputs at ``inputs`` for output gradients ``grads``, one per input (None
    where ``needs`` is false), by autograd through the recurrence in jitorch ops."""
    from ..autograd import grad as autograd_grad
    from ..autograd.grad_mode import enable_grad

    with enable_grad():
        inputs = _aliases(inputs, needs)
        outs = family.reference(*inputs, **attrs)
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
        wanted = [i for i, (a, need) in enumerate(zip(inputs, needs)) if need and a is not None]
        got = autograd_grad([o for o, _ in pairs], [inputs[i] for i in wanted], [g for _, g in pairs],
                            create_graph=create_graph, allow_unused=True)
    result = [None] * len(inputs)
    for i, g in zip(wanted, got):
        result[i] = g if g is not None else inputs[i].new_zeros(inputs[i].shape)
    return tuple(result)


def _scan_backward(family):
    def backward(ctx, *grads):
        grads = grads[:family.ngrads]
        inputs = ctx.inputs
        needs = tuple(ctx.needs_grad(i) for i in range(len(inputs)))
        if GradState.enabled:
            # create_graph: the gradients must be differentiable functions of the inputs.
            return reference_grads(family, inputs, grads, ctx.attrs, needs, create_graph=True)
        ws = ctx.output(family.ngrads)  # alone: the outputs themselves may since have been changed in place
        got = _apply(BACKWARD_ROWS[family.mode], *grads, *inputs, ws, **ctx.attrs)
        return tuple(g if need else None for g, need in zip(got, needs))
    return backward


def _backward_backward(family):
    def backward(ctx, *ggs):
        # Inputs: the output gradients, the forward's inputs, the workspace (recomputed, so it gets no edge).
        saved = ctx.inputs
        n = family.ngrads
        leaves = [None if a is None else a.detach().requires_grad_() for a in saved[:-1]]
        from ..autograd import grad as autograd_grad
        from ..autograd.grad_mode import enable_grad

        with enable_grad():
            firsts = reference_grads(family, leaves[n:], leaves[:n], ctx.attrs,
                                     [a is not None for a in leaves[n:]], create_graph=True)
            pairs = [(f, gg) for f, gg in zip(firsts, ggs) if f is not None and gg is not None and f.requires_grad]
            wrt = [i for i, a in enumerate(leaves) if a is not None and ctx.needs_grad(i)]
            got = autograd_grad([f for f, _ in pairs], [leaves[i] for i in wrt], [gg for _, gg in pairs],
                                create_graph=GradState.enabled, allow_unused=True) if pairs and wrt else ()
        result = [None] * len(saved)
        for i, g in zip(wrt, got):
            result[i] = g
        return tuple(result)
    return backward


def _forward_kernel(family):
    def kernel(xp, *arrays, **attrs):
        return family.forward(xp, *arrays, **attrs)
    return kernel


def _backward_kernel(family):
    n = family.ngrads
    if family.mode == "LSTM_CELL":  # the cell's backward reads every input (x is the weight gradient's factor)
        return family.backward

    def kernel(xp, *arrays, **attrs):
        # ``gi`` (right after the gradients) is only for the double backward: the workspace replaces it here.
        return family.backward(xp, *arrays[:n], *arrays[n + 1:], **attrs)
    return kernel


def _rows(mode, name, nin, grad_name):
    family = FAMILIES[mode]
    n = family.ngrads
    row = defop(name, _forward_kernel(family), _scan_backward(family), Opaque("a loop over time steps"),
                promotion="promote", saves="both", meta=True, nout=n + 1, nondiff_outputs=(n,), grad_name=grad_name)
    back = defop(f"{name}_backward", _backward_kernel(family), _backward_backward(family),
                 Opaque("a reverse loop over time steps"), promotion="promote", saves="inputs", meta=True, nout=nin,
                 grad_name=grad_name.replace("Backward0", "BackwardBackward0"))
    return row, back


LSTM_SCAN, LSTM_SCAN_BACKWARD = _rows("LSTM", "lstm_scan", 5, "LstmScanBackward0")
GRU_SCAN, GRU_SCAN_BACKWARD = _rows("GRU", "gru_scan", 4, "GruScanBackward0")
RNN_SCAN, RNN_SCAN_BACKWARD = _rows("RNN", "rnn_scan", 3, "RnnScanBackward0")
# nn.LSTMCell's step with its input projection: one node forward and backward where the composite took four (the
# biases' sum, linear, unsqueeze, the scan), in a Python loop over time that calls it once a step.
LSTM_CELL, LSTM_CELL_BACKWARD = _rows("LSTM_CELL", "lstm_cell", 7, "LstmCellBackward0")
ROWS = {"LSTM": LSTM_SCAN, "GRU": GRU_SCAN, "RNN": RNN_SCAN, "LSTM_CELL": LSTM_CELL}
BACKWARD_ROWS = {"LSTM": LSTM_SCAN_BACKWARD, "GRU": GRU_SCAN_BACKWARD, "RNN": RNN_SCAN_BACKWARD,
                 "LSTM_CELL": LSTM_CELL_BACKWARD}


def reference(mode, gi, states, w_hh, b_hh=None, w_hr=None, relu=False, reverse=False):
    """`scan` in jitorch ops, one op per gate per step (the oracle of the rows, and their double backward)."""
    return FAMILIES[mode].reference(*_inputs(mode, gi, states, w_hh, b_hh, w_hr), **_attrs(mode, relu, reverse))


def _inputs(mode, gi, states, w_hh, b_hh, w_hr):
    if mode == "LSTM":
        return (gi, states[0], states[1], w_hh, w_hr)
    if mode == "GRU":
        return (gi, states[0], w_hh, b_hh)
    return (gi, states[0], w_hh)


def _attrs(mode, relu, reverse):
    return {"relu": relu, "reverse": reverse} if mode == "RNN" else {"reverse": reverse}


def scan(mode, gi, states, w_hh, b_hh=None, w_hr=None, relu=False, reverse=False):
    """One layer direction over ``gi`` ``(T, B, gates * H)``: returns ``(y, h_n)`` or, for LSTM, ``(y, h_n, c_n)``.

    ``mode``: ``"LSTM"``, ``"GRU"`` or ``"RNN"`` (``relu`` picks the Elman nonlinearity); ``states``: ``(h0,)`` or
    ``(h0, c0)``, each ``(B, H)``; ``b_hh`` is for GRU only (the others take both biases in ``gi``); ``w_hr`` is
    LSTM's projection.
    """
    if gi.shape[0] == 0:
        raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
    outs = _apply(ROWS[mode], *_inputs(mode, gi, states, w_hh, b_hh, w_hr), **_attrs(mode, relu, reverse))
    return outs[:-1]


def lstm_cell(x, h0, c0, w_ih, w_hh, b_ih=None, b_hh=None):
    """One ``nn.LSTMCell`` step as one row: ``x`` ``(B, I)``, states ``(B, H)``, the cell's weights; returns
    ``(h, c)``. Both biases or neither."""
    outs = _apply(LSTM_CELL, x, h0, c0, w_ih, w_hh, b_ih, b_hh)
    return outs[0], outs[1]
