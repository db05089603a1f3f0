"""Recurrent layers: ``RNN`` (tanh/relu), ``LSTM`` (optional projections) and ``GRU`` (tensor or
``PackedSequence`` input),
plus their single-step cells ``RNNCell``, ``LSTMCell`` and ``GRUCell``.

Parameters carry PyTorch's names (``weight_ih_l0``, ``bias_hh_l1_reverse``, ``weight_hr_l0``...) so ``state_dict``s
load across frameworks. The input projection of a whole sequence is one matmul; the recurrence then runs one small
matmul per time step (``_rnn_steps``), all in differentiable jitorch ops.

>>> import jitorch
>>> from jitorch.nn.modules.rnn import LSTM
>>> lstm = LSTM(4, 8, num_layers=2, batch_first=True, bidirectional=True)
>>> out, (h, c) = lstm(jitorch.randn(3, 5, 4))
>>> out.shape, h.shape, c.shape
(jitorch.Size([3, 5, 16]), jitorch.Size([4, 3, 8]), jitorch.Size([4, 3, 8]))
"""
from __future__ import annotations

import math
import numbers
import warnings

from ... import _creation
from ...amp._cast_mode import autocast_lower
from ...amp.autocast_mode import _state as _autocast_state
from .. import init
from ..parameter import Parameter
from ._rnn_packed import check_packed, is_packed, packed_zeros, run_packed
from ._rnn_weights import FlatWeights
from ._rnn_steps import CELLS, check_cell_shapes, lstm_cell_step, run_stack
from .module import Module

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


class RNNBase(FlatWeights, Module):
    """Shared parameters, checks and layer loop of ``RNN``, ``LSTM`` and ``GRU`` (PyTorch's ``RNNBase``)."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        if not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an element "
                             "being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                          stacklevel=2)
        for name, value, kind in (("bias", bias, bool), ("batch_first", batch_first, bool),
                                  ("input_size", input_size, int), ("hidden_size", hidden_size, int)):
            if not isinstance(value, kind):
                raise TypeError(f"{name} should be of type {kind.__name__}, got: {type(value).__name__}")
        if input_size <= 0:
            raise ValueError("input_size must be greater than zero")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if mode not in _GATES:
            raise ValueError("Unrecognized RNN mode: " + mode)
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        num_directions = 2 if bidirectional else 1
        self._flat_weights_names, self._all_weights = [], []
        kw = {"device": device, "dtype": dtype}
        for layer in range(num_layers):
            for direction in range(num_directions):
                layer_input = input_size if layer == 0 else real_hidden * num_directions
                shapes = [("weight_ih_l{}{}", (gate_size, layer_input)), ("weight_hh_l{}{}", (gate_size, real_hidden))]
                if bias:
                    shapes += [("bias_ih_l{}{}", (gate_size,)), ("bias_hh_l{}{}", (gate_size,))]
                if proj_size > 0:
                    shapes += [("weight_hr_l{}{}", (proj_size, hidden_size))]
                suffix = "_reverse" if direction == 1 else ""
                names = []
                for pattern, shape in shapes:
                    name = pattern.format(layer, suffix)
                    setattr(self, name, Parameter(_creation.empty(shape, **kw)))
                    names.append(name)
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self._init_flat_weights()
        self.reset_parameters()

    @property
    def all_weights(self):
        """The parameters grouped per (layer, direction), in PyTorch's order."""
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def flatten_parameters(self):
        """A no-op: jitorch keeps each weight as its own array (cuDNN's packed layout does not apply)."""

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    # -- PyTorch's argument checks ---------------------------------------------------------------------------------
    def check_input(self, input, batch_sizes=None):
        dtype = self._flat_weights[0].dtype
        if input.dtype != dtype and not any(_autocast_state.enabled.values()):
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype ({dtype}). Convert input: "
                             f"input.to({dtype}), or convert model: model.to({input.dtype})")
        if input.dim() != 3:
            raise RuntimeError(f"input must have 3 dimensions, got {input.dim()}")
        if self.input_size != input.size(-1):
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got "
                               f"{input.size(-1)}")

    def get_expected_hidden_size(self, input, batch_sizes=None):
        mini_batch = input.size(0) if self.batch_first else input.size(1)
        num_directions = 2 if self.bidirectional else 1
        size = self.proj_size if self.proj_size > 0 else self.hidden_size
        return (self.num_layers * num_directions, mini_batch, size)

    def check_hidden_size(self, hx, expected_hidden_size, msg="Expected hidden size {}, got {}"):
        if tuple(hx.size()) != tuple(expected_hidden_size):
            raise RuntimeError(msg.format(expected_hidden_size, list(hx.size())))

    def check_forward_args(self, input, hidden, batch_sizes=None):
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden, self.get_expected_hidden_size(input, batch_sizes))

    def permute_hidden(self, hx, permutation):
        return hx

    def extra_repr(self):
        s = "{input_size}, {hidden_size}"
        if self.proj_size != 0:
            s += ", proj_size={proj_size}"
        if self.num_layers != 1:
            s += ", num_layers={num_layers}"
        if self.bias is not True:
            s += ", bias={bias}"
        if self.batch_first is not False:
            s += ", batch_first={batch_first}"
        if self.dropout != 0:
            s += ", dropout={dropout}"
        if self.bidirectional is not False:
            s += ", bidirectional={bidirectional}"
        return s.format(**self.__dict__)

    # -- forward ---------------------------------------------------------------------------------------------------
    def _batched(self, input, name):
        if input.dim() not in (2, 3):
            instead = " tensor instead" if name == "RNN" else " instead"
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.dim()}D{instead}")
        is_batched = input.dim() == 3
        return (input if is_batched else input.unsqueeze(0 if self.batch_first else 1)), is_batched

    def _zeros(self, input, size):
        num_directions = 2 if self.bidirectional else 1
        batch = input.size(0) if self.batch_first else input.size(1)
        return _creation.zeros((self.num_layers * num_directions, batch, size), dtype=input.dtype,
                               device=input.device)

    def _run(self, input, states):
        """Run the stack on a batched input; ``states`` are ``(layers * directions, B, H)`` tensors."""
        x = input.transpose(0, 1) if self.batch_first else input
        # Under CPU autocast PyTorch runs an LSTM without projections through oneDNN (mkldnn_rnn_layer, on the
        # lower-precision list: input, states and weights cast, every output in the autocast dtype), and an Elman RNN
        # through linear cells whose outputs (bias included) are in the autocast dtype. GRU and projected or packed
        # LSTMs mix a float32 state into each step: run_stack casts each scan row's inputs as PyTorch's cells do.
        lowered = x.device.type == "cpu" and x.numel() and (
            self.mode in ("RNN_TANH", "RNN_RELU") or self.mode == "LSTM" and self.proj_size == 0)
        run = _run_stack_lowered if lowered else _run_stack
        output, finals = run(x, *states, *self._flat_weights, mode=self.mode, layers=self.num_layers,
                             directions=2 if self.bidirectional else 1, bias=self.bias, proj=self.proj_size > 0,
                             dropout=self.dropout, training=self.training)
        return (output.transpose(0, 1) if self.batch_first else output), finals

    def _single_state_forward(self, input, hx, name):
        if is_packed(input):
            hx = packed_zeros(self, input, self.hidden_size) if hx is None else hx
            check_packed(self, input, (hx,), (self.hidden_size,))
            output, (h,) = run_packed(self, input, (hx,))
            return output, h
        input, is_batched = self._batched(input, name)
        if hx is not None:
            if is_batched and hx.dim() != 3:
                raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got {hx.dim()}-D tensor")
            if not is_batched:
                if hx.dim() != 2:
                    raise RuntimeError(f"For unbatched 2-D input, hx should also be 2-D but got {hx.dim()}-D tensor")
                hx = hx.unsqueeze(1)
        else:
            hx = self._zeros(input, self.hidden_size)
        self.check_forward_args(input, hx)
        output, (h,) = self._run(input, (hx,))
        if not is_batched:
            output, h = output.squeeze(0 if self.batch_first else 1), h.squeeze(1)
        return output, h


def _run_stack(x, *tensors, mode, layers, directions, bias, proj, dropout, training):
    n_states = 2 if mode == "LSTM" else 1
    return run_stack(mode, x, tensors[:n_states], list(tensors[n_states:]), layers, directions, bias, proj, dropout,
                     training)


_run_stack_lowered = autocast_lower(_run_stack)


class RNN(RNNBase):
    """Elman RNN: ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` with ``nonlinearity`` tanh or relu.

    ``RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh', bias=True, batch_first=False, dropout=0.0,
    bidirectional=False)``; ``forward(input, hx=None)`` returns ``(output, h_n)``.
    """

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            self.nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            self.nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if self.nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif self.nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{self.nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__(mode, *args, **kwargs)

    def forward(self, input, hx=None):
        self._update_flat_weights()
        return self._single_state_forward(input, hx, "RNN")


class GRU(RNNBase):
    """Gated recurrent unit (gates r, z, n in PyTorch's order); ``forward(input, hx=None)`` -> ``(output, h_n)``."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)

    def forward(self, input, hx=None):
        self._update_flat_weights()
        return self._single_state_forward(input, hx, "GRU")


class LSTM(RNNBase):
    """Long short-term memory (gates i, f, g, o); ``proj_size > 0`` projects each hidden state (``weight_hr``).

    ``forward(input, hx=None)`` with ``hx = (h_0, c_0)`` returns ``(output, (h_n, c_n))``.
    """

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)

    def get_expected_cell_size(self, input, batch_sizes=None):
        mini_batch = input.size(0) if self.batch_first else input.size(1)
        return (self.num_layers * (2 if self.bidirectional else 1), mini_batch, self.hidden_size)

    def check_forward_args(self, input, hidden, batch_sizes=None):
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden[0], self.get_expected_hidden_size(input, batch_sizes),
                               "Expected hidden[0] size {}, got {}")
        self.check_hidden_size(hidden[1], self.get_expected_cell_size(input, batch_sizes),
                               "Expected hidden[1] size {}, got {}")

    def forward(self, input, hx=None):
        self._update_flat_weights()
        real_hidden = self.proj_size if self.proj_size > 0 else self.hidden_size
        if is_packed(input):
            if hx is None:
                hx = (packed_zeros(self, input, real_hidden), packed_zeros(self, input, self.hidden_size))
            check_packed(self, input, tuple(hx), (real_hidden, self.hidden_size))
            return run_packed(self, input, tuple(hx))
        input, is_batched = self._batched(input, "LSTM")
        if hx is None:
            hx = (self._zeros(input, real_hidden), self._zeros(input, self.hidden_size))
        elif is_batched:
            if hx[0].dim() != 3 or hx[1].dim() != 3:
                raise RuntimeError(f"For batched 3-D input, hx and cx should also be 3-D but got ({hx[0].dim()}-D, "
                                   f"{hx[1].dim()}-D) tensors")
        else:
            if hx[0].dim() != 2 or hx[1].dim() != 2:
                raise RuntimeError(f"For unbatched 2-D input, hx and cx should also be 2-D but got ({hx[0].dim()}-D, "
                                   f"{hx[1].dim()}-D) tensors")
            hx = (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
        self.check_forward_args(input, hx)
        output, (h, c) = self._run(input, tuple(hx))
        if not is_batched:
            output, h, c = output.squeeze(0 if self.batch_first else 1), h.squeeze(1), c.squeeze(1)
        return output, (h, c)


# -- cells ------------------------------------------------------------------------------------------------------------
class RNNCellBase(Module):
    """Parameters and repr shared by the single-step cells."""

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        kw = {"device": device, "dtype": dtype}
        self.weight_ih = Parameter(_creation.empty((num_chunks * hidden_size, input_size), **kw))
        self.weight_hh = Parameter(_creation.empty((num_chunks * hidden_size, hidden_size), **kw))
        if bias:
            self.bias_ih = Parameter(_creation.empty(num_chunks * hidden_size, **kw))
            self.bias_hh = Parameter(_creation.empty(num_chunks * hidden_size, **kw))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def extra_repr(self):
        s = "{input_size}, {hidden_size}"
        if "bias" in self.__dict__ and self.bias is not True:
            s += ", bias={bias}"
        if "nonlinearity" in self.__dict__ and self.nonlinearity != "tanh":
            s += ", nonlinearity={nonlinearity}"
        return s.format(**self.__dict__)

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def _prepare(self, input, hx, name, count):
        if input.dim() not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        states = hx if count == 2 else (hx,)
        if hx is not None:
            for i, value in enumerate(states):
                if value.dim() not in (1, 2):
                    what = f"hx[{i}]" if count == 2 else "hidden"
                    raise ValueError(f"{name}: Expected {what} to be 1D or 2D, got {value.dim()}D instead")
        is_batched = input.dim() == 2
        if not is_batched:
            input = input.unsqueeze(0)
        if hx is None:
            zeros = _creation.zeros((input.size(0), self.hidden_size), dtype=input.dtype, device=input.device)
            states = (zeros,) * count
        elif not is_batched:
            states = tuple(s.unsqueeze(0) for s in states)
        check_cell_shapes(name, input, states, self.input_size, self.hidden_size)
        return input, states, is_batched

    def _weights(self):
        return self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh


class RNNCell(RNNCellBase):
    """One Elman step ``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``; ``nonlinearity`` is tanh or relu."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        input, (h,), is_batched = self._prepare(input, hx, "RNNCell", 1)
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        mode = "RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU"
        (out,) = CELLS[mode](input, (h,), *self._weights())
        return out if is_batched else out.squeeze(0)


class LSTMCell(RNNCellBase):
    """One LSTM step; ``forward(input, (h, c))`` returns ``(h', c')``."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        input, states, is_batched = self._prepare(input, hx, "LSTMCell", 2)
        h, c = lstm_cell_step(input, states, *self._weights())
        return (h, c) if is_batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    """One GRU step; ``forward(input, h)`` returns ``h'``."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        input, (h,), is_batched = self._prepare(input, hx, "GRUCell", 1)
        (out,) = CELLS["GRU"](input, (h,), *self._weights())
        return out if is_batched else out.squeeze(0)
