"""``jitorch.nn.utils.rnn``: padding and packing variable-length sequences (``torch.nn.utils.rnn``).

A ``PackedSequence`` stores a batch of sequences time step by time step: ``data`` holds, for each step ``t``, the
``batch_sizes[t]`` sequences still running, longest first. Everything here is built from differentiable tensor ops,
so gradients flow back through packing and padding. ``RNN``/``LSTM``/``GRU`` take a ``PackedSequence`` as input.

>>> import jitorch
>>> from jitorch.nn.utils.rnn import pack_sequence, pad_packed_sequence, pad_sequence
>>> seqs = [jitorch.tensor([1, 2, 3]), jitorch.tensor([4, 5]), jitorch.tensor([6])]
>>> pad_sequence(seqs, batch_first=True)
tensor([[1, 2, 3],
        [4, 5, 0],
        [6, 0, 0]])
>>> packed = pack_sequence(seqs)
>>> packed.data, packed.batch_sizes
(tensor([1, 4, 6, 2, 5, 3]), tensor([3, 2, 1]))
>>> pad_packed_sequence(packed, batch_first=True)[1]
tensor([3, 2, 1])
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["PackedSequence", "invert_permutation", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence",
           "unpad_sequence", "pack_sequence", "unpack_sequence"]


def _jt():
    import jitorch

    return jitorch


class _PackedSequenceBase(NamedTuple):
    data: object
    batch_sizes: object
    sorted_indices: object
    unsorted_indices: object


class PackedSequence(_PackedSequenceBase):
    """``(data, batch_sizes, sorted_indices, unsorted_indices)``; see ``pack_padded_sequence``.

    ``batch_sizes`` always stays an int64 CPU tensor; ``to``/``float``/... act on ``data`` (and move the indices).
    """

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None and sorted_indices is not None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:
            # torch's two-argument form PackedSequence((data, batch_sizes)) also lands here.
            data, batch_sizes = data[0], data[1]
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def _with(self, data, move_indices=None):
        sort, unsort = self.sorted_indices, self.unsorted_indices
        if move_indices is not None and sort is not None:
            sort, unsort = sort.to(move_indices), unsort.to(move_indices)
        return type(self)(data, self.batch_sizes, sort, unsort)

    def to(self, *args, **kwargs):
        """``data.to(...)``, the indices moved to its device; ``self`` when ``data`` is unchanged (as torch)."""
        return self._converted(self.data.to(*args, **kwargs))

    def _converted(self, data):
        return self if data is self.data else self._with(data, data.device)

    def cuda(self, *args, **kwargs):
        return self._converted(self.data.cuda(*args, **kwargs))

    def cpu(self, *args, **kwargs):
        return self._converted(self.data.cpu(*args, **kwargs))

    def pin_memory(self):
        data = self.data.pin_memory()
        sort, unsort = self.sorted_indices, self.unsorted_indices
        return type(self)(data, self.batch_sizes, None if sort is None else sort.pin_memory(),
                          None if unsort is None else unsort.pin_memory())

    def double(self):
        return self.to(dtype=_jt().double)

    def float(self):
        return self.to(dtype=_jt().float)

    def half(self):
        return self.to(dtype=_jt().half)

    def long(self):
        return self.to(dtype=_jt().long)

    def int(self):
        return self.to(dtype=_jt().int)

    def short(self):
        return self.to(dtype=_jt().short)

    def char(self):
        return self.to(dtype=_jt().int8)

    def byte(self):
        return self.to(dtype=_jt().uint8)

    @property
    def is_cuda(self) -> bool:
        return self.data.is_cuda

    def is_pinned(self) -> bool:
        return self.data.is_pinned()


def invert_permutation(permutation):
    """The inverse permutation (``None`` stays ``None``)."""
    if permutation is None:
        return None
    jt = _jt()
    order = np.asarray(permutation.tolist(), dtype=np.int64)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    return jt.tensor(inverse.tolist(), dtype=jt.int64, device=permutation.device)


def _lengths_list(lengths) -> list:
    jt = _jt()
    if isinstance(lengths, jt.Tensor):
        if lengths.dim() != 1:
            raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got {lengths.dim()}D "
                               f"{lengths.device.type} {str(lengths.dtype).split('.')[-1]} tensor")
        return [int(v) for v in lengths.tolist()]
    return [int(v) for v in lengths]


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Pack a padded batch ``(T, B, *)`` (or ``(B, T, *)`` with ``batch_first``) given each sequence's length."""
    jt = _jt()
    lengths = _lengths_list(lengths)
    sorted_indices = None
    if enforce_sorted:
        if any(a < b for a, b in zip(lengths, lengths[1:])):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You "
                               "can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to "
                               "sidestep this requirement if you do not need ONNX exportability.")
    else:
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable, like torch's CPU sort
        sorted_indices = jt.tensor(order, dtype=jt.int64, device=input.device)
        lengths = [lengths[i] for i in order]
        input = input.index_select(0 if batch_first else 1, sorted_indices)
    if batch_first:
        input = input.transpose(0, 1)
    if len(lengths) != input.shape[1]:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got {len(lengths)} "
                           f"(batch_size={input.shape[1]})")
    if lengths and lengths[-1] <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' that "
                           "is <= 0")
    if lengths and lengths[0] > input.shape[0]:
        raise RuntimeError(f"Expected sequence length to be larger than or equal to {lengths[0]}, but got "
                           f"{input.shape[0]}")
    batch_sizes = [sum(1 for n in lengths if n > t) for t in range(lengths[0] if lengths else 0)]
    data = jt.cat([input[t, :bs] for t, bs in enumerate(batch_sizes)], 0)
    return PackedSequence(data, jt.tensor(batch_sizes, dtype=jt.int64), sorted_indices, None)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """Undo ``pack_padded_sequence``: returns ``(padded, lengths)`` in the original batch order."""
    jt = _jt()
    data = sequence.data
    batch_sizes = [int(v) for v in sequence.batch_sizes.tolist()]
    max_len, batch = len(batch_sizes), (batch_sizes[0] if batch_sizes else 0)
    if total_length is not None:
        if total_length < max_len:
            raise ValueError("Expected total_length to be at least the length of the longest sequence in input, but "
                             f"got total_length={total_length} and max sequence length being {max_len}")
    else:
        total_length = max_len
    rest = tuple(data.shape[1:])
    steps, offset = [], 0
    for bs in batch_sizes:
        chunk = data[offset:offset + bs]
        offset += bs
        if bs < batch:
            filler = jt.full((batch - bs,) + rest, padding_value, dtype=data.dtype, device=data.device)
            chunk = jt.cat([chunk, filler], 0)
        steps.append(chunk)
    for _ in range(total_length - max_len):
        steps.append(jt.full((batch,) + rest, padding_value, dtype=data.dtype, device=data.device))
    padded = jt.stack(steps, 0) if steps else jt.full((0, batch) + rest, padding_value, dtype=data.dtype,
                                                     device=data.device)
    lengths = [sum(1 for bs in batch_sizes if bs > b) for b in range(batch)]
    if batch_first:
        padded = padded.transpose(0, 1)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(0 if batch_first else 1, sequence.unsorted_indices)
        lengths = [lengths[i] for i in sequence.unsorted_indices.tolist()]
    return padded, jt.tensor(lengths, dtype=jt.int64)


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stack sequences of shape ``(L_i, *)`` into ``(L_max, B, *)`` (``(B, L_max, *)`` with ``batch_first``)."""
    jt = _jt()
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    if isinstance(sequences, jt.Tensor):
        sequences = sequences.unbind(0)
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    max_len = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        missing = max_len - s.shape[0]
        if missing:
            filler = jt.full((missing,) + tuple(s.shape[1:]), padding_value, dtype=s.dtype, device=s.device)
            s = jt.cat([s, filler] if padding_side == "right" else [filler, s], 0)
        padded.append(s)
    return jt.stack(padded, 0 if batch_first else 1)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """Split a padded batch back into a list of unpadded sequences."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    # Row-major copies, as torch's masked selection makes: a (T, B, *) batch's slices are strided (callers ``.view``
    # them), and writes into a sequence leave the batch as it was.
    return [seq[:length].clone(memory_format=_jt().contiguous_format)
            for seq, length in zip(padded_sequences, _lengths_list(lengths))]


def pack_sequence(sequences, enforce_sorted=True):
    """Pack a list of sequences ``(L_i, *)`` (longest first unless ``enforce_sorted=False``)."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """Undo ``pack_sequence``: a list of the original sequences."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
