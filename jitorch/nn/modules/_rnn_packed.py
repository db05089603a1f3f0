"""``PackedSequence`` input for ``RNN``/``LSTM``/``GRU``: each sequence runs over its own length only.

Every sequence of the batch runs through the stack separately (so a reverse direction starts at that sequence's own
last step and ``h_n`` is its state at its own end); the outputs are then packed again in the input's layout. As in
PyTorch, ``hx`` and the returned ``h_n``/``c_n`` are in the original (unsorted) batch order.
"""
from __future__ import annotations

from ... import _creation
from ...amp.autocast_mode import _state as _autocast_state
from ._rnn_steps import run_stack


def is_packed(input):
    from ..utils.rnn import PackedSequence

    return isinstance(input, PackedSequence)


def packed_zeros(module, packed, size):
    """Zero initial states ``(layers * directions, max_batch, size)`` for a packed input."""
    num_directions = 2 if module.bidirectional else 1
    batch = int(packed.batch_sizes[0])
    return _creation.zeros((module.num_layers * num_directions, batch, size), dtype=packed.data.dtype,
                           device=packed.data.device)


def check_packed(module, packed, states, sizes):
    dtype = module._flat_weights[0].dtype
    if packed.data.dtype != dtype and not any(_autocast_state.enabled.values()):  # as check_input
        raise ValueError(f"RNN input dtype ({packed.data.dtype}) does not match weight dtype ({dtype}). Convert "
                         f"input: input.to({dtype}), or convert model: model.to({packed.data.dtype})")
    if packed.data.dim() != 2:
        raise RuntimeError(f"packed input must have 2 dimensions, got {packed.data.dim()}")
    if module.input_size != packed.data.size(-1):
        raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {module.input_size}, got "
                           f"{packed.data.size(-1)}")
    num_directions = 2 if module.bidirectional else 1
    batch = int(packed.batch_sizes[0])
    for i, (state, size) in enumerate(zip(states, sizes)):
        expected = (module.num_layers * num_directions, batch, size)
        if tuple(state.size()) != expected:
            what = f"hidden[{i}]" if len(states) == 2 else "hidden"
            raise RuntimeError(f"Expected {what} size {expected}, got {list(state.size())}")


def run_packed(module, packed, states):
    """Run ``module``'s stack on ``packed``; returns ``(PackedSequence output, final states)``."""
    import jitorch
    from ..utils.rnn import PackedSequence, pad_packed_sequence

    padded, lengths = pad_packed_sequence(packed)  # (T, B, F), original batch order
    steps, batch = padded.size(0), padded.size(1)
    outputs, finals = [], []
    for i in range(batch):
        length = int(lengths[i])
        out, fin = run_stack(module.mode, padded[:length, i:i + 1], tuple(s[:, i:i + 1] for s in states),
                             module._flat_weights, module.num_layers, 2 if module.bidirectional else 1, module.bias,
                             module.proj_size > 0, module.dropout, module.training)
        if length < steps:
            out = jitorch.cat([out, out.new_zeros((steps - length,) + tuple(out.shape[1:]))], 0)
        outputs.append(out)
        finals.append(fin)
    full = jitorch.cat(outputs, 1)  # (T, B, H)
    sizes = [int(v) for v in packed.batch_sizes.tolist()]
    order = packed.sorted_indices.tolist() if packed.sorted_indices is not None else list(range(batch))
    index = [t * batch + order[j] for t, size in enumerate(sizes) for j in range(size)]
    data = full.reshape(steps * batch, full.size(-1))[jitorch.tensor(index, device=full.device)]
    final_states = tuple(jitorch.cat([fin[k] for fin in finals], 1) for k in range(len(states)))
    return PackedSequence(data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices), final_states
